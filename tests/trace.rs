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
