"""Task graphs: host overhead of replaying a captured graph vs eager launch, and a wide DAG on 4 streams.

1. Host overhead per task: the time the submitting thread spends in graph.launch(stream) for a
   captured chain of N no-op kernels, divided by N, against N eager ascentrt.launch calls of
   the same kernel (timed alternately, same stream, medians): 10 launches back to back (the
   steady state of a training loop), and one launch onto an idle stream (which also pays for
   waking an executor thread, ~10-20 us here, once per launch). The device-side work is
   waited for outside the timed region. Also end-to-end (submit + run + synchronize) per task.
2. A wide DAG: 4 independent chains of 2 ms tasks joined by one task at the end, scheduled by
   TaskGraph.schedule on 4 streams vs 1 stream (wall time of run(), and of the captured graph
   replayed), with simulated device time and with real np.sin work; and the waits the
   schedule inserted vs the naive count (one per cross-stream edge).
"""

from __future__ import annotations

import time

import numpy as np
from _common import emit, median, pick

import ascentrt as art

SIZES = pick((100, 1000), (100,))
REPEATS = pick(21, 3)
BACK_TO_BACK = pick(10, 2)  # launches per timed sample in the steady-state figure
CHAINS, CHAIN_LEN = 4, pick(6, 2)
SIN_ELEMS = pick(200_000, 20_000)  # ~2 ms of np.sin per task on these machines
DAG_REPEATS = pick(5, 1)
TASK_S = 0.002
TIMEOUT = 120.0


def eager_s(n: int, stream, launches: int) -> tuple[float, float]:
    """(host seconds to launch n no-ops `launches` times over, seconds until they all ran)."""
    noop = art.kernels.noop
    launch = art.launch
    t0 = time.perf_counter()
    for _ in range(n * launches):
        launch(noop, stream=stream)
    t1 = time.perf_counter()
    stream.synchronize(TIMEOUT)
    return t1 - t0, time.perf_counter() - t0


def replay_s(graph, stream, launches: int) -> tuple[float, float]:
    """(host seconds for `launches` back-to-back graph.launch calls, seconds until they ran)."""
    t0 = time.perf_counter()
    for _ in range(launches):
        graph.launch(stream)
    t1 = time.perf_counter()
    stream.synchronize(TIMEOUT)
    return t1 - t0, time.perf_counter() - t0


def bench_overhead(dev) -> None:
    """Replay vs eager launch, per task, for each graph size: back to back, and onto an idle stream."""
    stream = dev.create_stream()
    for n in SIZES:
        stream.begin_capture()
        for _ in range(n):
            art.launch(art.kernels.noop, stream=stream)
        graph = stream.end_capture()
        segments = graph.plan_summary()["segments"]
        for launches, label in ((BACK_TO_BACK, ""), (1, "_idle_stream")):
            eager_host, eager_total, replay_host, replay_total = [], [], [], []
            for _ in range(3):  # warm up executors and caches
                eager_s(n, stream, launches)
                replay_s(graph, stream, launches)
            for _ in range(REPEATS):
                h, t = eager_s(n, stream, launches)
                eager_host.append(h / n / launches)
                eager_total.append(t / n / launches)
                h, t = replay_s(graph, stream, launches)
                replay_host.append(h / n / launches)
                replay_total.append(t / n / launches)
            how = (f"{launches} launches back to back" if launches > 1 else
                   "one launch onto an idle stream (includes waking an executor)")
            emit(f"graph_replay_host_overhead_{n}_tasks{label}", median(replay_host) * 1e9, "ns/task",
                 "eager launch", median(eager_host) * 1e9, "<=", 0.2,
                 f"at least 5x lower host cost per task; median of {REPEATS}",
                 note=f"{how}; one launch submits {segments} engine task(s) for {n} nodes")
            if launches > 1:
                emit(f"graph_replay_end_to_end_{n}_tasks", median(replay_total) * 1e9, "ns/task",
                     "eager launch + synchronize", median(eager_total) * 1e9, "<=", 0.5,
                     f"submit, run and synchronize at least 2x faster per task; median of {REPEATS}",
                     note=how)
        graph.destroy()
    stream.destroy()


def wide_dag(bufs, simulated: bool, chains: int = CHAINS) -> art.TaskGraph:
    """`chains` chains of CHAIN_LEN ~2 ms tasks (each on its own buffers), joined at the end.

    simulated=False: np.sin over the chain's buffers (real CPU work that releases the GIL).
    simulated=True: 2 ms of device time that does not occupy a host core (time.sleep), as an
    accelerator kernel would; it shows the parallelism the schedule exposes even when other
    processes keep the host cores busy.
    """
    g = art.TaskGraph()
    for c in range(chains):
        a, b = bufs[2 * c], bufs[2 * c + 1]
        for k in range(CHAIN_LEN):
            src, dst = (a, b) if k % 2 == 0 else (b, a)
            if simulated:
                g.add_kernel(time.sleep, TASK_S, name=f"chain{c}.device{k}", reads=[src], writes=[dst],
                             cost=2.0)
            else:
                g.add_kernel(np.sin, src.view(np.float64), dst.view(np.float64),
                             name=f"chain{c}.sin{k}", reads=[src], writes=[dst], cost=2.0)
    last = [bufs[2 * c + (1 if CHAIN_LEN % 2 else 0)] for c in range(chains)]
    out = bufs[-1]
    g.add_kernel(_sum_into, out.view(np.float64), *[b.view(np.float64) for b in last],
                 reads=last, writes=[out], name="join", cost=0.5)
    return g


def _sum_into(out, *parts) -> None:
    out[:] = parts[0]
    for p in parts[1:]:
        out += p


def bench_wide_dag(dev, simulated: bool) -> None:
    """Schedule the wide DAG on 4 streams vs 1: wall time, and waits inserted vs naive."""
    nbytes = SIN_ELEMS * 8
    bufs = [art.malloc(nbytes) for _ in range(4 * CHAINS + 1)]
    for i, b in enumerate(bufs):
        b.numpy(np.float64)[:] = i / 10
    g = wide_dag(bufs, simulated)
    wide, narrow = g.schedule(num_streams=CHAINS), g.schedule(num_streams=1)
    wide_streams, narrow_streams = wide.make_streams(), narrow.make_streams()
    wide.run(wide_streams, TIMEOUT)  # warm pages and executors
    narrow.run(narrow_streams, TIMEOUT)
    graph = wide.capture()
    stream = dev.create_stream()
    t_wide, t_narrow, t_replay = [], [], []
    for _ in range(DAG_REPEATS):
        t0 = time.perf_counter()
        narrow.run(narrow_streams, TIMEOUT)
        t_narrow.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        wide.run(wide_streams, TIMEOUT)
        t_wide.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        graph.launch(stream)
        stream.synchronize(TIMEOUT)
        t_replay.append(time.perf_counter() - t0)
    units = dev.properties.compute_units
    bound = min(units, CHAINS)
    tasks = CHAINS * CHAIN_LEN + 1
    what = "simulated_device" if simulated else "numpy_sin"
    work = ("2 ms of simulated device time (sleep)" if simulated else
            "~2 ms np.sin (CPU-bound: other processes on the host cores eat into the speedup)")
    emit(f"wide_dag_{what}_{CHAINS}x{CHAIN_LEN}_on_{CHAINS}_streams", median(t_wide) * 1e3, "ms",
         "same DAG on 1 stream", median(t_narrow) * 1e3, "<=", 0.6,
         f"speedup >= 1.67x ({units} compute units bound it to {bound}x); median of {DAG_REPEATS}",
         note=f"{tasks} tasks of {work}")
    emit(f"wide_dag_{what}_{CHAINS}x{CHAIN_LEN}_replayed_graph", median(t_replay) * 1e3, "ms",
         "same DAG on 1 stream", median(t_narrow) * 1e3, "<=", 0.6,
         f"the captured 4-lane graph keeps the speedup; median of {DAG_REPEATS}")
    if simulated:
        report = wide.report()
        rr = g.schedule(num_streams=CHAINS, policy="round_robin").report()
        emit(f"wide_dag_{CHAINS}x{CHAIN_LEN}_waits_inserted", report["waits"], "waits",
             "naive: one wait per cross-stream edge", report["naive_waits"], "<=", 1.0,
             "no more waits than the naive schedule",
             note=f"{report['cross_stream_conflicts']} conflicting task pairs cross streams "
                  f"(a wait per pair); round-robin placement would cross {rr['naive_waits']} "
                  f"edges and insert {rr['waits']} waits")
        # Twice as many chains as streams: two chains share each stream, so the join needs
        # one wait per other stream, not one per chain.
        double = wide_dag(bufs, simulated, 2 * CHAINS).schedule(num_streams=CHAINS).report()
        emit(f"dag_{2 * CHAINS}x{CHAIN_LEN}_on_{CHAINS}_streams_waits_inserted", double["waits"],
             "waits", "naive: one wait per cross-stream edge", double["naive_waits"], "<=", 0.6,
             "stream order makes part of the waits redundant",
             note=f"{double['cross_stream_conflicts']} conflicting task pairs cross streams")
    graph.destroy()
    for s in wide_streams + narrow_streams + [stream]:
        s.destroy()
    for b in bufs:
        b.free()


def main() -> None:
    """Print the graph figures as JSON lines."""
    dev = art.set_device(0)
    bench_overhead(dev)
    bench_wide_dag(dev, simulated=True)
    bench_wide_dag(dev, simulated=False)


if __name__ == "__main__":
    main()
