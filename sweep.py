#!/usr/bin/env python3
"""sweep.py: run the general benchmark suite and compare runs (see ../shared/BENCHMARKS.md).

  python3 sweep.py run [--save-baseline] [--out FILE] [-- EXTRA BENCH ARGS]
      Runs `cargo bench --bench general -- --json FILE` (default outputs/last_run.json);
      with --save-baseline copies the result to baseline.json at the repo root.

  python3 sweep.py regress [--baseline FILE] [--out FILE] [--scale K] [-- EXTRA BENCH ARGS]
      Re-runs the suite to a fresh JSON (default outputs/regress_run.json), compares it with
      the baseline row by row and prints every row outside the noise band.
      Exit code 1 if any row regressed, 0 otherwise.

  python3 sweep.py compare OLD.json NEW.json [--scale K]
      The same comparison between two files, without running anything.

  python3 sweep.py http [--quick] [--seconds S] [--idle N] ...
      The load test of issue 12 (benches/http.py; `python3 sweep.py http --help`): smarm's
      http_hello and echo servers against tokio + hyper, tokio and may_minihttp, driven by wrk
      and benches/servers/echo_client.rs; writes outputs/http.md (outputs/http_idle.md with --idle).

  python3 sweep.py scale [--quick] [--only spawn,ring,select,calls] [--before REV] ...
      Scaling curves (benches/scale.py; `python3 sweep.py scale --help`): spawn rate and RSS
      per actor against live actors, ring hop latency against ring size, selective receive
      against mailbox length (with --before REV: also as smarm at REV did it), calls/s against
      concurrent clients; smarm beside tokio where tokio can do the same work. Writes
      outputs/scale.json and outputs/scale_*.png.

The noise band is derived from the repeats, per row: the relative spread (max - min) / median
of the old row and of the new row, the larger of the two, times --scale (default 1). A row
moved if new/old of the medians lies outside [1 / (1 + band), 1 + band]; slower beyond the
band is a regression. For smarm rows the smarm/tokio ratio of both runs is shown too: when
both systems moved together the machine moved, not smarm.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
BASELINE = os.path.join(ROOT, "baseline.json")
LAST_RUN = os.path.join(ROOT, "outputs", "last_run.json")
REGRESS_RUN = os.path.join(ROOT, "outputs", "regress_run.json")


def run_suite(out, extra):
    """Runs the bench suite writing its JSON to `out`; exits with cargo's code on failure."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    cmd = ["cargo", "bench", "--bench", "general", "--", "--json", os.path.abspath(out)] + extra
    print("sweep: " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc != 0:
        sys.exit("sweep: the bench run failed (exit code %d)" % rc)
    if not os.path.exists(out):
        sys.exit("sweep: the bench run wrote no %s" % out)


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for r in data.get("rows", []):
        rows[(r["section"], r["threads"], r["system"])] = r
    return data, rows


def spread(row):
    """Relative spread of a row's repeats: (max - min) / median."""
    med = row["median"]
    if med <= 0:
        return 0.0
    return (row["max"] - row["min"]) / med


def smarm_tokio(rows, key):
    section, threads, _ = key
    s, t = rows.get((section, threads, "smarm")), rows.get((section, threads, "tokio"))
    if s and t and t["median"] > 0:
        return s["median"] / t["median"]
    return None


def compare(old_path, new_path, scale):
    """Prints every row outside the noise band; returns the number of regressed rows."""
    old_data, old = load(old_path)
    new_data, new = load(new_path)
    print("old: %s  (commit %s, %s, %s)" % (old_path, old_data.get("commit"), old_data.get("date"),
                                            old_data.get("machine")))
    print("new: %s  (commit %s, %s, %s)" % (new_path, new_data.get("commit"), new_data.get("date"),
                                            new_data.get("machine")))
    if old_data.get("machine") != new_data.get("machine"):
        print("note: the machines differ; absolute times are not comparable, look at smarm/tokio")
    header = "%-20s %7s %-6s %12s %12s %8s %7s  %-9s %s" % (
        "section", "threads", "system", "old median", "new median", "new/old", "band", "verdict", "smarm/tokio old -> new")
    lines, regressed, improved, within, other = [], 0, 0, 0, []
    only = {"old": [], "new": []}
    for key in list(old) + [k for k in new if k not in old]:
        o, n = old.get(key), new.get(key)
        label = "%-20s %7s %-6s" % key
        if o is None or n is None:
            only["new" if o is None else "old"].append("%s %s %s" % key)
            continue
        if o["unit"] != n["unit"]:
            other.append("%s  unit changed %s -> %s: not compared" % (label, o["unit"], n["unit"]))
            continue
        if o.get("note", "") != n.get("note", ""):
            other.append("%s  note changed %r -> %r (implementation changed)" % (label, o.get("note", ""),
                                                                               n.get("note", "")))
        if o["median"] <= 0:
            other.append("%s  old median is %r: not compared" % (label, o["median"]))
            continue
        band = max(spread(o), spread(n)) * scale
        ratio = n["median"] / o["median"]
        if ratio > 1 + band:
            verdict = "SLOWER"
            regressed += 1
        elif ratio < 1 / (1 + band):
            verdict = "faster"
            improved += 1
        else:
            within += 1
            continue
        st = ""
        if key[2] == "smarm":
            so, sn = smarm_tokio(old, key), smarm_tokio(new, key)
            if so is not None and sn is not None:
                st = "%.2f -> %.2f" % (so, sn)
        lines.append("%s %12.4g %12.4g %8.3f %6.1f%%  %-9s %s" % (label, o["median"], n["median"], ratio,
                                                                  band * 100, verdict, st))
    if lines:
        print(header)
        for line in lines:
            print(line)
    for line in other:
        print(line)
    for side, keys in sorted(only.items()):
        if keys:
            sections = sorted({k.split()[0] for k in keys})
            print("%d row(s) only in %s, not compared: %s" % (len(keys), side, ", ".join(sections)))
    print("sweep: %d row(s) slower beyond the band, %d faster, %d within the band" % (regressed, improved, within))
    return regressed


def split_extra(argv):
    """Splits argv at the first `--`: (own args, extra bench args)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def run_script(name, argv):
    """`sweep.py http|scale ...`: hands its arguments to benches/NAME.py."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("bench_" + name, os.path.join(ROOT, "benches", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main(argv)


def main():
    if sys.argv[1:2] in (["http"], ["scale"]):
        return run_script(sys.argv[1], sys.argv[2:])
    own, extra = split_extra(sys.argv[1:])
    p = argparse.ArgumentParser(description="Run and compare the general benchmark suite.")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("run", help="run the suite")
    pr.add_argument("--save-baseline", action="store_true", help="copy the result to baseline.json")
    pr.add_argument("--out", default=LAST_RUN, help="where the run's JSON goes (default outputs/last_run.json)")
    pg = sub.add_parser("regress", help="run the suite and compare with the baseline")
    pg.add_argument("--baseline", default=BASELINE, help="baseline JSON (default baseline.json)")
    pg.add_argument("--out", default=REGRESS_RUN, help="where the fresh JSON goes (default outputs/regress_run.json)")
    pg.add_argument("--scale", type=float, default=1.0, help="multiplies the noise band (default 1)")
    pc = sub.add_parser("compare", help="compare two result files")
    pc.add_argument("old")
    pc.add_argument("new")
    pc.add_argument("--scale", type=float, default=1.0, help="multiplies the noise band (default 1)")
    sub.add_parser("http", help="the HTTP and echo load test (benches/http.py; `sweep.py http --help`)")
    sub.add_parser("scale", help="scaling curves and plots (benches/scale.py; `sweep.py scale --help`)")
    args = p.parse_args(own)

    if args.cmd == "run":
        if args.save_baseline:
            # A baseline must hold every row: no section filter, full repeats.
            partial, skip = [], False
            for a in extra:
                if skip:
                    skip = False
                elif a in ("--repeats", "--json"):
                    skip = True
                elif not a.startswith("-"):
                    partial.append(a)
            if partial or "--quick" in extra:
                sys.exit("sweep: --save-baseline needs a full run (no section filter, no --quick)")
        run_suite(args.out, extra)
        if args.save_baseline:
            shutil.copyfile(args.out, BASELINE)
            print("sweep: saved %s" % BASELINE)
        return 0
    if args.cmd == "regress":
        if not os.path.exists(args.baseline):
            sys.exit("sweep: no baseline at %s (run `python3 sweep.py run --save-baseline`)" % args.baseline)
        run_suite(args.out, extra)
        return 1 if compare(args.baseline, args.out, args.scale) else 0
    if args.cmd == "compare":
        return 1 if compare(args.old, args.new, args.scale) else 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
