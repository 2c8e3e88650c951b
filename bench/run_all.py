"""Run every bench/bench_*.py in its own process, collect their JSON lines, rewrite bench/RESULTS.md.

Usage: python bench/run_all.py [--quick] [--out PATH] [--only NAME ...]
--quick shrinks every benchmark (ASCENTRT_BENCH_QUICK=1) and, unless --out is given, writes
nothing: quick figures prove the scripts run, not how fast anything is. Exits non-zero when
a script fails or prints a line that is not a figure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIRED = ("name", "value", "unit", "baseline", "baseline_value", "ratio", "target", "met")
SCRIPT_TIMEOUT_S = 600


def scripts(only: list[str] | None = None) -> list[Path]:
    """The benchmark scripts, in name order (optionally only the families named)."""
    found = sorted(HERE.glob("bench_*.py"))
    if only:
        found = [p for p in found if family(p) in only or p.name in only]
    return found


def family(script: Path) -> str:
    """bench_launch.py -> launch."""
    return script.stem.removeprefix("bench_")


def parse_figures(stdout: str) -> tuple[list[dict], list[str]]:
    """The JSON figure lines of a script's output, and the lines that looked like figures but were not."""
    figures, bad = [], []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue  # free text a script prints is shown, not collected
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            bad.append(line)
            continue
        if not isinstance(obj, dict) or any(k not in obj for k in REQUIRED):
            bad.append(line)
            continue
        figures.append(obj)
    return figures, bad


def run_script(script: Path, quick: bool) -> dict:
    """Run one script; returns its figures, exit status, malformed lines, stderr and duration."""
    env = dict(os.environ)
    src = str(HERE.parent / "src")
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    if quick:
        env["ASCENTRT_BENCH_QUICK"] = "1"
    cmd = [sys.executable, str(script)] + (["--quick"] if quick else [])
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE,
                              timeout=SCRIPT_TIMEOUT_S)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = -1, exc.stdout or "", f"timed out after {SCRIPT_TIMEOUT_S} s"
        out = out.decode() if isinstance(out, bytes) else out
    figures, bad = parse_figures(out)
    return {"script": script, "rc": rc, "figures": figures, "bad": bad, "stderr": err,
            "seconds": time.perf_counter() - t0}


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import numpy
        numpy_version = numpy.__version__
    except ImportError:
        numpy_version = "not installed"
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    import ascentrt  # (the scripts' processes find the same builds, under the same settings)
    built = ascentrt.accel.compiled()
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "numpy": numpy_version,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load average at start": "n/a" if load is None else " / ".join(f"{x:.2f}" for x in load),
        "hot paths": f"compiled ({', '.join(built)}; make accel)" if built else "Python source",
    }


def _cell(x) -> str:
    if isinstance(x, bool):
        return "yes" if x else "**no**"
    if isinstance(x, float):
        return f"{x:.4g}"
    return "" if x is None else str(x).replace("|", "\\|")


def render(results: list[dict], info: dict[str, str], seconds: float) -> str:
    """RESULTS.md: the machine, then one table per family, then notes and failures."""
    out = ["# Benchmark results", "",
           "Written by `make bench` (bench/run_all.py). Each figure's baseline was measured in the",
           "same run; values are medians over repeats. ratio = value / baseline value; the target",
           "column says which way is better. The machine is shared and noisy: compare ratios,",
           "not absolute values, across runs.", "",
           "| machine | |", "|---|---|"]
    out += [f"| {k} | {_cell(v)} |" for k, v in info.items()]
    out += [f"| total run time | {seconds:.0f} s |", ""]
    notes = []
    for r in results:
        out += [f"## {family(r['script'])}", ""]
        if r["figures"]:
            out += ["| figure | value | unit | baseline | baseline value | ratio | target | met |",
                    "|---|---|---|---|---|---|---|---|"]
            for f in r["figures"]:
                out.append("| " + " | ".join(_cell(f[k]) for k in
                                             ("name", "value", "unit", "baseline", "baseline_value",
                                              "ratio", "target", "met")) + " |")
                if f.get("note"):
                    notes.append(f"- {f['name']}: {f['note']}")
        if r["rc"] != 0 or r["bad"]:
            tail = r["stderr"].strip().splitlines()[-5:]
            out += ["", f"**{r['script'].name} failed** (exit status {r['rc']}"
                    f"{', malformed lines: ' + str(len(r['bad'])) if r['bad'] else ''}):", "", "```"]
            out += tail + ["```"]
        out += ["", f"({r['script'].name}: {r['seconds']:.0f} s)", ""]
    if notes:
        out += ["## Notes", ""] + notes + [""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks, print their figures, write the results file; 1 if any script failed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shrunk sizes: checks the scripts run")
    ap.add_argument("--out", type=Path, default=None, help="results file (default bench/RESULTS.md)")
    ap.add_argument("--only", nargs="*", help="families or script names to run")
    args = ap.parse_args(argv)
    out_path = args.out or (None if args.quick else HERE / "RESULTS.md")
    info = machine()
    t0 = time.perf_counter()
    results = []
    for script in scripts(args.only):
        print(f"== {script.name}", flush=True)
        r = run_script(script, args.quick)
        for f in r["figures"]:
            print(f"   {f['name']}: {_cell(f['value'])} {f['unit']} vs {f['baseline']} "
                  f"{_cell(f['baseline_value'])} -> ratio {_cell(f['ratio'])}, "
                  f"{'met' if f['met'] else 'NOT met'} ({f['target']})", flush=True)
        if r["rc"] != 0 or r["bad"]:
            print(f"   FAILED (exit status {r['rc']}, {len(r['bad'])} malformed lines)\n"
                  + r["stderr"][-2000:], flush=True)
        results.append(r)
    seconds = time.perf_counter() - t0
    if out_path is not None:
        out_path.write_text(render(results, info, seconds))
        print(f"wrote {out_path} ({seconds:.0f} s)")
    return 1 if any(r["rc"] != 0 or r["bad"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
