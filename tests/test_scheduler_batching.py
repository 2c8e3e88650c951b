"""Batches of consecutive tasks still honour priorities and fairness between streams (semantics 1, 7)."""

from __future__ import annotations

from subprocess_util import run_program

# Shared by the programs below: one compute unit; `low` holds `count` queued kernels whose first
# one blocks on `go` (setting `started`), so that all of them reach the executor as one batch.
PRELUDE = """
import threading, time
import ascentrt as art
dev = art.set_device(0)
assert dev.properties.compute_units == 1
order = []
go, started = threading.Event(), threading.Event()

def queue_one_batch(stream, count, first_busy_s=0.0):
    hold = dev.create_stream()
    release = threading.Event()
    art.launch_host_func(release.wait, 10, stream=hold)
    stream.wait(hold.record())
    def first():
        started.set()
        assert go.wait(10)
        end = time.perf_counter() + first_busy_s  # work (not a wait): the batch outlives a slice
        while time.perf_counter() < end:
            pass
        order.append("L0")
    art.launch(first, stream=stream)
    for i in range(1, count):
        art.launch(order.append, f"L{i}", stream=stream)
    release.set()
    assert started.wait(10)
"""


def test_a_higher_priority_stream_runs_at_the_next_task_boundary_of_a_batch():
    out = run_program(PRELUDE + """
low, high = dev.create_stream(priority=7), dev.create_stream(priority=0)
queue_one_batch(low, 40)
art.launch(order.append, "H", stream=high)
go.set()
art.synchronize(timeout=20)
print(order[:3], len(order))
""", env={"ASCENTRT_COMPUTE_UNITS": "1"})
    assert out.strip() == "['L0', 'H', 'L1'] 41"


def test_an_equal_priority_stream_gets_the_executor_once_a_batch_ran_a_time_slice():
    out = run_program(PRELUDE + """
low, other = dev.create_stream(priority=3), dev.create_stream(priority=3)
queue_one_batch(low, 40, first_busy_s=0.005)   # 5 ms: longer than the engine's slice
art.launch(order.append, "E", stream=other)
go.set()
art.synchronize(timeout=20)
print(order[:3], len(order))
""", env={"ASCENTRT_COMPUTE_UNITS": "1"})
    assert out.strip() == "['L0', 'E', 'L1'] 41"


def test_a_lower_priority_stream_waits_for_the_whole_batch():
    out = run_program(PRELUDE + """
high, low = dev.create_stream(priority=1), dev.create_stream(priority=6)
queue_one_batch(high, 40, first_busy_s=0.005)
art.launch(order.append, "low", stream=low)
go.set()
art.synchronize(timeout=20)
print(order.index("low"), len(order))
""", env={"ASCENTRT_COMPUTE_UNITS": "1"})
    assert out.strip() == "40 41"


def test_a_launch_that_waited_for_the_engine_lock_gets_the_gil_handed_over():
    # A holder of the engine lock that a launch waited for hands the GIL over as it lets the
    # lock go (the launch would otherwise wait out the holder's switch interval).
    import threading
    import time

    import ascentrt as art
    from ascentrt.engine import ENGINE
    from ascentrt.kernels import noop

    stream = art.Stream()
    held, release = threading.Event(), threading.Event()

    def hold():
        with ENGINE.lock:
            held.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(5)
    threading.Timer(0.05, release.set).start()
    t0 = time.perf_counter()
    seen = []
    threading.Timer(0.02, lambda: seen.append(list(ENGINE.lock_waiters))).start()
    art.launch(noop, stream=stream)   # waits for the holder, marked as a waiter meanwhile
    waited = time.perf_counter() - t0
    holder.join()
    stream.synchronize(10)
    assert waited >= 0.04
    assert seen == [[None]]           # while it waited
    assert ENGINE.lock_waiters == []  # its own mark is gone once it had the lock: never stale
    stream.destroy()
