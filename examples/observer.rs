//! The observer: a live web page of a running system. Starts a small demo system (a
//! supervision tree of named gen_servers, `pg` groups, actors parked on various things; see
//! `examples/common/observer_demo.rs`) and serves `smarm::observer` on loopback.
//!
//! Run: `cargo run --features observer --example observer [PORT] [--allow-kill]`, then open
//! the printed address. It runs until standard input closes (Ctrl-D) or Ctrl-C.

#[path = "common/observer_demo.rs"]
mod observer_demo;

use std::io::{Read, Write};

use smarm::observer::Observer;

fn main() {
    let mut port = 0u16;
    let mut allow_kill = false;
    for a in std::env::args().skip(1) {
        if a == "--allow-kill" {
            allow_kill = true;
        } else {
            port = a.parse().unwrap_or_else(|_| panic!("usage: observer [PORT] [--allow-kill]; not a port: {a}"));
        }
    }
    let rt = smarm::Runtime::builder().cpu_time(true).build().expect("runtime");
    rt.run(move || {
        let _app = observer_demo::start();
        let obs = Observer::builder().addr(("127.0.0.1", port)).allow_kill(allow_kill).serve().expect("observer");
        println!("observer: http://{}/", obs.local_addr());
        let _ = std::io::stdout().flush();
        // Until standard input closes; Ctrl-C ends the process.
        let _ = smarm::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).join();
        obs.stop();
    })
    .expect("runtime");
}
