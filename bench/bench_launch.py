"""Launch figures: host cost of a no-op launch, one-stream throughput, launch cost with 1000 streams.

Two scaling figures: a launch on one stream while 1000 other streams are alive (the runtime's
cost must not grow with the number of streams), and launches spread round-robin over 1000
streams (each launch then wakes an idle stream: the cost of spreading tiny work thinly).

Baselines run in the same process, interleaved with the measured side so that machine noise
hits both alike: concurrent.futures.ThreadPoolExecutor (as many workers as the device has
compute units) for launch cost and throughput, one stream for the 1000-stream figure.
"""

from __future__ import annotations

import concurrent.futures as cf
import time

from _common import emit, median, pick

import ascentrt as art
from ascentrt.kernels import noop

TASKS = pick(20000, 1000)      # launches (or submits) per timed run
RUNS = pick(15, 2)             # timed runs per figure; the median run is reported
BURST = pick(1000, 200)        # launches per burst for the burst figures in the notes
BURSTS = pick(30, 3)
STREAMS = pick(1000, 50)       # live streams for the scaling figure
TIMEOUT = 120.0


def launch_ns(streams: list, n: int) -> float:
    """ns per launch of `n` no-op kernels spread round-robin over `streams` (the sync is not timed).

    The executors run the tasks meanwhile, so their share of the GIL counts: this is what a
    launch costs the host in a steady stream of launches.
    """
    launch = art.launch
    order = [streams[i % len(streams)] for i in range(n)]
    t0 = time.perf_counter_ns()
    for s in order:
        launch(noop, stream=s)
    t1 = time.perf_counter_ns()
    for s in streams:
        s.synchronize(TIMEOUT)
    return (t1 - t0) / n


def launch_with_live_streams(dev, stream, live: int) -> float:
    """ns per launch on `stream` while `live` other (idle) streams exist on the device."""
    extra = [dev.create_stream() for _ in range(live)]
    try:
        return launch_ns([stream], TASKS)
    finally:
        for s in extra:
            s.destroy()


def submit_ns(pool: cf.ThreadPoolExecutor, n: int) -> float:
    """ns per ThreadPoolExecutor.submit of `n` no-ops (waiting for them is not timed)."""
    submit = pool.submit
    t0 = time.perf_counter_ns()
    futures = [submit(noop) for _ in range(n)]
    t1 = time.perf_counter_ns()
    cf.wait(futures, TIMEOUT)
    return (t1 - t0) / n


def stream_throughput(stream, n: int) -> float:
    """No-op tasks per second through one stream: n launches plus the synchronize."""
    launch = art.launch
    t0 = time.perf_counter_ns()
    for _ in range(n):
        launch(noop, stream=stream)
    stream.synchronize(TIMEOUT)
    return n / ((time.perf_counter_ns() - t0) / 1e9)


def pool_throughput(pool: cf.ThreadPoolExecutor, n: int) -> float:
    """No-op tasks per second through a ThreadPoolExecutor: n submits plus waiting for all."""
    submit = pool.submit
    t0 = time.perf_counter_ns()
    futures = [submit(noop) for _ in range(n)]
    cf.wait(futures, TIMEOUT)
    return n / ((time.perf_counter_ns() - t0) / 1e9)


def alternate(measure_baseline, measure_ours, runs: int) -> tuple[float, float]:
    """Medians of (ours, baseline), measured alternately so that noise hits both alike."""
    ours, theirs = [], []
    for _ in range(runs):
        theirs.append(measure_baseline())
        ours.append(measure_ours())
    return median(ours), median(theirs)


def main() -> None:
    """Measure and print the three launch figures as JSON lines."""
    dev = art.set_device(0)
    stream = dev.create_stream()
    launch_ns([stream], BURST)  # warm-up
    # Scaling with the number of live streams: does their mere existence slow a launch?
    live, alone = alternate(lambda: launch_with_live_streams(dev, stream, 0),
                            lambda: launch_with_live_streams(dev, stream, STREAMS), RUNS)
    emit(f"launch_with_{STREAMS}_live_streams", live, "ns/launch", "launch with no other stream",
         alone, "<=", 1.5, f"at most 1.5x; {TASKS} launches on one stream while {STREAMS} other "
         f"streams are alive, median of {RUNS}")
    many = [dev.create_stream() for _ in range(STREAMS)]
    with cf.ThreadPoolExecutor(max_workers=dev.properties.compute_units) as pool:
        # Warm-up: start every executor thread and pool worker before timing anything.
        launch_ns([stream], BURST)
        launch_ns(many, STREAMS)
        submit_ns(pool, BURST)

        ours, theirs = alternate(lambda: submit_ns(pool, TASKS),
                                 lambda: launch_ns([stream], TASKS), RUNS)
        burst_ours, burst_theirs = alternate(lambda: submit_ns(pool, BURST),
                                             lambda: launch_ns([stream], BURST), BURSTS)
        emit("launch_noop", ours, "ns/launch", "ThreadPoolExecutor.submit", theirs, "<=", 0.1,
             f"at least 10x cheaper; {TASKS} back-to-back launches while the executors run them, "
             f"median of {RUNS}",
             note=f"in bursts of {BURST} (before the executors get the GIL): launch "
                  f"{burst_ours:.0f} ns vs submit {burst_theirs:.0f} ns")

        ours, theirs = alternate(lambda: pool_throughput(pool, TASKS),
                                 lambda: stream_throughput(stream, TASKS), RUNS)
        emit("throughput_one_stream", ours, "tasks/s", "ThreadPoolExecutor", theirs, ">=", 10,
             f"at least 10x; {TASKS} no-op tasks submitted and synchronized, median of {RUNS}")

        spread, one = alternate(lambda: launch_ns([stream], TASKS),
                                lambda: launch_ns(many, TASKS), RUNS)
        burst_spread, burst_one = alternate(lambda: launch_ns([stream], BURST),
                                            lambda: launch_ns(many, BURST), BURSTS)
        emit(f"launch_{STREAMS}_streams", spread, "ns/launch", "launch on 1 stream", one, "<=", 1.3,
             f"at most 1.3x; {TASKS} launches round-robin over {STREAMS} live streams, median "
             f"of {RUNS}",
             note=f"all {STREAMS} streams stay alive for both sides; in bursts of {BURST}: "
                  f"{burst_spread:.0f} ns spread over them vs {burst_one:.0f} ns on 1")
    for s in many + [stream]:
        s.destroy()


if __name__ == "__main__":
    main()
