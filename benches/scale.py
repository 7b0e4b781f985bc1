#!/usr/bin/env python3
"""benches/scale.py: scaling curves (issue 16 part 3), run as `python3 sweep.py scale [OPTIONS]`.

  python3 sweep.py scale [--quick] [--only spawn,ring,select,calls] [--before REV]
                         [--cargo-lock FILE] [--out-dir DIR]
      Builds benches/scale.rs (`cargo bench --bench scale --no-run`) and runs one process per
      point (see that file for what each point measures):
        spawn   N = 1,000 .. 1,000,000 actors that park, smarm and tokio: actors/s until all
                have parked, and peak RSS per actor;
        ring    N = 10 .. 100,000 actors in a ring, smarm and tokio: ns per hop;
        select  N = 0 .. 100,000 queued unwanted envelopes, smarm: ns per selective receive
                (woken 10 times before its match; a monitor's Down by recv_match and from a
                mark; a gen_server call from that actor);
        calls   C = 1 .. 10,000 concurrent clients of one server, smarm and tokio: calls/s.
      With --before REV, also builds benches/scale.rs against smarm at REV (a git worktree
      under target/, `--cfg smarm_scale_before`) and adds its `select` curves, labelled
      `..._before`: the plot then shows the selective receive before and after a change.
      Writes DIR/scale.json (every point) and DIR/scale_spawn.png, scale_ring.png,
      scale_select.png, scale_calls.png (default DIR: outputs/). Needs matplotlib (it says how
      to install it when missing). --quick: fewer, smaller points (a smoke test).

Points run one after another, never in parallel (the machine has 2 cores); do not run it
while something else builds or benchmarks.
"""

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SIZES = {
    "spawn": [1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000],
    "ring": [10, 100, 1_000, 10_000, 100_000],
    "select": [0, 10, 100, 1_000, 10_000, 100_000],
    "calls": [1, 10, 100, 1_000, 10_000],
}
QUICK = {
    "spawn": [1_000, 10_000],
    "ring": [10, 1_000],
    "select": [0, 1_000],
    "calls": [1, 100],
}
SYSTEMS = {
    "spawn": ["smarm", "tokio"],
    "ring": ["smarm", "tokio"],
    "select": ["woken", "monitor", "monitor_mark", "call"],
    "calls": ["smarm", "tokio"],
}


def cargo(args, lock, env=None, cwd=ROOT):
    cmd = (["flock", lock] if lock else []) + ["cargo"] + args
    print("scale: " + " ".join(cmd), flush=True)
    out = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit("scale: cargo failed:\n" + out.stdout[-4000:])
    return out.stdout


def build(lock, cwd=ROOT, target_dir=None, before=False):
    """Builds the scale bench; returns the path of its executable."""
    env = dict(os.environ)
    if target_dir:
        env["CARGO_TARGET_DIR"] = target_dir
    if before:
        env["RUSTFLAGS"] = (env.get("RUSTFLAGS", "") + " --cfg smarm_scale_before").strip()
    out = cargo(["bench", "--bench", "scale", "--no-run", "--message-format", "human"], lock, env, cwd)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Executable") and "scale" in line and "(" in line:
            path = line[line.rindex("(") + 1:line.rindex(")")]
            return path if os.path.isabs(path) else os.path.join(cwd, path)
    sys.exit("scale: could not find the scale executable in cargo's output:\n" + out[-2000:])


def worktree_build(rev, lock):
    """Builds benches/scale.rs of this checkout against smarm at `rev`."""
    wt = os.path.join(ROOT, "target", "scale-before")
    if os.path.exists(wt):
        subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT, check=False)
    subprocess.run(["git", "worktree", "add", "--detach", wt, rev], cwd=ROOT, check=True)
    # The bench file of this checkout (older revisions have none), registered the same way.
    with open(os.path.join(ROOT, "benches", "scale.rs")) as f:
        src = f.read()
    with open(os.path.join(wt, "benches", "scale.rs"), "w") as f:
        f.write(src)
    toml = os.path.join(wt, "Cargo.toml")
    with open(toml) as f:
        text = f.read()
    if 'name = "scale"' not in text:
        with open(toml, "a") as f:
            f.write('\n[[bench]]\nname = "scale"\nharness = false\n')
    try:
        return build(lock, cwd=wt, target_dir=os.path.join(ROOT, "target", "scale-before-target"), before=True)
    finally:
        # The executable lives in the separate target dir; the worktree is not needed again.
        subprocess.run(["git", "worktree", "remove", "--force", wt], cwd=ROOT, check=False)


def run_point(exe, mode, system, n):
    out = subprocess.run([exe, mode, system, str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit("scale: %s %s %d failed:\n%s" % (mode, system, n, out.stderr[-3000:]))
    line = out.stdout.strip().splitlines()[-1]
    point = json.loads(line)
    print("  " + line, flush=True)
    return point


def value_key(mode):
    return {"spawn": "per_sec", "ring": "ns_per_hop", "select": "ns_per_receive", "calls": "calls_per_sec"}[mode]


def series(points, mode, key=None):
    """{system: ([n...], [value...])} for one mode, sorted by n."""
    key = key or value_key(mode)
    out = {}
    for p in points:
        if p["mode"] != mode:
            continue
        xs, ys = out.setdefault(p["system"], ([], []))
        xs.append(p["n"])
        ys.append(p[key])
    for s, (xs, ys) in out.items():
        order = sorted(range(len(xs)), key=lambda i: xs[i])
        out[s] = ([xs[i] for i in order], [ys[i] for i in order])
    return out


def plot(points, out_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("scale: the plots need matplotlib: `pip install matplotlib` (or apt-get install python3-matplotlib)")
    style = {
        "smarm": dict(color="tab:blue", marker="o"),
        "tokio": dict(color="tab:orange", marker="s"),
        "woken": dict(color="tab:blue", marker="o"),
        "woken_before": dict(color="tab:blue", marker="o", linestyle="--", alpha=0.6),
        "monitor": dict(color="tab:red", marker="^"),
        "monitor_before": dict(color="tab:red", marker="^", linestyle="--", alpha=0.6),
        "monitor_mark": dict(color="tab:green", marker="v"),
        "call": dict(color="tab:purple", marker="D"),
        "call_before": dict(color="tab:purple", marker="D", linestyle="--", alpha=0.6),
    }
    labels = {
        "woken": "recv_match woken 10x before its match",
        "woken_before": "the same, before (no save marker)",
        "monitor": "monitor + recv_match for its Down",
        "monitor_before": "the same, before",
        "monitor_mark": "monitor + recv_match_from(mark) for its Down",
        "call": "gen_server call from that actor",
        "call_before": "the same, before",
    }
    written = []

    def finish(fig, name):
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    def draw(ax, data):
        for system, (xs, ys) in sorted(data.items()):
            xs_plot = [max(x, 0.5) for x in xs]  # a log axis has no 0: draw N=0 at 0.5
            ax.plot(xs_plot, ys, label=labels.get(system, system), **style.get(system, {}))
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)

    if any(p["mode"] == "spawn" for p in points):
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
        draw(a, series(points, "spawn"))
        a.set_xlabel("live actors (parked)")
        a.set_ylabel("actors/s until all have parked")
        a.set_title("Spawning actors that park (2 threads)")
        draw(b, series(points, "spawn", "rss_kib_per_actor"))
        b.set_xlabel("live actors (parked)")
        b.set_ylabel("peak RSS per actor (KiB)")
        b.set_title("Memory per parked actor")
        finish(fig, "scale_spawn.png")
    if any(p["mode"] == "ring" for p in points):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        draw(ax, series(points, "ring"))
        ax.set_yscale("log")
        ax.set_xlabel("actors in the ring")
        ax.set_ylabel("ns per hop (median of 5 runs)")
        ax.set_title("Ring hop latency (2 threads)")
        finish(fig, "scale_ring.png")
    if any(p["mode"] == "select" for p in points):
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        draw(ax, series(points, "select"))
        ax.set_yscale("log")
        ax.set_xlabel("unwanted envelopes queued ahead")
        ax.set_ylabel("ns per receive (median of 21)")
        ax.set_title("Selective receive against mailbox length (smarm, 1 thread)")
        finish(fig, "scale_select.png")
    if any(p["mode"] == "calls" for p in points):
        fig, ax = plt.subplots(figsize=(6.5, 4))
        draw(ax, series(points, "calls"))
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel("calls/s (median of 5 runs)")
        ax.set_title("One server, many clients (2 threads)")
        finish(fig, "scale_calls.png")
    return written


def main(argv):
    p = argparse.ArgumentParser(prog="sweep.py scale", description="Scaling curves and their plots.")
    p.add_argument("--quick", action="store_true", help="fewer, smaller points")
    p.add_argument("--only", default="spawn,ring,select,calls", help="modes to run (comma-separated)")
    p.add_argument("--before", metavar="REV", help="also run the select curves against smarm at REV")
    p.add_argument("--cargo-lock", metavar="FILE", help="run cargo under `flock FILE`")
    p.add_argument("--out-dir", default=os.path.join(ROOT, "outputs"), help="where JSON and PNGs go")
    p.add_argument("--plot-only", action="store_true", help="redraw the plots from DIR/scale.json")
    args = p.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    json_path = os.path.join(args.out_dir, "scale.json")
    if args.plot_only:
        with open(json_path) as f:
            points = json.load(f)["points"]
        for path in plot(points, args.out_dir):
            print("scale: wrote " + path)
        return 0
    modes = [m.strip() for m in args.only.split(",") if m.strip()]
    for m in modes:
        if m not in SIZES:
            sys.exit("scale: unknown mode %r (spawn, ring, select, calls)" % m)
    exe = build(args.cargo_lock)
    before = worktree_build(args.before, args.cargo_lock) if args.before and "select" in modes else None
    sizes = QUICK if args.quick else SIZES
    points = []
    for mode in modes:
        print("scale: %s" % mode, flush=True)
        for n in sizes[mode]:
            for system in SYSTEMS[mode]:
                points.append(run_point(exe, mode, system, n))
            if before and mode == "select":
                for system in ("woken", "monitor", "call"):
                    points.append(run_point(before, mode, system, n))
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, stdout=subprocess.PIPE, text=True).stdout.strip()
    with open(json_path, "w") as f:
        json.dump({"git": rev, "before": args.before, "quick": args.quick, "points": points}, f, indent=1)
    print("scale: wrote " + json_path)
    for path in plot(points, args.out_dir):
        print("scale: wrote " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
