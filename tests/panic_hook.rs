//! Actor panics reach `Builder::on_actor_panic` with the actor's pid, registered name,
//! message and location (Sentry/`tracing-panic` style reporting); the hook replaces the
//! stderr report; stop requests are not panics; panics outside actors still reach the
//! process's own hook; and a user hook installed after smarm's sees actor panics while the
//! runtime keeps working.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smarm::{ActorPanic, DownReason, Pid, Runtime, SpawnOptions};

type Seen = Arc<Mutex<Vec<(Pid, Option<String>, String, Option<u32>, Option<Pid>)>>>;

fn recording_runtime(seen: &Seen) -> Runtime {
    let s = seen.clone();
    Runtime::builder()
        .threads(2)
        .on_actor_panic(move |p: &ActorPanic<'_>| {
            s.lock().unwrap().push((
                p.pid(),
                p.name().map(str::to_owned),
                p.message().to_owned(),
                p.location().map(|l| l.line()),
                smarm::try_current_pid(),
            ))
        })
        .build()
        .unwrap()
}

#[test]
fn the_hook_gets_pid_name_message_and_location_on_the_panicking_actor() {
    let seen: Seen = Default::default();
    let (named, anon) = recording_runtime(&seen)
        .run(|| {
            let named = SpawnOptions::new().name("payments").spawn(|| panic!("card declined: {}", 402));
            let named_pid = named.pid();
            assert_eq!(named.join(), Err(DownReason::Panic("card declined: 402".into())));
            let anon = smarm::spawn(|| std::panic::panic_any(7u8));
            let anon_pid = anon.pid();
            assert!(anon.join().is_err());
            (named_pid, anon_pid)
        })
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (pid, name, msg, line, on) = &seen[0];
    assert_eq!((*pid, name.as_deref(), msg.as_str()), (named, Some("payments"), "card declined: 402"));
    assert!(line.is_some_and(|l| l > 0));
    assert_eq!(*on, Some(named), "the hook runs on the panicking actor");
    let (pid, name, msg, _, _) = &seen[1];
    assert_eq!((*pid, name.as_deref(), msg.as_str()), (anon, None, "Box<dyn Any>"));
}

#[test]
fn stop_requests_are_not_panics_and_a_caught_panic_still_reaches_the_hook() {
    let seen: Seen = Default::default();
    recording_runtime(&seen)
        .run(|| {
            let victim = smarm::spawn(|| loop {
                smarm::sleep(Duration::from_millis(1));
            });
            smarm::kill(victim.pid());
            assert_eq!(victim.join(), Err(DownReason::Killed));
            let catcher = smarm::spawn(|| std::panic::catch_unwind(|| panic!("caught")).is_err());
            assert_eq!(catcher.join(), Ok(true));
        })
        .unwrap();
    let msgs: Vec<String> = seen.lock().unwrap().iter().map(|s| s.2.clone()).collect();
    assert_eq!(msgs, ["caught"], "a kill is not reported; a caught panic is (as std's hook would)");
}

// ------------------------------------------------------------------------------------------
// Output and process-wide hooks: in child processes (a panic hook is process-wide).

const CHILD_ENV: &str = "SMARM_PANIC_HOOK_CHILD";

fn run_child(mode: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "panic_hook_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child {mode} failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(stdout.contains("1 passed"), "the child did not run\nstdout:\n{stdout}");
    stderr
}

#[test]
#[ignore = "run by the tests below in a child process"]
fn panic_hook_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else { return };
    match mode.as_str() {
        "default" => {
            let rt = Runtime::builder().threads(1).build().unwrap();
            rt.run(|| SpawnOptions::new().name("reporter").spawn(|| panic!("marker 11")).join().unwrap_err()).unwrap();
        }
        "hooked" => {
            let rt = Runtime::builder().threads(1).on_actor_panic(|_| ()).build().unwrap();
            rt.run(|| smarm::spawn(|| panic!("marker 12")).join().unwrap_err()).unwrap();
        }
        "user-before" => {
            // A user hook installed before the first runtime: panics outside actors reach
            // it; actor panics go to smarm's report.
            let outside = Arc::new(Mutex::new(Vec::<String>::new()));
            let o = outside.clone();
            std::panic::set_hook(Box::new(move |info| {
                o.lock().unwrap().push(info.payload().downcast_ref::<&str>().unwrap_or(&"?").to_string());
            }));
            let rt = Runtime::builder().threads(1).build().unwrap();
            rt.run(|| {
                smarm::spawn(|| panic!("marker 13")).join().unwrap_err();
                std::thread::spawn(|| std::panic::catch_unwind(|| panic!("plain thread")).unwrap_err()).join().unwrap();
            })
            .unwrap();
            assert_eq!(*outside.lock().unwrap(), ["plain thread"]);
        }
        "user-after" => {
            // A user hook installed after smarm's replaces it: it sees actor panics (and can
            // name the actor), and the runtime keeps working (reasons, other actors).
            Runtime::builder().threads(1).build().unwrap().run(|| ()).unwrap(); // smarm's hook
            let seen = Arc::new(Mutex::new(Vec::new()));
            let s = seen.clone();
            std::panic::set_hook(Box::new(move |_| s.lock().unwrap().push(smarm::try_current_pid())));
            let rt = Runtime::builder().threads(2).build().unwrap();
            let pids = rt
                .run(|| {
                    (0..20)
                        .map(|i| {
                            let h = smarm::spawn(move || panic!("n{i}"));
                            let pid = h.pid();
                            assert_eq!(h.join(), Err(DownReason::Panic(format!("n{i}"))));
                            Some(pid)
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap();
            assert_eq!(*seen.lock().unwrap(), pids);
        }
        other => panic!("unknown mode {other}"),
    }
}

#[test]
fn the_default_report_names_the_pid_the_registered_name_and_the_location() {
    let stderr = run_child("default");
    let line = stderr.lines().find(|l| l.starts_with("smarm: actor <0.")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(line.contains("(\"reporter\") panicked at tests/panic_hook.rs:"), "{line}");
    assert!(stderr.contains(":\nmarker 11"), "{stderr}");
}

#[test]
fn an_on_actor_panic_hook_replaces_the_stderr_report() {
    let stderr = run_child("hooked");
    assert!(!stderr.contains("marker 12"), "the report was still printed:\n{stderr}");
    assert!(!stderr.contains("smarm: actor"), "{stderr}");
}

#[test]
fn panics_outside_actors_still_reach_the_hook_installed_before_smarms() {
    let stderr = run_child("user-before");
    assert!(stderr.contains("marker 13"), "the actor panic was not reported:\n{stderr}");
}

#[test]
fn a_user_hook_installed_after_smarms_sees_actor_panics_and_the_runtime_keeps_working() {
    run_child("user-after");
}
