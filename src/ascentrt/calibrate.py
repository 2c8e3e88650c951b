"""`ascentrt calibrate`: measure this machine's cpu backend and write a preset (`calibrated`)
with which the simulated NPU predicts it: copy bandwidths and latency (and the slower rate of
copies under glibc's non-temporal threshold), one copy thread's rate and the memory's under
two, the compute rate of the demo's kernel, launch, record, synchronize, query, pool and
host-function costs, the wait for another executor class's thread when a stream's work moves
to it, and how many processors its concurrent tasks really share (the cores its
threads run on), two at once and three.

Each figure is measured the way programs meet it (a large copy alone on its stream, kernels
along a chain of buffers): this machine's caches make the same work up to about twice as fast
when its data was just used.

Runs in a process whose devices are cpu devices; each figure is the median of several runs.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
import time
from typing import Callable

import numpy as np

from . import config, forksafe
from .validate import check_path, write_text_file
from .backends.presets import FIELDS, calibrated_path

MIB = 1 << 20


def _median_ns(fn: Callable[[], object], repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return float(statistics.median(times))


# host_sync_ns's loops: iterations per loop, loops (their median is taken)
SYNC_LOOP_COUNT, SYNC_LOOPS = 200, 15


def _launch_then_synchronize(s, count: int = SYNC_LOOP_COUNT, loops: int = SYNC_LOOPS) -> tuple[float, float]:
    """(ns per iteration of a loop of `count` iterations that each launch a no-op kernel on
    idle stream `s` and synchronize it: the loop's time over `count`, the median of `loops`
    loops; median ns the kernel ran). A loop's time, not an iteration's median: a loop pays
    every iteration, and here, on a loaded machine, ~1% of them wait milliseconds for a core
    another process holds, which adds half or more to the loop's time (the median iteration
    left that out: at a load of 5 on 2 cores, the simulator predicted ~40% of the time of
    bench_sim's loop); the median over loops keeps one loop that met an unusually long
    stall from weighing as much as the rest."""
    import ascentrt as art
    runs: list[float] = []
    per_loop: list[float] = []
    span = [0, 0]

    def stamped() -> None:
        span[0] = time.perf_counter_ns()
        span[1] = time.perf_counter_ns()

    for i in range(loops + 1):  # (the first loop warms the path up)
        t0 = time.perf_counter_ns()
        for _ in range(count):
            art.launch(stamped, stream=s)
            s.synchronize()
            runs.append(span[1] - span[0])
        if i:
            per_loop.append((time.perf_counter_ns() - t0) / count)
    return float(statistics.median(per_loop)), float(statistics.median(runs[count:]))


def _event_hop_ns(dev, s, hops: int = 200) -> float:
    """Median ns per hop of an event ping-pong: no-op kernels on two streams in turn, each
    waiting on an event the other recorded after its kernel, all queued behind a gate first
    (the host's submitting is not timed)."""
    import ascentrt as art
    other = dev.create_stream()
    events = [dev.create_event() for _ in range(hops)]
    times = []
    for _ in range(5):
        gate = forksafe.event()
        art.launch(gate.wait, 60, stream=s)
        for i in range(hops):
            a, b = (s, other) if i % 2 == 0 else (other, s)
            art.launch(art.kernels.noop, stream=a)
            events[i].record(a)
            b.wait(events[i])
        t0 = time.perf_counter_ns()
        gate.set()
        s.synchronize()
        other.synchronize()
        times.append(time.perf_counter_ns() - t0)
    other.destroy()
    for e in events:
        e.destroy()
    return float(statistics.median(times)) / hops


def _in_cache(out: np.ndarray, x: np.ndarray, times: int) -> None:
    """Core-bound work: square roots over a buffer that stays in the cache, `times` over."""
    for _ in range(times):
        np.sqrt(x, out=out)


_PAIRS = 11  # alone/together pairs per concurrency figure (see _processors)


def _processors(dev, s, x, count: int) -> float:
    """How many processors the cpu backend's concurrent tasks really get: `count` (2 or 3)
    core-bound tasks (memory traffic kept in the cache; two kernels, the third a host
    function on the host-function thread) alone and at once on `count` streams,
    count x alone / together."""
    import ascentrt as art
    streams = [s] + [dev.create_stream() for _ in range(count - 1)]
    # (1 MiB per call: short calls would measure the threads' handoffs of the GIL instead)
    work = [(x[i << 20:(i + 1) << 20].view(np.float64), x[(i + 3) << 20:(i + 4) << 20].view(np.float64))
            for i in range(2)]
    host_src, host_out = np.full(1 << 17, 2.0), np.empty(1 << 17)

    def run(n: int) -> None:
        for i in range(n):
            if i < 2:
                out, src = work[i]
                art.launch(_in_cache, out, src, 16, stream=streams[i])
            else:  # (a host function's arguments are its own: host arrays of the same size)
                art.launch_host_func(_in_cache, host_out, host_src, 16, stream=streams[i])
        for stream in streams[:n]:
            stream.synchronize()
    run(count)
    # In pairs, the median of their ratios: a moment when another process takes a core then
    # spoils one pair, not the whole figure (medians of the two sides taken apart once gave
    # 1.0 here, and a simulator that predicts no overlap at all).
    ratios = []
    for _ in range(_PAIRS):
        alone = _median_ns(lambda: run(1), 1)
        together = _median_ns(lambda: run(count), 1)
        ratios.append(count * alone / together)
    for stream in streams[1:]:
        stream.destroy()
    return max(1.0, statistics.median(ratios))


_HANDOFF_MS = 1.5  # each side's busy time: the other class's thread parked at least this long


def _handoff(s, x) -> float:
    """executor_handoff_ns: how much later a stream's next task starts when it runs on another
    executor class than the task before it (a kernel after a host function, and back): that
    class's parked thread has to wake. Each task stamps its own start and end and keeps a core
    busy for ~1.5 ms, as a pipeline's stages do, so the woken thread was parked that long (a
    thread parked 1 ms or more wakes slowest here). The median gap between tasks in turn,
    minus the median gap between kernels back to back, over 5 runs of 20 pairs."""
    import ascentrt as art
    out = x[:1 << 20].view(np.float64)
    src = x[1 << 20:2 << 20].view(np.float64)
    host_src, host_out = np.full(1 << 17, 2.0), np.empty(1 << 17)
    stamps: list[tuple[int, int]] = []

    def busy(o, a, times: int) -> None:
        t0 = time.perf_counter_ns()
        _in_cache(o, a, times)
        stamps.append((t0, time.perf_counter_ns()))
    for _ in range(3):
        art.launch(busy, out, src, 16, stream=s)
    s.synchronize()
    once = min(b - a for a, b in stamps) / 16
    times = max(1, int(_HANDOFF_MS * 1e6 / max(1.0, once)))

    def gaps(in_turn: bool) -> float:
        stamps.clear()
        for _ in range(20):
            art.launch(busy, out, src, times, stream=s)
            if in_turn:
                art.launch_host_func(busy, host_out, host_src, times, stream=s)
            else:
                art.launch(busy, out, src, times, stream=s)
        s.synchronize()
        return statistics.median(b[0] - a[1] for a, b in zip(stamps, stamps[1:]))
    gaps(True)
    changed = statistics.median(gaps(True) for _ in range(5))
    same = statistics.median(gaps(False) for _ in range(5))
    return max(0.0, changed - same)


def _memory_bandwidth(dev, s, dbuf, dbuf2, host, n: int) -> float:
    """The memory's rate with two copy threads at work: an H2D and a D2H copy of `n` bytes at
    once on two streams, 4 each; bytes read and written per second (each copy reads and writes
    n: this machine's memory holds both ends)."""
    import ascentrt as art
    other = dev.create_stream()
    out = art.malloc_host(n)

    def both() -> None:
        for _ in range(4):
            art.memcpy_async(dbuf, host, stream=s)
            art.memcpy_async(out, dbuf2, stream=other)
        s.synchronize()
        other.synchronize()
    both()
    rate = 4 * 4 * n / (_median_ns(both) / 1e9)
    out.free()
    other.destroy()
    return rate


def _glibc_tunable(name: str) -> int:
    """A tunable's value as `ld.so --list-tunables` prints it (glibc 2.33+), 0 if unknown."""
    import subprocess
    for loader in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"):
        if not os.path.exists(loader):
            continue
        try:
            text = subprocess.run([loader, "--list-tunables"], capture_output=True, text=True,
                                  timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return 0
        for line in text.splitlines():
            if line.startswith(name + ":"):
                try:  # `name: 0x28e0000 (min: 0x4040, max: ...)`
                    return int(line.split(":")[1].split()[0], 0)
                except (IndexError, ValueError):
                    return 0
    return 0


def _last_level_cache() -> int:
    """The bytes of this machine's largest cache (Linux sysfs, else glibc's figure), 0 if
    neither says."""
    import glob
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()  # e.g. "107520K"
            sizes.append(int(text[:-1]) << {"K": 10, "M": 20, "G": 30}[text[-1]]
                         if text[-1] in "KMG" else int(text))
        except (OSError, ValueError, IndexError):
            continue
    return max(sizes, default=0) or _glibc_tunable("glibc.cpu.x86_shared_cache_size")


_MOST_PINNED = 512 * MIB
_NO_REGIME = {"small_copy_bytes": (0, "one rate for every size: {}"),
              "small_copy_bandwidth": (0.0, "one rate for every size: {}")}


def _small_copies(s) -> dict:
    """small_copy_bytes and small_copy_bandwidth: below glibc's non-temporal threshold a
    memmove writes through the cache, and from memory the cache no longer holds it moves
    bytes slower than a large copy's streaming stores do (here ~6 against ~9 GB/s). Measured
    as a pipeline meets it: 12 MiB pinned copies queued back to back, H2D and D2H in turn
    through 3 rotating device buffers, each H2D from host memory written before the pass and
    each D2H into host memory not touched since, over a host range of twice the last-level
    cache. Either both fields or neither (one rate, 0 and 0)."""
    import ascentrt as art

    def none(why: str) -> dict:
        return {field: (value, how.format(why)) for field, (value, how) in _NO_REGIME.items()}
    threshold = _glibc_tunable("glibc.cpu.x86_non_temporal_threshold")
    if not threshold:
        return none("no glibc non-temporal threshold found (not glibc 2.33+ on x86)")
    n = min(12 * MIB, threshold // 2)
    if n < MIB:  # (copies this small would measure their launches, not their bytes)
        return none(f"glibc's non-temporal threshold is only {threshold} bytes")
    cache = _last_level_cache() or 64 * MIB
    # (at most 512 MiB of pinned memory, however large the cache: a small host must cope)
    half = max(2, min(-(-cache // n), _MOST_PINNED // n // 2))
    host = art.malloc_host(n * 2 * half)
    try:
        if not host.pinned:
            return none("host memory cannot be locked here (RLIMIT_MEMLOCK)")
        dev = art.malloc(n * 3)
        try:
            # (the first pass warms the copy thread and the device buffers: not counted)
            times = [_streamed_pass(s, host, dev, n, half, value) for value in range(6)]
            rate = n * 2 * half / (statistics.median(times[1:]) / 1e9)
        finally:
            dev.free()
    finally:
        host.free()
    how = ("glibc.cpu.x86_non_temporal_threshold (ld.so --list-tunables): memmove streams "
           "past the cache from it on")
    cold_enough = "out of the cache" if 2 * half * n >= 2 * cache else \
        f"not all out of the {cache >> 20} MiB cache (pinned memory capped at 512 MiB)"
    return {"small_copy_bytes": (threshold, how),
            "small_copy_bandwidth": (rate, f"{n >> 20} MiB pinned copies queued back to back, "
                                     f"H2D and D2H in turn, {half} each way, the host side in "
                                     f"memory written before and {cold_enough}")}


def _streamed_pass(s, host, dev, n: int, half: int, value: int) -> int:
    """One pass of _small_copies, in ns: the host range is written first (untimed), as a
    program writes its inputs, so no pass finds the last one's bytes in the cache; then H2D
    from its first half and D2H into its second in turn. A D2H into memory the cache no
    longer holds pays for reading its lines and writing them back: here these passes are
    ~15% slower than H2D copies alone, and a pipeline's copies as slow."""
    import ascentrt as art
    host.numpy()[:] = value
    t0 = time.perf_counter_ns()
    for i in range(half):
        slot = dev[(i % 3) * n:(i % 3 + 1) * n]
        art.memcpy_async(slot, host[i * n:(i + 1) * n], stream=s)
        art.memcpy_async(host[(half + i) * n:(half + i + 1) * n], slot, stream=s)
    s.synchronize()
    return time.perf_counter_ns() - t0


_CHAIN = 8  # buffers of 12 MiB: a kernel's output was last touched 7 kernels before


def measure() -> dict:
    """{field: (value, how it was measured)} for the fields the cpu backend determines."""
    import ascentrt as art
    from .demo import transform
    dev = art.Device(0)
    props = dev.properties
    s = dev.create_stream()
    out = {}
    n = 64 * MIB
    host = art.malloc_host(n)
    dbuf, dbuf2 = art.malloc(n), art.malloc(n)
    pageable = np.zeros(n, np.uint8)

    def copy(dst, src, nbytes=None, count=1):
        for _ in range(count):
            art.memcpy_async(dst, src, nbytes, stream=s)
        s.synchronize()

    elements = 3 << 19
    # A chain: each kernel reads what the one before wrote (still in the cache, as in a
    # pipeline's compute stage after its copy, or a graph's chain) and writes a buffer not
    # touched for several kernels (out of the cache, as a fresh output is).
    chain = [art.malloc(elements * 8) for _ in range(_CHAIN)]
    chain[0].numpy(np.float64)[:] = 2.0
    x = chain[0]

    def kernel():
        for i in range(_CHAIN):
            art.launch(transform, chain[(i + 1) % _CHAIN].view(np.float64),
                       chain[i].view(np.float64), stream=s)
        s.synchronize()

    # The large copy alone on its stream (then a synchronize), as a copy benchmark or a
    # one-stream pipeline runs it: a copy thread that starts from idle moves bytes ~30% slower
    # here than one kept busy by copies queued back to back. The small ones back to back: the
    # fixed cost of a copy on the device, not the host's wake-up after a synchronize.
    # Each measured on its own, after a run of the same (not in turns with the others: that
    # would leave each the others' data in the cache, not its own, as programs have).
    copy(dbuf, host)  # first touch
    big = _median_ns(lambda: copy(dbuf, host), 9)
    small = _median_ns(lambda: copy(dbuf, host, 4096, count=200), 15) / 200
    bw = (n - 4096) / (max(1.0, big - small) / 1e9)
    out["host_link_bandwidth"] = (bw, "pinned H2D memcpy_async: 64 MiB alone on a stream "
                                      "against 4 KiB copies queued back to back")
    out.update(_small_copies(s))
    threshold, how = out["small_copy_bytes"]
    if threshold > n:
        # (a cache large enough puts glibc's threshold above the size the host link's rate was
        # measured at: copies of that size then took host_link_bandwidth, not the small rate)
        out["small_copy_bytes"] = (n, f"{how}: {int(threshold) >> 20} MiB here, capped at "
                                      f"{n >> 20} MiB, the size host_link_bandwidth was "
                                      f"measured at")
    regime = out["small_copy_bandwidth"][0] if 4096 < out["small_copy_bytes"][0] else bw
    out["host_link_latency_ns"] = (max(0.0, small - 4096 / regime * 1e9),
                                   "a 4 KiB pinned copy (200 queued back to back), minus its "
                                   "bytes over the bandwidth of its size")
    out["pageable_bandwidth"] = (n / (_median_ns(lambda: copy(dbuf, pageable)) / 1e9),
                                 "pageable H2D memcpy_async of 64 MiB (synchronous)")
    copy(dbuf2, dbuf)
    d2d = n / (_median_ns(lambda: copy(dbuf2, dbuf, count=4)) / 4 / 1e9)
    out["copy_engine_bandwidth"] = (d2d, "the D2D copy rate of 64 MiB (4 queued back to back "
                                         "on one stream: one copy thread)")
    out["memory_bandwidth"] = (_memory_bandwidth(dev, s, dbuf, dbuf2, host, n),
                               "the bytes read and written by an H2D and a D2H copy of 64 MiB "
                               "at once on two streams (two copy threads), per second")
    out["peer_link_bandwidth"] = (d2d, "the D2D copy rate: a peer copy is the same memmove here")
    out["peer_link_latency_ns"] = (out["host_link_latency_ns"][0], "as the host link's: the fixed "
                                   "cost of one copy task")
    kernel()
    rate = _CHAIN * elements / (_median_ns(kernel, 9) / 1e9)
    out["compute_flops_per_unit"] = (rate, f"the demo's transform (one flop per element) along "
                                           f"a chain of {_CHAIN} buffers of 12 MiB, each "
                                           f"kernel reading the last one's output, queued on "
                                           f"one stream: one compute thread runs them")
    shared = min(float(os.cpu_count() or 1), _processors(dev, s, x, 2))
    out["shared_processors"] = (shared, "two core-bound kernels alone and at once on two "
                                        "streams: 2 x alone / together")
    out["crowded_processors"] = (min(shared, _processors(dev, s, x, 3)),
                                 "three core-bound tasks (two kernels and a host function) "
                                 "alone and at once on three streams: 3 x alone / together")
    out["executor_handoff_ns"] = (_handoff(s, x), "a kernel and a host function in turn on "
                                  "one stream, each keeping a core busy for 1.5 ms: the median "
                                  "gap from one's end to the next one's start, minus that "
                                  "between kernels back to back")
    count = 20000
    launch_ns = _median_ns(lambda: [art.launch(art.kernels.noop, stream=s) for _ in range(count)], 5) / count
    s.synchronize()
    out["host_launch_ns"] = (launch_ns, "ascentrt.launch of a no-op kernel, host side")

    def burst():
        for _ in range(count):
            art.launch(art.kernels.noop, stream=s)
        s.synchronize()

    per_task = _median_ns(burst, 5) / count
    out["dispatch_ns"] = (max(0.0, per_task - launch_ns),
                          "no-op kernels per task submitted and run, minus the launch cost")
    ev = dev.create_event()
    out["host_record_ns"] = (_median_ns(lambda: [ev.record(s) for _ in range(1000)]) / 1000,
                             "Event.record on an idle stream")
    s.synchronize()
    # The latency-bound parts as latencies (a burst above measures throughput: the executor
    # that ends a task goes on with the next, so nothing wakes there).
    iteration, kernel_ns = _launch_then_synchronize(s)
    dispatch = out["dispatch_ns"][0]
    out["host_sync_ns"] = (max(0.0, iteration - launch_ns - dispatch),
                           f"a no-op kernel launched on an idle stream, then synchronized, "
                           f"{SYNC_LOOP_COUNT} times: the loop's time per iteration (the median "
                           f"of {SYNC_LOOPS} loops), "
                           "minus the launch and dispatch costs (the executor's and the "
                           "host's wake-ups, and the stalls a loaded machine adds)")
    out["event_latency_ns"] = (max(0.0, _event_hop_ns(dev, s) - dispatch),
                               "an event ping-pong of no-op kernels between two streams: the "
                               "median time per hop, minus a dispatch")
    out["default_kernel_ns"] = (kernel_ns, "the median run of a no-op kernel, start to end")
    out["host_query_ns"] = (_median_ns(lambda: [s.query() for _ in range(1000)]) / 1000,
                            "Stream.query of an idle stream")
    def malloc_free_pairs() -> None:
        for _ in range(1000):
            art.free(art.malloc(MIB))
    pairs = _median_ns(malloc_free_pairs)
    out["host_malloc_pool_ns"] = (pairs / 2000, "half a cached malloc + free pair of 1 MiB")
    out["host_free_ns"] = (out["host_malloc_pool_ns"][0], "as a pool hit: the same path back")
    backend = dev._backend

    def driver_alloc() -> None:
        backend.free(backend.alloc(MIB, host=True))
    out["host_malloc_driver_ns"] = (_median_ns(driver_alloc),
                                    "the backend's allocation of 1 MiB of locked host memory")

    def host_funcs():
        for _ in range(200):
            art.launch_host_func(lambda: None, stream=s)
        s.synchronize()

    out["host_func_ns"] = (max(0.0, _median_ns(host_funcs, 5) / 200 - launch_ns),
                           "no-op host functions per task, minus the launch cost")
    host.free()
    for b in (dbuf, dbuf2, *chain):
        b.free()
    s.destroy()
    fixed = {
        "compute_units": (props.compute_units, "ASCENTRT_COMPUTE_UNITS of the cpu backend"),
        "default_block_dim": (1, "the cpu backend runs each kernel on one of its compute threads"),
        "unified_memory": (1, "the cpu backend's device memory is this machine's memory"),
        "peer_over_host_link": (0, "the cpu backend's devices share this machine's memory: "
                                "a peer copy takes the peer link model"),
        "memory_bandwidth_per_unit": (0.0, "a kernel thread of the cpu backend draws on the "
                                      "memory as any other (the memory bandwidth bounds it)"),
        "ai_cpus": (0, "the cpu backend has no AI CPUs"),
        "host_func_threads": (props.host_func_threads, "ASCENTRT_HOST_FUNC_THREADS"),
        "copy_engines_h2d": (1, "the cpu backend's copy threads serve every direction; one each"),
        "copy_engines_d2h": (1, "the cpu backend's copy threads serve every direction; one each"),
        "copy_engines_d2d": (1, "the cpu backend's copy threads serve every direction; one each"),
        "memory_bytes": (props.total_memory, "ASCENTRT_DEVICE_MEMORY"),
        "host_graph_launch_ns": (launch_ns, "as one launch"),
        "queue_depth": (1 << 30, "the cpu backend's streams have no submission-queue limit"),
        "max_streams": (1 << 30, "the cpu backend sets no stream limit"),
        "max_events": (1 << 30, "the cpu backend sets no event limit"),
        "max_notifies": (1 << 30, "the cpu backend sets no notify limit"),
    }
    out.update(fixed)
    return out


def write(values: dict, path: str) -> str:
    """The preset file: every field measured (or fixed by the cpu backend's settings); raises
    InvalidArgumentError (100003) naming `path` when it is not a path or cannot be written."""
    path = check_path(path, "the preset file (-o)")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    where = f"{platform.node() or 'this machine'}, {os.cpu_count()} cores, {when}"
    lines = ['name = "calibrated"',
             f'description = "this machine\'s cpu backend, measured by ascentrt calibrate ({where})"', ""]
    for field, (typ, _, _, _) in FIELDS.items():
        value, how = values[field]
        shown = int(round(value)) if typ is int else float(value)
        kind = "measured" if field not in ("ai_cpus", "queue_depth", "max_streams", "max_events", "max_notifies",
                                          "copy_engines_h2d", "copy_engines_d2h",
                                          "copy_engines_d2d", "default_block_dim",
                                          "unified_memory", "peer_over_host_link", "small_copy_bytes",
                                          "memory_bandwidth_per_unit") else "documented"
        lines.append(f'{field} = {{ value = {shown!r}, kind = "{kind}", source = '
                     f'"ascentrt calibrate: {how} ({where})" }}')
    return write_text_file(path, "\n".join(lines) + "\n", "the preset file", make_folder=True)


def busy_warning(load: float) -> str | None:
    """What calibrate says of a preset measured on a busy machine (None on a quiet one), from
    the load before it measured."""
    from .demo import BUSY_LOAD
    if load < BUSY_LOAD:
        return None
    return (f"ascentrt calibrate: this machine was busy (1-minute load average {load:.2f} on "
            f"{os.cpu_count()} cores): other processes took time from the measurements (the "
            f"copy bandwidth and the cores' sharing most), so the preset predicts a busy "
            f"machine; calibrate on a quiet one for this machine's own figures")


def main(args) -> int:
    """The `ascentrt calibrate` command."""
    if config.get("ASCENTRT_BACKEND") != "cpu":
        os.environ["ASCENTRT_BACKEND"] = "cpu"  # (no device exists yet in this process)
    from .demo import load_average
    warning = busy_warning(load_average())
    path = write(measure(), args.out or calibrated_path())
    if warning:  # (said with the result: a refused output path stays a one-line error)
        print(warning, file=sys.stderr)
    name = path if args.out else "calibrated"  # (`calibrated` names the default file only)
    print(f"wrote {path}: ASCENTRT_SIM_PRESET={name} makes the simulator predict this "
          f"machine's cpu backend")
    return 0
