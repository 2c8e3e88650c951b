"""Shared by the benchmark scripts: quick mode, repeats, medians and the JSON line of one figure."""

from __future__ import annotations

import json
import math
import os
import statistics
import sys

# `--quick` or ASCENTRT_BENCH_QUICK=1 shrinks every size and repeat count (for the tests):
# the figures then only prove that the script runs, not how fast anything is.
QUICK = "--quick" in sys.argv[1:] or os.environ.get("ASCENTRT_BENCH_QUICK", "") not in ("", "0")

FIELDS = ("name", "value", "unit", "baseline", "baseline_value", "ratio", "target", "met")


def pick(full, quick):
    """`quick` in quick mode, else `full`."""
    return quick if QUICK else full


def median(values) -> float:
    """The median of the measured values (machines are noisy: never the mean)."""
    return float(statistics.median(values))


def figure(name: str, value: float, unit: str, baseline: str, baseline_value: float, op: str,
           bound: float, goal: str, note: str | None = None) -> dict:
    """One figure as a dict; ratio is value / baseline_value and `met` checks `ratio op bound`."""
    if op not in (">=", "<="):
        raise ValueError(f"op must be '>=' or '<=', got {op!r}")
    ratio = value / baseline_value if baseline_value > 0 else None  # JSON has no infinity
    met = ratio is not None and (ratio >= bound if op == ">=" else ratio <= bound)
    line = {"name": name, "value": _round(value), "unit": unit, "baseline": baseline,
            "baseline_value": _round(baseline_value), "ratio": None if ratio is None else _round(ratio),
            "target": f"ratio {op} {bound:g} ({goal})", "met": bool(met)}
    if note:
        line["note"] = note
    return line


def emit(*args, **kwargs) -> dict:
    """Print one figure as a JSON line (see `figure`) and return it."""
    line = figure(*args, **kwargs)
    print(json.dumps(line), flush=True)
    return line


def _round(x: float) -> float:
    """Four significant digits: more would only report noise."""
    if not math.isfinite(x) or x == 0:
        return x
    return round(x, 3 - int(math.floor(math.log10(abs(x)))))
