//! A short tour of smarm: actors spread over every scheduler thread, migrate between them
//! at blocking calls, a panicking actor is reported without disturbing the others, a
//! monitor observes a crash, a mailbox actor answers, and actors talk TCP with plain
//! blocking reads and writes. For supervision (a crashing, restarted, registered
//! gen_server) see `cargo run --release --example supervision`; for servers, `--example
//! echo` (an acceptor under a supervisor, one actor per connection) and `--example
//! http_hello` (HTTP/1.1 with keep-alive and pipelining, Ctrl-C to stop).
//!
//! Run: `cargo run --release --example tour`

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn main() {
    let rt = smarm::Runtime::builder().build().expect("runtime configuration");
    let threads = rt.threads();
    println!("smarm tour: {threads} scheduler threads");

    let report = rt
        .run(move || {
            let root = smarm::current_pid();
            println!("root actor {root} starts on thread {:?}", smarm::current_thread_index());

            // 1. Spawn actors across the scheduler threads; each yields a few times and
            //    records every thread it ran on.
            let start = Instant::now();
            let workers: Vec<_> = (0..8)
                .map(|i| {
                    smarm::spawn(move || {
                        let mut seen = BTreeSet::new();
                        for _ in 0..20_000 {
                            seen.insert(smarm::current_thread_index().unwrap());
                            smarm::yield_now();
                        }
                        (i, smarm::current_pid(), seen)
                    })
                })
                .collect();
            let mut migrated = 0;
            let mut all_threads = BTreeSet::new();
            for h in workers {
                let (i, pid, seen) = h.join().expect("worker actor");
                if seen.len() > 1 {
                    migrated += 1;
                }
                all_threads.extend(seen.iter().copied());
                println!("  actor #{i} {pid} ran on threads {seen:?}");
            }
            println!(
                "8 actors x 20,000 yields in {:?}: used threads {all_threads:?}, {migrated} of 8 migrated",
                start.elapsed()
            );

            // 2. A panicking actor is reported (with its pid) and its joiner sees why.
            let crash = smarm::spawn(|| -> u32 { panic!("deliberate failure in a worker") });
            let pid = crash.pid();
            match crash.join() {
                Err(reason) => println!("actor {pid} ended: {reason}; the runtime carries on"),
                Ok(_) => unreachable!(),
            }

            // 3. Sleeping parks the actor, not the thread.
            let t = Instant::now();
            let sleepers: Vec<_> = (0..100).map(|_| smarm::spawn(|| smarm::sleep(Duration::from_millis(20)))).collect();
            for s in sleepers {
                s.join().unwrap();
            }
            println!("100 actors slept 20 ms each, concurrently, in {:?}", t.elapsed());

            // 4. Erlang-style: a monitor sees a crash as a Down signal; messages go to a typed
            //    mailbox. (Supervisors restarting crashed servers: `--example supervision`.)
            let (_child, mref) = smarm::spawn_monitor(|| -> () { panic!("monitored crash") });
            if let smarm::Signal::Down(d) = smarm::recv_signal() {
                assert_eq!(d.monitor, mref);
                println!("monitor saw {} go down: {}", d.pid, d.reason);
            }
            // A typed mailbox with selective receive (`receive!`: patterns, guards, `after`):
            // messages no arm matches stay queued, in order. Spawned with options: registered
            // under a name before it runs, so anyone can look it up and message it by pid.
            enum Msg {
                Greet(String),
                Priority(u32),
            }
            let (reply_tx, reply_rx) = smarm::channel::oneshot();
            smarm::SpawnOptions::new().name("greeter").spawn_actor(move |mb: smarm::Mailbox<Msg>| {
                // The priority message is taken first, though it arrived second.
                let p = smarm::receive!(mb, { Msg::Priority(n) if n > 0 => n });
                let g = smarm::receive!(mb, {
                    Msg::Greet(s) => s.to_uppercase(),
                    after Duration::from_secs(1) => "nobody greeted".into(),
                });
                let _ = reply_tx.send(format!("{g} (priority {p})"));
            });
            let pid = smarm::whereis("greeter").expect("registered at spawn");
            let greeter = smarm::Addr::<Msg>::from_pid(pid).expect("a Mailbox<Msg> actor");
            greeter.send(Msg::Greet("hello mailbox".into()));
            greeter.send(Msg::Priority(1));
            println!("actor {pid} (\"greeter\") replied {:?}", reply_rx.recv().unwrap());

            // 5. Network I/O parks the actor, not the thread: an echo server actor, one actor
            //    per connection, and a client actor, all plain blocking code.
            //    (Full servers: `--example echo`, `--example http_hello`.)
            let listener = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            smarm::spawn(move || {
                use std::io::{Read, Write};
                let (mut conn, _) = listener.accept().unwrap();
                let mut buf = [0u8; 64];
                let n = conn.read(&mut buf).unwrap();
                conn.write_all(&buf[..n]).unwrap();
            });
            {
                use std::io::{Read, Write};
                let mut c = smarm::net::TcpStream::connect(addr).unwrap();
                c.write_all(b"ping over tcp").unwrap();
                let mut back = [0u8; 13];
                c.read_exact(&mut back).unwrap();
                println!("tcp echo from an actor at {addr}: {:?}", String::from_utf8_lossy(&back));
            }

            // 6. Actors still running when the root returns are shut down.
            let _orphan = smarm::spawn(|| loop {
                smarm::sleep(Duration::from_millis(5));
            });
            "root done"
        })
        .expect("root actor");
    println!("run returned {report:?}; every actor was shut down and every thread joined");
}
