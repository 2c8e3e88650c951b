"""Every example under examples/ runs as a program, exits 0 and prints what it shows; each is
run once, under `ascentrt prof`, which must write every output for it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ascentrt.profiler.export import OUTPUT_FILES

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

KEY_LINES = {
    "quickstart.py": "result: correct",
    "pipeline.py": "speedup with 3 streams:",
    "events_elapsed.py": "waited for stream",
    "failure_modes.py": "STOP: new work refused with error 107023",
    "host_functions.py": "order: as expected",
    "notify_deadlock.py": "deadlock detected (error 507950)",
    "memory_pool.py": "out of memory, explained:",
    "race.py": "racy version: result",
    "sim/two_presets.py": "h200",
    "sim/pool_saving.py": "the pool saves",
    "sim/sq_backpressure.py": "it waited for a slot",
    "sim/copy_engines.py": "ms of device time",
    "hccl/data_parallel.py": "replicas identical after every AllReduce: True",
    "hccl/mismatch.py": "rank(s) 2 differ from the other 3",
    "hccl/mpi_data_parallel.py": "replicas identical after every AllReduce: True",  # (1 rank here;
    # tests/test_hccl_mpi.py runs it under mpiexec)
    "graphs/capture_replay.py": "OK",
    "graphs/task_graph_schedule.py": "OK",
    **{f"acl/{name}.py": "OK" for name in ("callbacks", "error_handling", "failure_mode",
                                            "memory_copies", "multi_stream_events", "quick_start",
                                            "timing")},
}
ALL = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.py") if not p.name.startswith("_"))


def test_every_example_says_what_it_prints():
    assert sorted(KEY_LINES) == ALL


@pytest.mark.parametrize("name", ALL)
def test_example_runs_under_prof_prints_its_key_line_and_gets_every_output(name, tmp_path):
    # (one run per example: under the profiler, which a plain run then repeated)
    proc = subprocess.run([sys.executable, "-m", "ascentrt", "prof", "-q", "-o", str(tmp_path / "p"),
                           "--", "python", str(EXAMPLES / name)], capture_output=True, text=True,
                          timeout=180, cwd=(EXAMPLES / name).parent)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    assert KEY_LINES.get(name, "(no key line)") in proc.stdout, proc.stdout
    assert "Diagnosis" in proc.stdout
    folder = tmp_path / "p"  # (and a child-PID folder per process the example starts)
    assert sorted(f for f in os.listdir(folder) if (folder / f).is_file()) == sorted(OUTPUT_FILES)


def test_notify_deadlock_example_names_both_streams():
    proc = subprocess.run([sys.executable, str(EXAMPLES / "notify_deadlock.py")],
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0
    assert proc.stdout.count("waits at task") == 2 and "back to stream" in proc.stdout


def test_the_race_example_is_found_by_the_sanitizer_and_its_fix_is_clean():
    racy = subprocess.run([sys.executable, "-m", "ascentrt", "sanitize", "--", "python",
                           str(EXAMPLES / "race.py")], capture_output=True, text=True, timeout=90)
    assert racy.returncode == 66 and "1 race(s) found" in racy.stderr + racy.stdout
    assert "write by kernel `fill`" in racy.stderr + racy.stdout
    fixed = subprocess.run([sys.executable, "-m", "ascentrt", "sanitize", "--", "python",
                            str(EXAMPLES / "race.py"), "--fixed"], capture_output=True, text=True,
                           timeout=90)
    assert fixed.returncode == 0 and "fixed version: result right" in fixed.stdout
