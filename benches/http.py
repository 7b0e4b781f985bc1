#!/usr/bin/env python3
"""benches/http.py: the load test of issue 12, run as `python3 sweep.py http [OPTIONS]`.

  python3 sweep.py http [--seconds S] [--warmup W] [--quick] [--threads 1,2] [--connections 100,1000]
                        [--bench http,echo] [--no-may] [--no-build] [--cargo-lock FILE] [--out FILE]
      Builds the servers, then for each server thread count and connection count starts each
      server on loopback (pinned: `taskset -c 0` for 1 thread, `taskset -c 0,1` for 2), waits
      for its "listening on" line, drives it from CPU 1 and stops it with SIGINT (checking that
      it exits).
        http: smarm `examples/http_hello.rs`, tokio + hyper (`benches/servers/tokio_hyper.rs`)
              and may_minihttp (built in a scratch cargo project under /tmp, left out when it
              does not build); `wrk -t1 -cC -dWs` warm-up, then `wrk -t1 -cC -dSs --latency` on
              /plaintext: requests/s, p50 and p99 latency as wrk reports them.
        echo: smarm `examples/echo.rs` and tokio (`benches/servers/tokio_echo.rs`), driven by
              `benches/servers/echo_client.rs` (64-byte messages, ping-pong per connection, W s
              warm-up then S s counted): messages/s, p50 and p99 round trip.
      Prints markdown tables with the ratio smarm/other of the same run and writes them to
      outputs/http.md (or --out). Installs wrk with apt-get when it is missing (and says so).
      Defaults: 10 s after a 2 s warm-up; --quick: 2 s after 1 s.

  python3 sweep.py http --idle N [--no-may] [--no-build] [--cargo-lock FILE] [--out FILE]
      Idle keep-alive connections: starts each HTTP server with 2 threads, reads its VmRSS,
      opens N connections from this script (in batches), sends one `GET /plaintext` on each and
      reads the response, reads VmRSS again and prints (after - before) / N in KiB per
      connection; then checks every connection still answers. Writes outputs/http_idle.md
      (or --out).

The servers are built with `cargo build --release` into $CARGO_TARGET_DIR (default target/);
--cargo-lock FILE runs every cargo command under `flock FILE` (to share a machine with other
builds). The file-descriptor limit is raised for the many connections (the servers inherit it).
"""

import argparse
import datetime
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "outputs")
MAY_DIR = "/tmp/may_minihttp_bench"
MAY_VERSION = "0.1"

# (label, cargo example or None, line prefix before "listening on")
HTTP_SERVERS = [("smarm", "http_hello", "http_hello"),
                ("tokio_hyper", "tokio_hyper_server", "tokio_hyper"),
                ("may_minihttp", None, "may_minihttp")]
ECHO_SERVERS = [("smarm", "echo", "echo"), ("tokio", "tokio_echo", "tokio_echo")]
EXAMPLES = ["http_hello", "echo", "tokio_hyper_server", "tokio_echo", "echo_client"]
ECHO_SIZE = 64
REQUEST = b"GET /plaintext HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def say(msg):
    print("http: " + msg, flush=True)


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")


def example_bin(name):
    return os.path.join(target_dir(), "release", "examples", name)


def cargo(args, cwd, lock):
    cmd = (["flock", lock] if lock else []) + ["cargo"] + args
    say(" ".join(cmd) + ("" if cwd == ROOT else "   (in %s)" % cwd))
    return subprocess.call(cmd, cwd=cwd)


def raise_fd_limit(need, want=None):
    """Raises RLIMIT_NOFILE (inherited by the servers and clients) to `want`, or as far as the
    hard limit allows when it cannot be raised; exits when that is below `need`."""
    want = max(need, want or need)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, want)), hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        sys.exit("http: need %d file descriptors per process, RLIMIT_NOFILE allows only %d" % (need, soft))
    if soft < want:
        say("RLIMIT_NOFILE raised to %d (the hard limit), not %d" % (soft, want))


def ensure_wrk():
    if shutil.which("wrk"):
        return
    say("wrk is not installed: installing it with `apt-get install -y wrk`")
    if subprocess.call(["apt-get", "install", "-y", "wrk"]) != 0:
        say("apt-get install failed; running `apt-get update` and trying again")
        subprocess.call(["apt-get", "update"])
        if subprocess.call(["apt-get", "install", "-y", "wrk"]) != 0:
            sys.exit("http: could not install wrk")


# --- may_minihttp, in a scratch project outside the repo ---------------------------------

MAY_CARGO_TOML = """[package]
name = "may_minihttp_bench"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
may_minihttp = "%s"
may = "0.3"

[workspace]
""" % MAY_VERSION

MAY_MAIN_RS = r'''// Generated by smarm's benches/http.py: may_minihttp's hello world in the TechEmpower shape,
// the same responses as smarm's examples/http_hello.rs. Usage: may_minihttp_bench ADDR [--threads N]
use std::io::{self, Write};

use may_minihttp::{HttpService, HttpServiceFactory, Request, Response};

struct Hello;

impl HttpService for Hello {
    fn call(&mut self, req: Request, rsp: &mut Response) -> io::Result<()> {
        match req.path() {
            "/plaintext" => rsp.header("Content-Type: text/plain").body("Hello, World!"),
            "/json" => rsp.header("Content-Type: application/json").body("{\"message\":\"Hello, World!\"}"),
            _ => {
                rsp.status_code(404, "Not Found");
            }
        }
        Ok(())
    }
}

struct Factory;

impl HttpServiceFactory for Factory {
    type Service = Hello;
    fn new_service(&self, _: usize) -> Hello {
        Hello
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).cloned().expect("usage: may_minihttp_bench ADDR [--threads N]");
    let threads = match args.iter().position(|a| a == "--threads") {
        Some(i) => args[i + 1].parse().expect("--threads N"),
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    may::config().set_workers(threads);
    let server = Factory.start(&addr).expect("bind");
    println!("may_minihttp: listening on {}", addr);
    let _ = io::stdout().flush();
    server.join().unwrap();
}
'''


def build_may(lock):
    """Generates and builds the may_minihttp server; returns (binary or None, note)."""
    os.makedirs(os.path.join(MAY_DIR, "src"), exist_ok=True)
    for rel, text in (("Cargo.toml", MAY_CARGO_TOML), ("src/main.rs", MAY_MAIN_RS)):
        path = os.path.join(MAY_DIR, rel)
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as f:
                f.write(text)
    log = os.path.join(MAY_DIR, "build.log")
    tdir = os.path.join(MAY_DIR, "target")
    cmd = (["flock", lock] if lock else []) + ["cargo", "build", "--release", "--target-dir", tdir]
    say(" ".join(cmd) + "   (in %s, log %s)" % (MAY_DIR, log))
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=MAY_DIR, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = open(log).read().strip().splitlines()[-15:]
        errs = [line for line in tail if "error" in line] or tail[-3:]
        note = "may_minihttp did not build here (cargo exit %d): %s" % (rc, " | ".join(errs))
        say(note + "; its rows are left out")
        return None, note
    version = "?"
    lockfile = os.path.join(MAY_DIR, "Cargo.lock")
    if os.path.exists(lockfile):
        m = re.search(r'name = "may_minihttp"\nversion = "([^"]+)"', open(lockfile).read())
        if m:
            version = m.group(1)
    return os.path.join(tdir, "release", "may_minihttp_bench"), "may_minihttp %s (crates.io, built in %s)" % (
        version, MAY_DIR)


# --- servers ------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A server process pinned to `cpus`, started and stopped around one measurement."""

    def __init__(self, label, binary, prefix, threads, cpus, needs_port=False):
        self.label, self.prefix = label, prefix
        # may_minihttp installs no SIGINT handler: the signal's default action ends it.
        self.sigint_kills = label == "may_minihttp"
        addr = "127.0.0.1:%d" % (free_port() if needs_port else 0)
        self.stderr = tempfile.TemporaryFile()
        cmd = ["taskset", "-c", cpus, binary, addr, "--threads", str(threads)]
        # SIGINT at its default action, as from a terminal (a shell's background job ignores it).
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.port = None
        got = threading.Event()

        def drain():
            for line in self.proc.stdout:
                m = re.search(r"listening on .*:(\d+)\s*$", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    got.set()
            got.set()

        threading.Thread(target=drain, daemon=True).start()
        if not got.wait(20) or self.port is None:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("%s: no 'listening on' line (exit %s); stderr: %s" % (
                label, self.proc.returncode, self.stderr_tail()))
        # A server that prints before it accepts is still ready: connect until it answers.
        deadline = time.time() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    self.stop()
                    raise RuntimeError("%s: port %d does not accept connections" % (label, self.port))
                time.sleep(0.05)

    def cpu_seconds(self):
        """User + system CPU time the server has used so far (all its threads)."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks

    def stderr_tail(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace").strip()[-600:]

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS for pid %d" % self.proc.pid)

    def stop(self):
        """SIGINT, then waits up to 10 s; returns a problem string or None."""
        if self.proc.poll() is not None:
            return "%s had already exited (status %s): %s" % (self.label, self.proc.returncode, self.stderr_tail())
        self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "%s did not exit within 10 s of SIGINT (killed)" % self.label
        if rc == 0 or (self.sigint_kills and rc == -signal.SIGINT):
            return None
        return "%s exited with status %d after SIGINT: %s" % (self.label, rc, self.stderr_tail())


# --- clients ------------------------------------------------------------------------------

def to_us(value, unit):
    return float(value) * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6, "m": 60e6}[unit]


PIPELINE_LUA = """
init = function(args)
   local r = {}
   for i = 1, tonumber(args[1]) do
      r[i] = wrk.format(nil, "/plaintext")
   end
   req = table.concat(r)
end
request = function()
   return req
end
"""


def run_wrk(port, conns, seconds, warmup, depth=1):
    """wrk on /plaintext; `depth` > 1 pipelines that many requests per write (TechEmpower's
    plaintext test uses 16), with wrk's usual pipeline script."""
    url = "http://127.0.0.1:%d/plaintext" % port
    base = ["taskset", "-c", "1", "wrk", "-t1", "-c%d" % conns]
    tail = [url]
    if depth > 1:
        script = os.path.join(tempfile.gettempdir(), "smarm_wrk_pipeline.lua")
        with open(script, "w") as f:
            f.write(PIPELINE_LUA)
        base += ["-s", script]
        tail = [url, "--", str(depth)]
    if warmup > 0:
        subprocess.run(base + ["-d%gs" % warmup] + tail, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = subprocess.run(base + ["-d%gs" % seconds, "--latency"] + tail, capture_output=True, text=True).stdout
    res = {"raw": out}
    m = re.search(r"Requests/sec:\s*([\d.]+)", out)
    res["rate"] = float(m.group(1)) if m else None
    for q in ("50", "99"):
        m = re.search(r"^\s*%s%%\s+([\d.]+)(ns|us|ms|s|m)\s*$" % q, out, re.M)
        res["p" + q] = to_us(m.group(1), m.group(2)) if m else None
    if res["p50"] is not None and res["p99"] is not None and res["p99"] < res["p50"]:
        # wrk's histogram sometimes prints 0.00us for the upper quantiles of pipelined runs.
        res["p99"] = None
    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors += sum(int(x) for x in m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        errors += int(m.group(1))
    res["errors"] = errors
    if res["rate"] is None:
        res["problem"] = "wrk printed no Requests/sec: " + out.strip()[-300:]
    return res


def run_echo_client(port, conns, seconds, warmup):
    cmd = ["taskset", "-c", "1", example_bin("echo_client"), "127.0.0.1:%d" % port, "--connections", str(conns),
           "--seconds", "%g" % seconds, "--warmup", "%g" % warmup, "--size", str(ECHO_SIZE)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout
    res = {"raw": out + p.stderr}
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    res["rate"] = float(fields["messages/s"]) if "messages/s" in fields else None
    res["p50"] = float(fields["p50_us"]) if "p50_us" in fields else None
    res["p99"] = float(fields["p99_us"]) if "p99_us" in fields else None
    res["errors"] = int(fields.get("errors", 0))
    if p.returncode != 0 or res["rate"] is None:
        res["problem"] = "echo_client exit %d: %s" % (p.returncode, (out + p.stderr).strip()[-300:])
    return res


# --- the sweep ----------------------------------------------------------------------------

def fmt_rate(x):
    return "-" if x is None else "{:,.0f}".format(x)


def fmt_lat(us):
    if us is None:
        return "-"
    return "%.0f us" % us if us < 1000 else "%.2f ms" % (us / 1000)


def fmt_ratio(a, b):
    return "-" if a is None or not b else "%.2f" % (a / b)


def table(title, unit, rows, servers):
    """rows: {(threads, conns, label): result}. One line per result, with smarm/this ratios."""
    lines = ["### " + title, "",
             "| server threads | connections | server | %s | p50 | p99 | errors | server CPU us/op | smarm/this %s "
             "| smarm/this p99 | smarm/this CPU/op |" % (unit, unit),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = sorted({(t, c) for t, c, _ in rows})
    for t, c in keys:
        s = rows.get((t, c, "smarm"))
        for label in servers:
            r = rows.get((t, c, label))
            if r is None:
                continue
            cpu = r.get("cpu_us")
            lines.append("| %d | %d | %s | %s | %s | %s | %d | %s | %s | %s | %s |" % (
                t, c, label, fmt_rate(r["rate"]), fmt_lat(r["p50"]), fmt_lat(r["p99"]), r["errors"],
                "-" if cpu is None else "%.2f" % cpu,
                fmt_ratio(s and s["rate"], r["rate"]), fmt_ratio(s and s["p99"], r["p99"]),
                fmt_ratio(s and s.get("cpu_us"), cpu)))
    return lines


def machine():
    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "%s, %d cores" % (model, os.cpu_count() or 0)


def commit():
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "?"


def command_line():
    if os.path.basename(sys.argv[0]) == "sweep.py":
        return "python3 sweep.py " + " ".join(sys.argv[1:])
    return "python3 benches/http.py " + " ".join(sys.argv[1:])


def header_lines(what):
    return ["# %s" % what, "",
            "- date: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "- commit: %s" % commit(),
            "- machine: %s; kernel %s" % (machine(), os.uname().release),
            "- command: `%s`" % command_line(),
            ""]


def build(args, want_may):
    if not args.no_build:
        cmd = ["build", "--release"]
        for e in EXAMPLES:
            cmd += ["--example", e]
        if cargo(cmd, ROOT, args.cargo_lock) != 0:
            sys.exit("http: cargo build failed")
    for e in EXAMPLES:
        if not os.path.exists(example_bin(e)):
            sys.exit("http: %s is missing (build without --no-build)" % example_bin(e))
    may_bin, may_note = None, None
    if want_may:
        binary = os.path.join(MAY_DIR, "target", "release", "may_minihttp_bench")
        if args.no_build and os.path.exists(binary):
            may_bin, may_note = binary, "may_minihttp (prebuilt in %s)" % MAY_DIR
        else:
            may_bin, may_note = build_may(args.cargo_lock)
    return may_bin, may_note


def sweep(args):
    benches = [b.strip() for b in args.bench.split(",") if b.strip()]
    threads = [int(x) for x in args.threads.split(",")]
    conns = [int(x) for x in args.connections.split(",")]
    raise_fd_limit(max(conns) + 1024)
    http_benches = [b for b in benches if b in ("http", "http16")]
    if http_benches:
        ensure_wrk()
    may_bin, may_note = build(args, bool(http_benches) and not args.no_may)
    notes = []
    if may_note:
        notes.append(may_note)
    elif http_benches and not args.servers:
        notes.append("may_minihttp left out (--no-may)")
    say("%g s measured after %g s warm-up per run; servers on CPU 0 (1 thread) or 0,1 (2 threads), "
        "clients on CPU 1" % (args.seconds, args.warmup))
    results = {"http": {}, "http16": {}, "echo": {}}
    for bench in benches:
        if bench in ("http", "http16"):
            servers = [(label, example_bin(ex) if ex else may_bin, prefix) for label, ex, prefix in HTTP_SERVERS]
            servers = [s for s in servers if s[1] and (not args.servers or s[0] in args.servers)]
            depth = 16 if bench == "http16" else 1
            client = lambda port, c, secs, warm, depth=depth: run_wrk(port, c, secs, warm, depth)
        elif bench == "echo":
            servers = [(label, example_bin(ex), prefix) for label, ex, prefix in ECHO_SERVERS
                       if not args.servers or label in args.servers]
            client = run_echo_client
        else:
            sys.exit("http: unknown bench %r (http, http16, echo)" % bench)
        for t in threads:
            cpus = "0" if t == 1 else "0-%d" % (t - 1)
            for c in conns:
                for label, binary, prefix in servers:
                    try:
                        srv = Server(label, binary, prefix, t, cpus, needs_port=(label == "may_minihttp"))
                    except RuntimeError as e:
                        notes.append(str(e))
                        say(str(e))
                        continue
                    # Warm-up, then the measured run with the server's CPU time read around it:
                    # CPU per operation compares the servers even when the client's one CPU is
                    # what limits the rate.
                    if args.warmup > 0:
                        client(srv.port, c, args.warmup, 0)
                    cpu0 = srv.cpu_seconds()
                    res = client(srv.port, c, args.seconds, 0)
                    cpu1 = srv.cpu_seconds()
                    if res.get("rate"):
                        res["cpu_us"] = (cpu1 - cpu0) * 1e6 / (res["rate"] * args.seconds)
                    problem = srv.stop()
                    for p in (res.get("problem"), problem):
                        if p:
                            notes.append("%s %s %dT %dc: %s" % (bench, label, t, c, p))
                            say(p)
                    results[bench][(t, c, label)] = res
                    say("%-5s %-13s %dT %5d conns: %12s/s  p50 %-9s p99 %-9s errors %d" % (
                        bench, label, t, c, fmt_rate(res["rate"]), fmt_lat(res["p50"]), fmt_lat(res["p99"]),
                        res["errors"]))
    lines = header_lines("HTTP and echo load test (issue 12)")
    if results["http"]:
        lines += table("HTTP plaintext: wrk -t1 on CPU 1, %g s after a %g s warm-up" % (args.seconds, args.warmup),
                       "requests/s", results["http"], [s[0] for s in HTTP_SERVERS]) + [""]
    if results["http16"]:
        lines += table("HTTP plaintext pipelined 16 deep (TechEmpower's plaintext shape): wrk -t1 on CPU 1, %g s "
                       "after a %g s warm-up" % (args.seconds, args.warmup),
                       "requests/s", results["http16"], [s[0] for s in HTTP_SERVERS]) + [""]
    if results["echo"]:
        lines += table("Echo: echo_client (%d-byte ping-pong per connection) on CPU 1, %g s after a %g s warm-up"
                       % (ECHO_SIZE, args.seconds, args.warmup), "messages/s", results["echo"],
                       [s[0] for s in ECHO_SERVERS]) + [""]
    lines += ["Servers: 1 thread pinned to CPU 0, 2 threads to CPUs 0-1 (sharing CPU 1 with the client). "
              "smarm/this: above 1 means smarm served more (requests/s) or had the longer p99 or used more "
              "server CPU per operation. Server CPU us/op: the server's user + system time (/proc/PID/stat) "
              "over the measured run divided by the operations served: the cost per request whatever limits "
              "the rate (with one client CPU, wrk or echo_client saturates first when a server is fast)."]
    lines += [""] + ["- " + " | ".join(n.splitlines()) for n in notes]
    write(args.out or os.path.join(OUT_DIR, "http.md"), lines)
    return 1 if any("problem" in r for b in results.values() for r in b.values()) else 0


# --- idle connections ---------------------------------------------------------------------

def open_idle(port, n, batch=500):
    """Opens n connections, one GET /plaintext answered on each; returns the sockets."""
    socks = []
    sel = selectors.DefaultSelector()
    for start in range(0, n, batch):
        pending = {}
        for _ in range(min(batch, n - start)):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
            except OSError as e:
                raise RuntimeError("connection %d of %d: connect: %s" % (len(socks) + 1, n, e)) from e
            s.setblocking(False)
            s.sendall(REQUEST)
            pending[s] = b""
            sel.register(s, selectors.EVENT_READ)
            socks.append(s)
        deadline = time.time() + 30
        while pending:
            if time.time() > deadline:
                raise RuntimeError("%d of the batch of connections %d..%d got no complete response within 30 s"
                                   % (len(pending), start + 1, len(socks)))
            for key, _ in sel.select(timeout=1):
                s = key.fileobj
                data = s.recv(4096)
                if not data:
                    raise RuntimeError("the server closed a connection before answering")
                pending[s] += data
                if complete(pending[s]):
                    if b" 200 " not in pending[s].split(b"\r\n", 1)[0]:
                        raise RuntimeError("unexpected response: %r" % pending[s][:100])
                    sel.unregister(s)
                    del pending[s]
    sel.close()
    return socks


def complete(buf):
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?i)content-length:\s*(\d+)", head)
    return len(body) >= (int(m.group(1)) if m else 0)


def check_alive(socks):
    """Sends one more request on every connection; returns how many answered."""
    sel = selectors.DefaultSelector()
    pending = {}
    for s in socks:
        try:
            s.sendall(REQUEST)
        except OSError:
            continue
        pending[s] = b""
        sel.register(s, selectors.EVENT_READ)
    ok = 0
    deadline = time.time() + 30
    while pending and time.time() < deadline:
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                pending[s] += data
            if not data or complete(pending[s]):
                ok += 1 if data else 0
                sel.unregister(s)
                del pending[s]
    sel.close()
    return ok


def idle(args):
    n = args.idle
    # This script holds one end of each connection, the server the other: n each, plus slack.
    raise_fd_limit(n + 1024, 30000)
    may_bin, may_note = build(args, not args.no_may)
    servers = [(label, example_bin(ex) if ex else may_bin, prefix) for label, ex, prefix in HTTP_SERVERS]
    lines = header_lines("Idle keep-alive connections (issue 12)")
    lines += ["%d connections, each answered one `GET /plaintext` and then held open; server with 2 threads "
              "on CPUs 0-1; RSS from /proc/PID/status VmRSS. Target for smarm: <= 16 KiB per connection." % n, "",
              "| server | VmRSS before | VmRSS after | per connection | still answering afterwards |",
              "|---|---|---|---|---|"]
    notes = [may_note] if may_note else []
    failed = False
    for label, binary, prefix in servers:
        if not binary or (args.servers and label not in args.servers):
            continue
        try:
            srv = Server(label, binary, prefix, 2, "0-1", needs_port=(label == "may_minihttp"))
        except RuntimeError as e:
            notes.append(str(e))
            failed = True
            continue
        socks = []
        try:
            time.sleep(0.5)
            before = srv.rss_kib()
            t0 = time.time()
            socks = open_idle(srv.port, n)
            took = time.time() - t0
            time.sleep(1.0)
            after = srv.rss_kib()
            alive = check_alive(socks)
            per = (after - before) / n
            say("%-13s VmRSS %d KiB -> %d KiB with %d connections (opened in %.1f s): %.2f KiB per connection; "
                "%d of %d still answer" % (label, before, after, n, took, per, alive, n))
            lines.append("| %s | %d KiB | %d KiB | %.2f KiB | %d of %d |" % (label, before, after, per, alive, n))
        except (RuntimeError, OSError) as e:
            notes.append("%s: %s" % (label, e))
            say("%s: %s" % (label, e))
            failed = True
        finally:
            for s in socks:
                s.close()
            problem = srv.stop()
            if problem:
                notes.append(problem)
                say(problem)
    lines += [""] + ["- " + " | ".join(x.splitlines()) for x in notes]
    write(args.out or os.path.join(OUT_DIR, "http_idle.md"), lines)
    return 1 if failed else 0


def write(path, lines):
    text = "\n".join(lines).rstrip() + "\n"
    print()
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    say("wrote %s" % path)


def parser():
    p = argparse.ArgumentParser(prog="sweep.py http", description="Load test: smarm's servers against "
                                "tokio + hyper and may_minihttp with wrk, and echo with echo_client.")
    p.add_argument("--seconds", type=float, default=None, help="measured seconds per run (default 10)")
    p.add_argument("--warmup", type=float, default=None, help="warm-up seconds per run (default 2)")
    p.add_argument("--quick", action="store_true", help="2 s runs after a 1 s warm-up")
    p.add_argument("--threads", default="1,2", help="server thread counts (default 1,2)")
    p.add_argument("--connections", default="100,1000", help="connection counts (default 100,1000)")
    p.add_argument("--bench", default="http,http16,echo",
                   help="http (one request at a time per connection), http16 (16 pipelined, as TechEmpower's "
                        "plaintext), echo (default: all three)")
    p.add_argument("--servers", help="only these servers, e.g. smarm,tokio_hyper (default: all)")
    p.add_argument("--no-may", action="store_true", help="leave may_minihttp out")
    p.add_argument("--no-build", action="store_true", help="use the binaries already built")
    p.add_argument("--cargo-lock", metavar="FILE", help="run cargo under `flock FILE`")
    p.add_argument("--idle", type=int, metavar="N", help="measure RSS per idle keep-alive connection instead")
    p.add_argument("--out", help="markdown output (default outputs/http.md or outputs/http_idle.md)")
    return p


def main(argv):
    args = parser().parse_args(argv)
    if args.seconds is None:
        args.seconds = 2.0 if args.quick else 10.0
    if args.warmup is None:
        args.warmup = 1.0 if args.quick else 2.0
    for tool in ("taskset", "cargo"):
        if not shutil.which(tool):
            sys.exit("http: %s is needed" % tool)
    if args.servers:
        args.servers = {x.strip() for x in args.servers.split(",") if x.strip()}
        known = {s[0] for s in HTTP_SERVERS + ECHO_SERVERS}
        if args.servers - known:
            sys.exit("http: unknown server(s) %s (known: %s)" % (", ".join(sorted(args.servers - known)),
                                                                 ", ".join(sorted(known))))
        if "may_minihttp" not in args.servers:
            args.no_may = True
    if args.idle:
        return idle(args)
    return sweep(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
