"""The simulator's fast paths keep its timeline: the direct path of a device that keeps up
with its host, and the compiled build of the module, give every task the times the generic
loop and the source give it."""

import json
import os
import subprocess
import sys

import pytest

import ascentrt as art
from ascentrt import accel
from ascentrt.backends import sim
from ascentrt.kernels import noop

ON_SIM = os.environ.get("ASCENTRT_BACKEND") == "sim"
sim_only = pytest.mark.skipif(not ON_SIM, reason="runs in the --backend sim session")

# Round-robin no-op launches with an event between streams every 8 (bench_sim's program), a
# costed kernel on part of the units, a pinned copy and a timed record: prints what happened
# when (every record's time, the end of each task, the final clock).
PROGRAM = r"""
import json, sys
import ascentrt as art
from ascentrt.kernels import noop
n = int(sys.argv[1])
streams = [art.Stream() for _ in range(4)]
h, d = art.malloc_host(1 << 16), art.malloc(1 << 16)
times, ends = [], []
for i in range(n):
    s = streams[i % 4]
    art.launch(noop, stream=s)
    if i % 8 == 7:
        streams[(i + 1) % 4].wait(s.record())
    if i % 50 == 0:
        art.launch(noop, stream=s, cost=2e-5, block_dim=4)
        art.memcpy_async(d, h, stream=streams[(i + 2) % 4])
        ev = art.Event(timing=True)
        ev.record(s)
        s.synchronize()
        times.append(ev.timestamp_ns)
for s in streams:
    s.synchronize()
print(json.dumps({"times": times, "clock": art.Device(0).now_ns(), "compiled": accel.compiled()}))
"""


def _run(pure: bool, n: int) -> dict:
    env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_PURE_PYTHON="1" if pure else "0",
               ASCENTRT_USAGE_PUBLISH="0")
    out = subprocess.run([sys.executable, "-c", "from ascentrt import accel\n" + PROGRAM, str(n)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_compiled_simulator_gives_the_timeline_of_its_source():
    pure = _run(pure=True, n=2000)
    assert "ascentrt.backends.sim" not in pure["compiled"]
    if "ascentrt.backends.sim" not in accel.built():
        pytest.skip("no compiled build here (make accel): only the source ran")
    fast = _run(pure=False, n=2000)
    assert "ascentrt.backends.sim" in fast["compiled"]
    assert fast["times"] == pure["times"] and fast["clock"] == pure["clock"]


def _timeline(stream_count: int) -> list:
    """Every record's time (after each launch) and the clock at the end of a small program,
    from its start."""
    streams = [art.Stream() for _ in range(stream_count)]
    start = art.Device(0).now_ns()
    events = []
    for i in range(40):
        s = streams[i % stream_count]
        art.launch(noop, stream=s)
        if i % 13 == 0:
            art.launch(noop, stream=s, cost=3e-6, block_dim=2)
        ev = art.Event(timing=True)
        ev.record(s)
        events.append(ev)
        if i % 8 == 7:
            streams[(i + 1) % stream_count].wait(ev)
    for s in streams:
        s.synchronize()
    return [ev.timestamp_ns - start for ev in events] + [art.Device(0).now_ns() - start]


@sim_only
def test_the_direct_path_gives_the_timeline_of_the_generic_loop(monkeypatch):
    if "ascentrt.backends.sim" in accel.compiled():
        pytest.skip("the compiled build calls its own methods natively (not patchable)")
    _timeline(4)  # (the first run's streams and events make driver allocations, charged later)
    taken = []
    run_alone = sim.SimBackend.run_alone
    monkeypatch.setattr(sim.SimBackend, "run_alone",
                        lambda self, until: taken.append(run_alone(self, until)) or taken[-1])
    direct = _timeline(4)
    assert taken.count(True) >= 20  # most launches went the direct way
    monkeypatch.setattr(sim.SimBackend, "run_alone", lambda self, until: False)
    assert _timeline(4) == direct
