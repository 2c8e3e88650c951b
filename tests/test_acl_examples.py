"""Every pyACL-style program under examples/acl runs to completion with exit status 0."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples" / "acl").glob("*.py"))


def test_there_is_an_example_per_classic_flow():
    names = {p.stem for p in EXAMPLES}
    assert {"quick_start", "multi_stream_events", "failure_mode", "callbacks", "timing",
            "memory_copies", "error_handling"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path):
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK" in proc.stdout
