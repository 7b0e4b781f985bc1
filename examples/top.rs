//! `top` for a smarm runtime (Erlang's `observer_cli`, htop's layout): once a second, the
//! scheduler threads' utilisation and the busiest actors, from `smarm::info`, in the
//! terminal. It runs the observer's demo system (`examples/common/observer_demo.rs`) plus a
//! few CPU-bound actors so that there is something to watch.
//!
//! Run: `cargo run --release --example top [-- --once | --frames N] [--top N]`. Without
//! `--once`/`--frames` it runs until Ctrl-C. On a terminal each frame clears the screen
//! (ANSI); otherwise frames are printed one after another.
//!
//! Columns: the actor's pid and registered name, its state (and what it is parked on), where
//! it waits (the blocking call's file:line), its mailbox length, resumes per second over the
//! last interval (the sort key; then the mailbox), the share of one CPU it used over the
//! interval, and its total CPU time (the runtime counts CPU time: `Builder::cpu_time`).

#[path = "common/observer_demo.rs"]
mod observer_demo;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use smarm::info::{self, ProcessInfo, ProcessState, SchedulerInfo};
use smarm::Pid;

const USAGE: &str = "usage: top [--once | --frames N] [--top N] [--interval-ms MS]";

struct Args {
    frames: Option<usize>,
    top: usize,
    interval: Duration,
}

fn args() -> Args {
    let mut a = Args { frames: None, top: 20, interval: Duration::from_secs(1) };
    let mut it = std::env::args().skip(1);
    let number = |v: Option<String>| -> u64 { v.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{USAGE}")) };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--once" => a.frames = Some(1),
            "--frames" => a.frames = Some(number(it.next()) as usize),
            "--top" => a.top = number(it.next()) as usize,
            "--interval-ms" => a.interval = Duration::from_millis(number(it.next())),
            _ => panic!("{USAGE}"),
        }
    }
    a
}

fn main() {
    let args = args();
    let rt = smarm::Runtime::builder().cpu_time(true).build().expect("runtime");
    rt.run(move || {
        let _app = observer_demo::start();
        demo_load();
        let tty = std::io::stdout().is_terminal();
        let mut prev = Sample::take();
        let mut shown = 0;
        while args.frames.map_or(true, |n| shown < n) {
            smarm::sleep(args.interval);
            let now = Sample::take();
            let frame = render(&prev, &now, args.top);
            let mut out = std::io::stdout().lock();
            if tty {
                let _ = out.write_all(b"\x1b[H\x1b[2J");
            }
            let _ = out.write_all(frame.as_bytes());
            let _ = out.flush();
            prev = now;
            shown += 1;
        }
    })
    .expect("runtime");
}

/// A few actors with different duty cycles: CPU-bound slices, then a sleep.
fn demo_load() {
    for (i, busy_ms) in [(1, 2u64), (2, 5), (3, 9)] {
        let h = smarm::spawn(move || {
            let mut x = 1u64;
            loop {
                let until = Instant::now() + Duration::from_millis(busy_ms);
                while Instant::now() < until {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    smarm::maybe_preempt();
                }
                std::hint::black_box(x);
                smarm::sleep(Duration::from_millis(10));
            }
        });
        smarm::register(format!("busy_{i}"), h.pid()).expect("register");
    }
    // Chatter: a ping-pong pair that wakes each other as fast as they can, 200 times a tick.
    let pong = smarm::spawn_actor(|mb: smarm::Mailbox<smarm::Addr<u32>>| {
        while let smarm::Envelope::Msg(reply) = mb.recv() {
            reply.send(0);
        }
    });
    smarm::register("pong", pong.pid()).expect("register");
    let ping = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
        let me = mb.addr();
        loop {
            for _ in 0..200 {
                pong.send(me.clone());
                let _ = mb.recv();
            }
            smarm::sleep(Duration::from_millis(50));
        }
    });
    smarm::register("ping", ping.pid()).expect("register");
}

/// What one frame compares with the previous one.
struct Sample {
    at: Instant,
    procs: Vec<ProcessInfo>,
    threads: Vec<SchedulerInfo>,
}

impl Sample {
    fn take() -> Sample {
        Sample { at: Instant::now(), procs: info::processes(), threads: info::schedulers() }
    }
}

/// `width` characters of `s`: cut with `…`, or padded.
fn fit(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        format!("{s:width$}")
    } else {
        let mut t: String = s.chars().take(width.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn render(prev: &Sample, now: &Sample, top: usize) -> String {
    let dt = now.at.duration_since(prev.at).as_secs_f64().max(1e-6);
    let mut f = String::new();
    let uptime = now.threads.first().map_or(0, |t| t.uptime.as_secs());
    let _ = writeln!(
        f,
        "smarm top — {} actors on {} scheduler threads, up {}:{:02}:{:02}",
        now.procs.len(),
        now.threads.len(),
        uptime / 3600,
        uptime / 60 % 60,
        uptime % 60
    );
    // Scheduler utilisation: the busy share of each thread over the interval.
    const BAR: usize = 40;
    for t in &now.threads {
        let (busy, span) = match prev.threads.get(t.index) {
            Some(p) => (t.busy().saturating_sub(p.busy()), t.uptime.saturating_sub(p.uptime)),
            None => (t.busy(), t.uptime),
        };
        let frac = if span.is_zero() { 0.0 } else { (busy.as_secs_f64() / span.as_secs_f64()).clamp(0.0, 1.0) };
        let filled = (frac * BAR as f64).round() as usize;
        let rate = |now: u64, before: Option<u64>| (now - before.unwrap_or(0).min(now)) as f64 / dt;
        let p = prev.threads.get(t.index);
        let _ = writeln!(
            f,
            "thread {:>2} [{}{}] {:5.1}%  parks/s {:>8.0}  wakes/s {:>8.0}  steals/s {:>6.0}  migrations/s {:>6.0}",
            t.index,
            "|".repeat(filled),
            " ".repeat(BAR - filled),
            frac * 100.0,
            rate(t.parks, p.map(|p| p.parks)),
            rate(t.wakes, p.map(|p| p.wakes)),
            rate(t.steals, p.map(|p| p.steals)),
            rate(t.migrations, p.map(|p| p.migrations)),
        );
    }
    // The busiest actors over the interval.
    let before: HashMap<Pid, &ProcessInfo> = prev.procs.iter().map(|p| (p.pid, p)).collect();
    let mut rows: Vec<(f64, f64, &ProcessInfo)> = now
        .procs
        .iter()
        .map(|p| {
            let b = before.get(&p.pid);
            let resumes = p.resumes - b.map_or(0, |b| b.resumes.min(p.resumes));
            let cpu = match (p.cpu_time, b.and_then(|b| b.cpu_time)) {
                (Some(c), Some(cb)) => c.saturating_sub(cb).as_secs_f64() / dt,
                (Some(c), None) => c.as_secs_f64() / dt,
                _ => 0.0,
            };
            (resumes as f64 / dt, cpu, p)
        })
        .collect();
    rows.sort_by(|a, b| {
        b.0.total_cmp(&a.0).then_with(|| b.2.mailbox_len.unwrap_or(0).cmp(&a.2.mailbox_len.unwrap_or(0)))
    });
    let _ = writeln!(
        f,
        "\n{:<11} {:<10} {:<16} {:<26} {:>6} {:>9} {:>6} {:>10}",
        "PID", "NAME", "STATE", "WAITS AT", "MBOX", "RESUMES/s", "CPU%", "CPU"
    );
    for (rate, cpu, p) in rows.iter().take(top) {
        let (state, at) = match p.state {
            ProcessState::Running => ("running".to_string(), String::new()),
            ProcessState::Runnable => ("runnable".to_string(), String::new()),
            ProcessState::Parked { kind, at } => {
                let file = at.file().rsplit('/').next().unwrap_or(at.file());
                (format!("parked:{}", kind.name()), format!("{file}:{}", at.line()))
            }
            ProcessState::Exiting => ("exiting".to_string(), String::new()),
            _ => ("?".to_string(), String::new()),
        };
        let _ = writeln!(
            f,
            "{:<11} {} {} {} {:>6} {:>9.0} {:>5.1}% {:>10}",
            p.pid.to_string(),
            fit(p.name.as_deref().unwrap_or(""), 10),
            fit(&state, 16),
            fit(&at, 26),
            p.mailbox_len.map_or("-".to_string(), |n| n.to_string()),
            rate,
            cpu * 100.0,
            p.cpu_time.map_or("-".to_string(), |c| format!("{:.1?}", c)),
        );
    }
    // Profiled sites (`smarm::profile::site`), busiest first.
    let sites = smarm::profile::sites();
    if !sites.is_empty() {
        let _ = writeln!(f, "\n{:<24} {:>10} {:>12} {:>12} {:>12}", "SITE", "COUNT", "TOTAL", "RUNNING", "PARKED");
        for s in sites.iter().take(8) {
            let d = |v: Option<std::time::Duration>| v.map_or("-".to_string(), |d| format!("{d:.1?}"));
            let _ = writeln!(
                f,
                "{} {:>10} {:>12} {:>12} {:>12}",
                fit(s.name, 24),
                s.count,
                format!("{:.1?}", s.total),
                d(s.running),
                d(s.parked)
            );
        }
    }
    f
}
