"""Race sanitizer figures: what it adds to a launch when on, and whether its state stays bounded.

The launch figures time launches of a kernel with two buffer arguments (one read, one
written, declared), on one stream and alternating over two streams with the right event waits
between them, with the sanitizer on (mode log) against the same launches with it off,
interleaved in rounds. The streams wait behind a gate while the loop is timed (see
launches_ns); the note gives the same ratio with the executor running meanwhile.
The state figure counts the access records the sanitizer keeps after 100k tasks over 1000
allocations against after 10k: ordered accesses are dropped, so it must not grow.
(What it costs when off is in the launch figures: ab.py compares them with a tree before it.)
"""

from __future__ import annotations

import gc
import threading
import time

from _common import emit, median, pick

import ascentrt as art
from ascentrt import sanitizer

LAUNCHES = pick(5000, 300)
ROUNDS = pick(9, 2)
ALLOCS = pick(1000, 50)
TIMEOUT = 60.0


def kernel(out, src):
    """Nothing: the figure is the host cost of a launch."""


def launches_ns(streams, pairs, n: int, handoff: bool, gated: bool = True) -> float:
    """ns per launch of n launches of the two-buffer kernel: on one stream, or (handoff)
    alternating over two streams that hand the buffers on by events (record and wait counted).

    `gated`: the streams wait behind a kernel blocked on a gate while the loop is timed, so the
    figure is the launching thread's own cost. The cyclic garbage collector is off while it is
    timed (as timeit does): with thousands of tasks queued, a full collection costs a run
    milliseconds, and which run it lands in is chance. Ungated, the executor runs the tasks meanwhile
    and takes GIL time from the loop, but only as much as it keeps up: a fast loop leaves its
    backlog to the untimed synchronize, a slower one pays for it inside the timer, which would
    charge the executor's share to the sanitizer.
    """
    launch = art.launch
    s1, s2 = streams
    gate = threading.Event()
    if gated:
        launch(gate.wait, TIMEOUT, stream=s1)  # (s2's tasks wait on s1's events: held too)
    gc.collect()
    gc.disable()  # as timeit does: a full collection lands in one run or another by chance
    t0 = time.perf_counter_ns()
    for i in range(n // 2):
        a, b = pairs[i % len(pairs)]
        launch(kernel, b, a, stream=s1, reads=[a], writes=[b])
        if handoff:
            s2.wait(s1.record())
        launch(kernel, a, b, stream=s2 if handoff else s1, reads=[b], writes=[a])
        if handoff:
            s1.wait(s2.record())
    t1 = time.perf_counter_ns()
    gc.enable()
    gate.set()
    s1.synchronize(TIMEOUT)
    s2.synchronize(TIMEOUT)
    return (t1 - t0) / n


def on_off(streams, pairs, handoff: bool, gated: bool) -> tuple[float, float]:
    """Medians (on, off) of launches_ns, the two sides interleaved in rounds."""
    launches_ns(streams, pairs, LAUNCHES, handoff, gated)  # warm-up
    on, off = [], []
    for _ in range(ROUNDS):
        off.append(launches_ns(streams, pairs, LAUNCHES, handoff, gated))
        sanitizer.enable("log")
        on.append(launches_ns(streams, pairs, LAUNCHES, handoff, gated))
        sanitizer.disable()
    return median(on), median(off)


def records_after(tasks: int, streams, bufs) -> int:
    """Access records kept after `tasks` launches over `bufs` (ordered through events)."""
    sanitizer.disable()
    sanitizer.enable("log")
    s1, s2 = streams
    for i in range(tasks // 2):
        buf = bufs[i % len(bufs)]
        art.launch(kernel, buf, buf, stream=s1, reads=[buf], writes=[buf])
        s2.wait(s1.record())
        art.launch(kernel, buf, buf, stream=s2, reads=[buf], writes=[buf])
        s1.wait(s2.record())
    s1.synchronize(TIMEOUT)
    s2.synchronize(TIMEOUT)
    from ascentrt.engine import Hooks
    count = sum(len(r) for r in Hooks.sanitizer.shadow.values())
    sanitizer.disable()
    return count


def main() -> None:
    """Measure and print the sanitizer figures as JSON lines."""
    dev = art.set_device(0)
    streams = [dev.create_stream(), dev.create_stream()]
    pairs = [(art.malloc(4096), art.malloc(4096)) for _ in range(8)]
    for handoff, name in ((False, "sanitizer_on_launch_cost"), (True, "sanitizer_on_handoff_cost")):
        on, off = on_off(streams, pairs, handoff, gated=True)
        steady_on, steady_off = on_off(streams, pairs, handoff, gated=False)
        what = "with an event handoff between two streams" if handoff else "on one stream"
        emit(name, on, "ns/launch", "the same launches, sanitizer off", off, "<=",
             3.0, f"at most 3x the host cost of a launch of a kernel with 2 declared buffers, "
             f"{what}; median of {ROUNDS} runs of {LAUNCHES}",
             note=f"with the executor running the tasks meanwhile (its GIL share inside the "
                  f"timer): {steady_on:.0f} vs {steady_off:.0f} ns, ratio {steady_on / steady_off:.2f}")
    bufs = [art.malloc(256) for _ in range(ALLOCS)]
    small = records_after(pick(10_000, 600), streams, bufs)
    large = records_after(pick(100_000, 3000), streams, bufs)
    emit("sanitizer_state_100k_tasks", large, "records", "after 10k tasks", small, "<=", 1.1,
         f"the state does not grow with the number of tasks ({ALLOCS} allocations, ordered "
         f"accesses)")
    for b in bufs + [x for p in pairs for x in p]:
        b.free()
    for s in streams:
        s.destroy()
    sanitizer.clear()


if __name__ == "__main__":
    main()
