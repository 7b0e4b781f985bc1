//! Feature `smarm-trace`: the scheduler threads' event rings, exported as Chrome trace JSON
//! by `info::write_trace`, hold what the actors did: named slices for their runs, the wakes
//! between them as flow arrows, spawns, exits and panics.
#![cfg(feature = "smarm-trace")]

use smarm::{Envelope, Mailbox};

#[test]
fn write_trace_records_what_actors_did() {
    let path = std::env::temp_dir().join(format!("smarm_trace_{}.json", std::process::id()));
    let p2 = path.clone();
    smarm::Runtime::builder()
        .threads(2)
        .quiet_panics(true)
        .build()
        .unwrap()
        .run(move || {
            let ponger = smarm::spawn_actor(|mb: Mailbox<(u32, smarm::Addr<u32>)>| {
                while let Envelope::Msg((n, reply)) = mb.recv() {
                    reply.send(n + 1);
                }
            });
            smarm::register("ponger", ponger.pid()).unwrap();
            let pinger = smarm::spawn_actor(move |mb: Mailbox<u32>| {
                let me = mb.addr();
                let mut n = 0;
                for _ in 0..100 {
                    ponger.send((n, me.clone()));
                    let Envelope::Msg(m) = mb.recv() else { panic!("reply") };
                    n = m;
                }
                n
            });
            smarm::register("pinger", pinger.pid()).unwrap();
            let crash = smarm::spawn(|| panic!("traced"));
            assert!(crash.join().is_err());
            // Wait until the pinger is done (it stays registered while it lives).
            while smarm::whereis("pinger").is_some() {
                smarm::yield_now();
            }
            // The ponger is alive and registered: its name labels its slices.
            smarm::info::write_trace(&p2).unwrap();
        })
        .unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(json.starts_with('{') && json.contains("\"traceEvents\":["), "{}", &json[..json.len().min(200)]);
    assert!(json.trim_end().ends_with('}'));
    for want in ["scheduler 0", "\"ph\":\"X\"", "ponger", "\"ph\":\"s\"", "\"ph\":\"f\"", "spawn", "panic"] {
        assert!(json.contains(want), "no {want:?} in the trace ({} bytes)", json.len());
    }
}

/// The runtime merges a message hand-off (the sender's wake of the receiver, its park, the
/// receiver's resume) into one record; the export must still show every park as the end of
/// a slice and every wake as an arrow from the waker's slice to the wakee's. On one thread a
/// ping-pong of `ROUNDS` round trips is `2 * ROUNDS` hand-offs.
#[test]
fn a_merged_hand_off_still_exports_its_park_wake_and_resume() {
    const ROUNDS: usize = 200;
    let path = std::env::temp_dir().join(format!("smarm_trace_handoff_{}.json", std::process::id()));
    let p2 = path.clone();
    smarm::Runtime::builder()
        .threads(1)
        .build()
        .unwrap()
        .run(move || {
            let (to_b, from_a) = smarm::channel::channel::<usize>();
            let (to_a, from_b) = smarm::channel::channel::<usize>();
            let b = smarm::spawn(move || {
                for v in &from_a {
                    to_a.send(v + 1).unwrap();
                }
            });
            smarm::register("pong", b.pid()).unwrap();
            // The pong stays alive (and named) until the trace is written.
            let keep = to_b.clone();
            let a = smarm::spawn(move || {
                let mut v = 0;
                for _ in 0..ROUNDS {
                    to_b.send(v).unwrap();
                    v = from_b.recv().unwrap();
                }
                v
            });
            assert_eq!(a.join().unwrap(), ROUNDS);
            smarm::info::write_trace(&p2).unwrap();
            drop(keep);
            b.join().unwrap();
        })
        .unwrap();
    let json = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let count = |s: &str| json.matches(s).count();
    // Each round trip parks each side once on a channel (wait kind 2): the pong's slices end
    // in those parks, and each hand-off's wake is an arrow between the two actors' slices.
    let pong_parks = json
        .split("\n")
        .filter(|l| l.contains("\"ph\":\"X\"") && l.contains("pong") && l.contains("\"end\":\"park\",\"reason\":2"))
        .count();
    assert!(pong_parks >= ROUNDS, "{pong_parks} pong slices end in a channel park, want >= {ROUNDS}");
    assert!(count("\"ph\":\"s\"") >= 2 * ROUNDS - 2, "{} wake arrows", count("\"ph\":\"s\""));
    assert_eq!(count("\"ph\":\"s\""), count("\"ph\":\"f\""));
    assert!(!json.contains("\"end\":\"interrupted\""), "a slice was cut short: a park was lost");
}
