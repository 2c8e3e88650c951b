"""The simulator's fast path keeps its timeline: the direct path of a device that keeps up
with its host gives every task the times the generic loop gives it."""

import os

import pytest

import ascentrt as art
from ascentrt import accel
from ascentrt.backends import sim
from ascentrt.kernels import noop

ON_SIM = os.environ.get("ASCENTRT_BACKEND") == "sim"
sim_only = pytest.mark.skipif(not ON_SIM, reason="runs in the --backend sim session")
# (the test swaps a method of the simulator: a compiled build calls its own methods natively)
from_source = pytest.mark.skipif("ascentrt.backends.sim" in accel.compiled(),
                                 reason="the simulator runs compiled here: the session on its "
                                        "source runs this test")


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
@from_source
def test_the_direct_path_gives_the_timeline_of_the_generic_loop(monkeypatch):
    _timeline(4)  # (the first run's streams and events make driver allocations, charged later)
    taken = []
    run_alone = sim.SimBackend.run_alone
    monkeypatch.setattr(sim.SimBackend, "run_alone",
                        lambda self, until: taken.append(run_alone(self, until)) or taken[-1])
    direct = _timeline(4)
    assert taken.count(True) >= 20  # most launches went the direct way
    monkeypatch.setattr(sim.SimBackend, "run_alone", lambda self, until: False)
    assert _timeline(4) == direct


@sim_only
def test_a_task_stepped_alone_is_one_call_of_the_engine_queue(monkeypatch):
    """The direct path takes, runs and finishes a task in one call of the engine's queue
    (step_alone), not in three (take, run, finish: each a call from the simulator into the
    engine's Python), and the timeline stays the one the generic loop gives."""
    from ascentrt.engine.stepping import ExecutorQueue
    _timeline(4)  # (see above)
    expected = _timeline(4)
    calls = {"take": 0, "run": 0, "finish": 0, "step_alone": 0}

    def counted(name):
        method = getattr(ExecutorQueue, name)

        def call(self, *args):
            calls[name] += 1
            return method(self, *args)
        return call
    for name in calls:
        monkeypatch.setattr(ExecutorQueue, name, counted(name))
    assert _timeline(4) == expected
    assert calls["step_alone"] >= 40  # most tasks went the direct way, in one call each
    assert calls["finish"] <= calls["step_alone"] // 4, calls
