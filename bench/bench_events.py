"""Event handoff: from a task finishing on stream A to the task waiting for it starting on stream B.

Each round: A runs a kernel that waits on a gate (so that B's wait is in place before A's work
ends) and stamps perf_counter_ns as it returns; A records an event; B waits on the event and
runs a kernel that stamps perf_counter_ns as it starts. The host opens the gate and
synchronizes. Baseline: a queue.SimpleQueue round trip to an echo thread, as many rounds.
"""

from __future__ import annotations

import queue
import threading
import time

from _common import emit, median, pick

import ascentrt as art

ROUNDS = pick(400, 20)
TIMEOUT = 60.0


def handoff_ns(dev, a, b, rounds: int) -> list[float]:
    """Latencies (ns) from the end of a kernel on `a` to the start of the kernel on `b` waiting for it."""
    stamps = [0, 0]
    event = dev.create_event()

    def producer(gate: threading.Event) -> None:
        gate.wait(TIMEOUT)
        stamps[0] = time.perf_counter_ns()

    def consumer() -> None:
        stamps[1] = time.perf_counter_ns()

    out = []
    for _ in range(rounds):
        gate = threading.Event()
        art.launch(producer, gate, stream=a)
        event.record(a)
        b.wait(event)
        art.launch(consumer, stream=b)
        gate.set()
        b.synchronize(TIMEOUT)
        out.append(stamps[1] - stamps[0])
    a.synchronize(TIMEOUT)
    event.destroy()
    return out


def queue_round_trip_ns(rounds: int) -> list[float]:
    """Round trips (ns) host -> echo thread -> host through two queue.SimpleQueue."""
    there, back = queue.SimpleQueue(), queue.SimpleQueue()

    def echo() -> None:
        while (item := there.get()) is not None:
            back.put(item)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    out = []
    for i in range(rounds):
        t0 = time.perf_counter_ns()
        there.put(i)
        back.get(timeout=TIMEOUT)
        out.append(time.perf_counter_ns() - t0)
    there.put(None)
    thread.join(TIMEOUT)
    return out


def main() -> None:
    """Measure and print the event handoff figure as a JSON line."""
    dev = art.set_device(0)
    a, b = dev.create_stream(), dev.create_stream()
    handoff_ns(dev, a, b, 5)  # warm-up: executor threads started
    queue_round_trip_ns(5)
    ours, theirs = [], []
    for _ in range(4):  # interleaved chunks, so that machine noise hits both alike
        theirs += queue_round_trip_ns(ROUNDS // 4)
        ours += handoff_ns(dev, a, b, ROUNDS // 4)
    emit("event_handoff", median(ours) / 1e3, "us", "queue.SimpleQueue round trip",
         median(theirs) / 1e3, "<=", 2, f"at most 2x; median of {len(ours)} handoffs")
    a.destroy()
    b.destroy()


if __name__ == "__main__":
    main()
