//! Records what the scheduler threads did and writes it as a Chrome trace (feature
//! `smarm-trace`): `cargo run --release --features smarm-trace --example trace [FILE]`, then
//! open FILE (default `smarm-trace.json`) in <https://ui.perfetto.dev> ("Open trace file").
//!
//! The workload: a registered `ponger` answering a `pinger` (slices on the threads with wake
//! arrows between them), four workers fed through bounded channels, sleepers, and one actor
//! that panics.

use std::time::Duration;

use smarm::{Envelope, Mailbox};

fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "smarm-trace.json".to_string());
    let out = path.clone();
    smarm::run(move || {
        let ponger = smarm::spawn_actor(|mb: Mailbox<(u64, smarm::Addr<u64>)>| {
            while let Envelope::Msg((n, reply)) = mb.recv() {
                reply.send(n + 1);
            }
        });
        smarm::register("ponger", ponger.pid()).unwrap();
        let pinger = smarm::spawn_actor(move |mb: Mailbox<u64>| {
            let me = mb.addr();
            let mut n = 0;
            for _ in 0..2_000 {
                ponger.send((n, me.clone()));
                if let Envelope::Msg(m) = mb.recv() {
                    n = m;
                }
            }
        });
        smarm::register("pinger", pinger.pid()).unwrap();

        // Four workers, each fed by its own bounded channel (senders park when it is full).
        let (txs, workers): (Vec<_>, Vec<_>) = (0..4)
            .map(|_| {
                let (tx, rx) = smarm::channel::bounded::<u64>(16);
                let w = smarm::spawn(move || {
                    let mut sum = 0u64;
                    while let Ok(x) = rx.recv() {
                        sum = sum.wrapping_add((0..x).sum::<u64>());
                    }
                    sum
                });
                (tx, w)
            })
            .unzip();
        for i in 0..1_000u64 {
            txs[i as usize % txs.len()].send(i * 100).unwrap();
        }
        drop(txs);
        for w in workers {
            w.join().unwrap();
        }
        let sleepers: Vec<_> = (0..8).map(|i| smarm::spawn(move || smarm::sleep(Duration::from_millis(i)))).collect();
        for s in sleepers {
            s.join().unwrap();
        }
        let _ = smarm::spawn(|| panic!("a panic, for the trace")).join();
        while smarm::whereis("pinger").is_some() {
            smarm::sleep(Duration::from_millis(1));
        }
        smarm::info::write_trace(&out).expect("write the trace");
    });
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!("trace: {path} ({bytes} bytes); open it in https://ui.perfetto.dev");
}
