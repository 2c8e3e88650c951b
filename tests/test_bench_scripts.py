"""The benchmark scripts run (in quick mode) and print figures in the JSON line schema; not their speed."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(BENCH.glob("bench_*.py"))
TYPES = {"name": str, "value": (int, float), "unit": str, "baseline": str,
         "baseline_value": (int, float), "target": str, "met": bool}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}_module", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, ASCENTRT_BENCH_QUICK="1")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=BENCH, timeout=timeout)


def check_figure(fig: dict) -> None:
    """Every field present with its type; ratio is value / baseline_value (rounded)."""
    for key, kind in TYPES.items():
        assert key in fig, f"missing {key!r} in {fig}"
        assert isinstance(fig[key], kind), f"{key!r} has type {type(fig[key]).__name__} in {fig}"
    assert "ratio" in fig
    assert not isinstance(fig["value"], bool) and math.isfinite(fig["value"])
    assert fig["baseline_value"] > 0, fig
    assert fig["ratio"] == pytest.approx(fig["value"] / fig["baseline_value"], rel=0.01), fig


@pytest.mark.long
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_script_prints_figures_in_the_schema(script):
    proc = _run([script.name, "--quick"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("{")]
    assert lines, f"{script.name} printed no JSON line: {proc.stdout[-1000:]}"
    names = set()
    for line in lines:
        fig = json.loads(line)
        check_figure(fig)
        assert fig["name"] not in names, f"figure {fig['name']!r} printed twice"
        names.add(fig["name"])


def test_the_four_core_families_exist():
    assert {"launch", "events", "copy", "pipeline"} <= {s.stem.removeprefix("bench_") for s in SCRIPTS}


def test_figure_ratio_and_met_follow_the_target_direction():
    common = _load("_common")
    cheaper = common.figure("x", 1.0, "ns", "b", 20.0, "<=", 0.1, "10x cheaper")
    assert cheaper["ratio"] == 0.05 and cheaper["met"] is True
    assert common.figure("x", 3.0, "ns", "b", 20.0, "<=", 0.1, "10x cheaper")["met"] is False
    faster = common.figure("x", 15.0, "t/s", "b", 1.0, ">=", 10, "10x")
    assert faster["ratio"] == 15.0 and faster["met"] is True
    assert common.figure("x", 5.0, "t/s", "b", 1.0, ">=", 10, "10x")["met"] is False
    assert "ratio >= 10" in faster["target"]
    zero = common.figure("x", 5.0, "t/s", "b", 0.0, ">=", 10, "10x")
    assert zero["ratio"] is None and zero["met"] is False
    json.dumps(zero, allow_nan=False)  # still valid JSON
    with pytest.raises(ValueError):
        common.figure("x", 1.0, "ns", "b", 1.0, "<", 1, "bad operator")


def test_runner_rejects_lines_that_are_not_figures():
    runner = _load("run_all")
    good = json.dumps({"name": "a", "value": 1, "unit": "u", "baseline": "b", "baseline_value": 2,
                       "ratio": 0.5, "target": "t", "met": True})
    figures, bad = runner.parse_figures(f"hello\n{good}\n{{not json\n{{\"name\": \"no fields\"}}\n")
    assert [f["name"] for f in figures] == ["a"]
    assert len(bad) == 2


def test_runner_writes_a_results_table_per_family(tmp_path):
    out = tmp_path / "RESULTS.md"
    proc = _run([str(BENCH / "run_all.py"), "--quick", "--out", str(out),
                 "--only", "launch", "events"], timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = out.read_text()
    assert "## launch" in text and "## events" in text and "## copy" not in text
    assert "| figure | value | unit | baseline | baseline value | ratio | target | met |" in text
    for row in ("launch_noop", "throughput_one_stream", "event_handoff", "| cores |", "| numpy |"):
        assert row in text, row
