//! The observer page in a real browser: the demo system of `examples/observer.rs` runs in this
//! process, and headless Chromium loads the page from it, once to dump the DOM the page's
//! script built (the process table must list the registered servers, the tree must show the
//! supervision tree) and once to take a screenshot.
//!
//! Needs `chromium` on PATH (Debian package `chromium`); the test fails without it rather
//! than pass unseen. The screenshot is written to `observer.png` in Cargo's per-test
//! temporary directory and, if `SMARM_OBSERVER_SCREENSHOT` names a path, copied there.

#![cfg(feature = "observer")]

#[path = "../examples/common/observer_demo.rs"]
mod observer_demo;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use smarm::observer::Observer;

/// Runs chromium headless with `args` (plus the common flags and a private profile), at most
/// `limit`; returns its standard output.
fn chromium(args: &[&str], profile: &Path, limit: Duration) -> String {
    let mut cmd = Command::new("chromium");
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "`chromium` is not on PATH: this test drives a headless browser; install the Debian package \
             `chromium` (apt-get install chromium)"
        ),
        Err(e) => panic!("chromium: {e}"),
    };
    let mut stdout = child.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let start = Instant::now();
    loop {
        match child.try_wait().expect("wait for chromium") {
            Some(status) => {
                assert!(status.success(), "chromium {args:?} failed: {status}");
                break;
            }
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("chromium {args:?} did not finish within {limit:?}");
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    reader.join().expect("stdout reader")
}

#[test]
fn the_page_shows_the_demo_system_in_headless_chromium() {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let profile = tmp.join(format!("observer-chromium-profile-{}", std::process::id()));
    let shot = tmp.join("observer.png");
    let _ = std::fs::remove_file(&shot);
    let rt = smarm::Runtime::builder().threads(2).cpu_time(true).build().unwrap();
    rt.run(move || {
        let app = observer_demo::start();
        let obs = Observer::builder().serve().expect("serve");
        let url = format!("http://{}/", obs.local_addr());
        let cache = smarm::whereis("cache").expect("cache registered");
        let shot2 = shot.clone();
        let dom = smarm::spawn_blocking(move || {
            let dom = chromium(&["--virtual-time-budget=3000", "--dump-dom", &url], &profile, Duration::from_secs(90));
            // A screenshot with the cache's detail panel open (`#pid=` selects a process).
            let with_detail = format!("{url}#pid={}", cache.to_string().replace('<', "%3C").replace('>', "%3E"));
            chromium(
                &[
                    "--virtual-time-budget=8000",
                    "--hide-scrollbars",
                    "--window-size=1280,900",
                    &format!("--screenshot={}", shot2.display()),
                    &with_detail,
                ],
                &profile,
                Duration::from_secs(90),
            );
            let _ = std::fs::remove_dir_all(&profile);
            dom
        })
        .join()
        .unwrap_or_else(|e| panic!("browser run failed: {e}"));

        // The process table: a row per registered server, with its stable attributes.
        for name in ["cache", "db_pool", "web", "app", "backlog"] {
            let pid = smarm::whereis(name).unwrap_or_else(|| panic!("{name} registered"));
            assert!(dom.contains(&format!("data-name=\"{name}\"")), "no row for {name} in the DOM:\n{dom}");
            let row = dom.split("<tr ").find(|r| r.contains(&format!("data-name=\"{name}\""))).unwrap();
            let printed = pid.to_string().replace('<', "&lt;").replace('>', "&gt;");
            assert!(row.contains(&printed) || row.contains(&pid.to_string()), "{name}'s row lacks {pid}: {row}");
        }
        // The backlog's 25 unread messages are shown.
        let backlog = dom.split("<tr ").find(|r| r.contains("data-name=\"backlog\"")).unwrap();
        assert!(backlog.contains(">25<"), "backlog row: {backlog}");
        // The supervision tree, nested: db_pool under db_sup under app.
        let tree = dom.split("id=\"tree\"").nth(1).expect("tree section");
        let (app_at, db_sup_at, db_pool_at) = (
            tree.find("data-name=\"app\"").expect("app in the tree"),
            tree.find("data-id=\"db_sup\"").expect("db_sup in the tree"),
            tree.find("data-id=\"db_pool\"").expect("db_pool in the tree"),
        );
        assert!(app_at < db_sup_at && db_sup_at < db_pool_at, "tree order");
        // The pg groups.
        assert!(dom.contains("data-group=\"web_handlers\""), "pg groups missing");
        // The profiled sites of the demo's client and cruncher.
        assert!(dom.contains("data-site=\"client_request\""), "profiled sites missing");

        let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
        assert!(size > 10 * 1024, "screenshot {} is {size} bytes", shot.display());
        if let Some(out) = std::env::var_os("SMARM_OBSERVER_SCREENSHOT") {
            std::fs::copy(&shot, &out).expect("copy the screenshot");
        }
        obs.stop();
        app.stop().unwrap();
    })
    .unwrap();
}
