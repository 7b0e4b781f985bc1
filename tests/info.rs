//! `smarm::info`: each kind of blocking call is reported with its kind and the caller's own
//! source line; the process facts (name, parent, spawn site, links, monitors, mailbox,
//! resumes, stack) and the scheduler counters are right; the dump groups actors by where
//! they park; the signal dump works in a separate process. Every wait here is for an actor
//! to reach a state (checked by yielding until it has), never a sleep.

use std::io::{Read, Write};
use std::time::Duration;

use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
use smarm::info::{self, ProcessState, WaitKind};
use smarm::{Envelope, Mailbox, Pid};

/// Yields until `pid` is parked; returns its report.
fn parked(pid: Pid) -> info::ProcessInfo {
    loop {
        let p = info::process_info(pid).expect("live");
        if p.parked_on().is_some() {
            return p;
        }
        smarm::yield_now();
    }
}

/// Asserts that `pid` is parked on `kind` at this file's line `line`.
#[track_caller]
fn assert_parked(pid: Pid, kind: WaitKind, line: u32) {
    let p = parked(pid);
    let at = p.parked_at().unwrap();
    assert_eq!(p.parked_on(), Some(kind), "{p:?}");
    assert_eq!((at.file(), at.line()), (file!(), line), "{kind:?} parked at {at}");
}

struct Slow;
impl GenServer for Slow {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, _: (), from: &Caller<()>, _: &Ctx<Self>) -> CallResult<()> {
        // Never answers: the caller stays parked in its call.
        std::mem::forget(from.defer());
        CallResult::NoReply
    }
}

#[test]
fn every_blocking_call_is_reported_with_its_kind_and_the_callers_line() {
    smarm::Runtime::builder()
        .threads(2)
        .build()
        .unwrap()
        .run(|| {
            let mb_line = line!() + 2; // the recv below
            let a = smarm::spawn_actor(|mb: Mailbox<u32>| {
                let _ = mb.recv();
            });
            assert_parked(a.pid(), WaitKind::Mailbox, mb_line);

            let (tx, rx) = smarm::channel::channel::<u32>();
            let ch_line = line!() + 1;
            let c = smarm::spawn(move || rx.recv().ok());
            assert_parked(c.pid(), WaitKind::Channel, ch_line);

            let m = std::sync::Arc::new(smarm::sync::Mutex::new(0));
            let guard = m.lock();
            let m2 = m.clone();
            let mx_line = line!() + 1;
            let mx = smarm::spawn(move || *m2.lock() += 1);
            assert_parked(mx.pid(), WaitKind::Mutex, mx_line);

            let sl_line = line!() + 1;
            let sl = smarm::spawn(|| smarm::sleep(Duration::from_secs(3600)));
            assert_parked(sl.pid(), WaitKind::Sleep, sl_line);

            let l = smarm::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            // Keeps the accepted stream (in its result) so the reader below is not at EOF.
            let sk_line = line!() + 1;
            let sk = smarm::spawn(move || l.accept().map(|(s, _)| s).ok());
            assert_parked(sk.pid(), WaitKind::Socket, sk_line);
            let mut conn = smarm::net::TcpStream::connect(addr).unwrap();
            let rd_line = line!() + 3;
            let rd = smarm::spawn(move || {
                let mut b = [0u8; 1];
                conn.read(&mut b).unwrap()
            });
            assert_parked(rd.pid(), WaitKind::Socket, rd_line);

            let server = gen_server::start(Slow).unwrap();
            let s2 = server.clone();
            let call_line = line!() + 1;
            let caller = smarm::spawn(move || s2.call_timeout((), Duration::from_secs(3600)).ok());
            assert_parked(caller.pid(), WaitKind::Call, call_line);

            let h = smarm::spawn(move || c.join().ok());
            let jh_line = line!() - 1; // the spawn's closure joins at once
            let p = parked(h.pid());
            assert_eq!(p.parked_on(), Some(WaitKind::Join));
            assert_eq!(p.parked_at().unwrap().line(), jh_line, "{p:?}");

            // The dump groups each kind under its location.
            let mut out = Vec::new();
            info::dump(&mut out).unwrap();
            let dump = String::from_utf8(out).unwrap();
            for (kind, line) in [("mailbox", mb_line), ("channel", ch_line), ("mutex", mx_line), ("sleep", sl_line)] {
                let want = format!("1 actor parked on {kind} at {}:{line}:", file!());
                assert!(dump.contains(&want), "missing {want:?} in\n{dump}");
            }

            // Let everything finish.
            a.send(1);
            tx.send(1).unwrap();
            drop(guard);
            assert_eq!(h.join().unwrap(), Some(Some(1)));
            mx.join().unwrap();
            smarm::kill(sl.pid());
            smarm::kill(caller.pid());
            smarm::kill(rd.pid());
            drop(sk.join());
        })
        .unwrap();
}

#[test]
fn process_facts_and_scheduler_counters() {
    smarm::Runtime::builder()
        .threads(2)
        .cpu_time(true)
        .build()
        .unwrap()
        .run(|| {
            let me = smarm::current_pid();
            let (tx, rx) = smarm::channel::channel::<()>();
            let spawn_line = line!() + 1;
            let worker = smarm::spawn_actor_link(move |mb: Mailbox<String>| {
                // Waits on the channel, not the mailbox, so messages pile up.
                let _ = rx.recv();
                let mut n = 0;
                while let Ok(Envelope::Msg(_)) = mb.try_recv() {
                    n += 1;
                }
                n
            });
            let pid = worker.pid();
            smarm::register("worker", pid).unwrap();
            let mon = smarm::monitor(pid);
            for s in ["a", "b", "c"] {
                worker.send(s.to_string());
            }
            let p = parked(pid);
            assert_eq!(p.name.as_deref(), Some("worker"));
            assert_eq!(p.mailbox_len, Some(3));
            assert!(p.message_type.unwrap().contains("String"), "{:?}", p.message_type);
            assert_eq!(p.parent, Some(me));
            let at = p.spawned_at.unwrap();
            assert_eq!((at.file(), at.line()), (file!(), spawn_line));
            assert!(p.closure_type.unwrap().contains("process_facts_and_scheduler_counters"), "{:?}", p.closure_type);
            assert_eq!(p.links, vec![me]);
            assert_eq!(p.monitored_by, vec![me]);
            assert!(p.resumes >= 1);
            assert!(p.cpu_time.is_some());
            assert!(p.stack_size > 0 && p.stack_pages >= 1 && p.stack_pages * 4096 <= p.stack_size, "{p:?}");
            assert!(info::registered().contains(&("worker".to_string(), pid)));
            assert!(info::processes().iter().any(|q| q.pid == pid));
            let mine = info::process_info(me).unwrap();
            assert!(matches!(mine.state, ProcessState::Running), "{:?}", mine.state);

            // Fifty actors that each park once and are woken by the root.
            let waiters: Vec<_> = (0..50)
                .map(|_| {
                    let (t, r) = smarm::channel::channel::<()>();
                    (smarm::spawn(move || r.recv().unwrap()), t)
                })
                .collect();
            for (h, t) in &waiters {
                parked(h.pid());
                t.send(()).unwrap();
            }
            for (h, _) in waiters {
                h.join().unwrap();
            }
            tx.send(()).unwrap();
            // A busy thread publishes its counts once a scheduling round (and before it
            // sleeps), so the other thread's may lag: look until they arrive (an idle thread
            // publishes before it sleeps), a bounded number of times.
            let mut s = info::schedulers();
            for _ in 0..1_000_000 {
                if s.iter().map(|t| t.parks).sum::<u64>() >= 50 && s.iter().map(|t| t.wakes).sum::<u64>() >= 50 {
                    break;
                }
                smarm::yield_now();
                s = info::schedulers();
            }
            assert_eq!(s.len(), 2);
            let parks: u64 = s.iter().map(|t| t.parks).sum();
            let wakes: u64 = s.iter().map(|t| t.wakes).sum();
            assert!(parks >= 50 && wakes >= 50, "{s:?}");
            assert!(s.iter().all(|t| t.uptime >= t.idle), "{s:?}");
            let down = smarm::recv_signal();
            assert!(matches!(down, smarm::Signal::Down(d) if d.monitor == mon));
            assert!(info::process_info(pid).is_none());
        })
        .unwrap();
}

#[test]
fn a_signal_writes_the_dump_to_stderr() {
    if std::env::var("SMARM_INFO_CHILD").is_ok() {
        smarm::run(|| {
            info::dump_on_signal(info::DumpSignal::Usr1).unwrap();
            let h = smarm::spawn(|| smarm::sleep(Duration::from_secs(3600)));
            smarm::register("sleeper", h.pid()).unwrap();
            parked(h.pid());
            println!("ready");
            std::io::stdout().flush().unwrap();
            // Stay until the parent closes stdin.
            smarm::spawn_blocking(|| {
                let _ = std::io::stdin().read_to_end(&mut Vec::new());
            })
            .join()
            .unwrap();
            std::process::exit(0);
        });
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args(["a_signal_writes_the_dump_to_stderr", "--exact", "--nocapture", "--test-threads=1"])
        .env("SMARM_INFO_CHILD", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        use std::io::BufRead;
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the child ended before it was ready");
        // libtest prints "test NAME ... " before the test's own output, on the same line.
        if line.trim_end().ends_with("ready") {
            break;
        }
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGUSR1) }, 0);
    let mut stderr = child.stderr.take().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the dump's scheduler lines have arrived (the dump ends with them).
    while !String::from_utf8_lossy(&got).contains("thread 0:") {
        let n = stderr.read(&mut buf).unwrap();
        assert!(n > 0, "stderr closed before the dump: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("\"sleeper\""), "{text}");
    assert!(text.contains("parked on sleep at tests/info.rs:"), "{text}");
}
