"""Every graph example under examples/graphs runs to completion and prints OK."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples" / "graphs").glob("*.py"))


def test_there_are_graph_examples():
    assert {p.stem for p in EXAMPLES} >= {"capture_replay", "task_graph_schedule"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_graph_example_runs(path):
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("OK")
