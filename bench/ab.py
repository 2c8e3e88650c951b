"""Compare two source trees of ascentrt on the same benchmark scripts, in one run.

Usage: python bench/ab.py BEFORE_SRC AFTER_SRC [--rounds N] [--only launch copy memory]
Each round runs every chosen bench/bench_*.py once against each tree (alternating, so drift
of the machine hits both alike), with PYTHONPATH pointing at that tree's src folder. Prints,
per figure, the median value of each tree, after / before, and whether "after" is within 10%
(in the figure's good direction); one JSON line per figure and a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_once(script: Path, src: str) -> dict[str, dict]:
    """The figures one run of `script` prints, by name, with `src` first on the import path."""
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=900, cwd=str(HERE))
    if out.returncode:
        raise SystemExit(f"{script.name} failed on {src}:\n{out.stderr[-2000:]}")
    figures = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            fig = json.loads(line)
            figures[fig["name"]] = fig
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=["launch", "copy", "memory"])
    args = ap.parse_args()
    values: dict[str, dict[str, list]] = {}
    meta: dict[str, dict] = {}
    for _ in range(args.rounds):
        for fam in args.only:
            for side, src in (("before", args.before), ("after", args.after)):
                for name, fig in run_once(HERE / f"bench_{fam}.py", src).items():
                    values.setdefault(name, {"before": [], "after": []})[side].append(fig["value"])
                    meta[name] = fig
    print(f"load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| figure | unit | before (median) | after (median) | after / before | within 10% |")
    print("|---|---|---|---|---|---|")
    for name, v in values.items():
        b, a = statistics.median(v["before"]), statistics.median(v["after"])
        higher_is_better = meta[name]["target"].startswith("ratio >=")
        ratio = a / b if b else float("nan")
        ok = ratio >= 0.9 if higher_is_better else ratio <= 1.1
        print(f"| {name} | {meta[name]['unit']} | {b:.4g} | {a:.4g} | {ratio:.3f} | {'yes' if ok else '**no**'} |")
        print(json.dumps({"name": name, "before": b, "after": a, "ratio": round(ratio, 4),
                          "within_10pct": ok}), file=sys.stderr)


if __name__ == "__main__":
    main()
