"""The main job: a host -> device -> compute -> host pipeline on one stream, then on three."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import numpy as np

from .backends.base import Cost

from .device import Device
from .errors import AscentError, InvalidArgumentError, OutOfMemoryError
from .event import elapsed_time
from .launch import launch
from .copies import memcpy_async
from .memory import malloc, malloc_host
from .profiler.ranges import range as profiler_range

STAGES = ("h2d", "compute", "d2h")
PIPELINE_RANGE = "pipeline"  # the profiler range around each timed loop


def transform(out: np.ndarray, x: np.ndarray) -> None:
    """The compute stage: out = sqrt(x) in float64 (numpy releases the GIL while it runs).

    A float64 square root costs about twice a copy of its bytes and is bound by the core, not
    by memory: the copy stages and the compute stage can overlap on two cores instead of
    fighting over memory bandwidth.
    """
    np.sqrt(x, out=out)


# On a simulated device: one flop per element, each element read and written once (the
# ignore: mypy knows no function attributes, and a kernel carries its cost model as one).
transform.cost = lambda out, x: Cost(flops=x.size, bytes=x.nbytes + out.nbytes)  # type: ignore[attr-defined]


@dataclass
class PipelineResult:
    """What one pipeline run measured."""

    streams: int
    seconds: float
    stage_ms: dict[str, float] = field(default_factory=dict)     # mean time per stage
    utilization: dict[str, float] = field(default_factory=dict)  # busy time / wall time per stream
    correct: bool = False
    batches: int = 0


def run_pipeline(num_streams: int, batches: int = 12, elements: int = 3 << 19,
                 device: Device | None = None, warm_up: bool = False) -> PipelineResult:
    """Run the pipeline with 1 stream (everything in order) or 3 (one per stage, events between);
    a `warm_up` run is no instance of the profiler range `pipeline` (its page faults are no finding)."""
    if num_streams not in (1, 3):
        raise ValueError("the pipeline runs on 1 or 3 streams")
    check_batches(batches, elements)
    dev = device or Device(0)
    nbytes = elements * 8
    depth = 3                                      # device buffers in flight (same for both runs)
    rng = np.random.default_rng(0)
    inputs = [rng.random(elements) for _ in range(batches)]
    # Every batch has its own pinned input and output: the host stages all inputs before the
    # timed loop, so the loop measures the device pipeline, not host-side numpy copies.
    hosts_in = [malloc_host(nbytes) for _ in range(batches)]
    hosts_out = [malloc_host(nbytes) for _ in range(batches)]
    for host, x in zip(hosts_in, inputs):
        host.numpy(np.float64)[:] = x
    for host in hosts_out:
        host.numpy(np.float64)[:] = np.nan          # a batch that never arrives fails the check
    dev_in = [malloc(nbytes, dev) for _ in range(depth)]
    dev_out = [malloc(nbytes, dev) for _ in range(depth)]
    streams = [dev.create_stream() for _ in range(num_streams)]
    s_in, s_comp, s_out = (streams * 3)[:3] if num_streams == 1 else streams
    # One timing event pair per stage per batch measures stage time and stream busy time.
    ev = {(stage, b, edge): dev.create_event(timing=True)
          for stage in STAGES for b in range(batches) for edge in (0, 1)}
    # Cross-stage ordering and device-buffer reuse, all on the device (no host waits).
    in_ready = [dev.create_event() for _ in range(batches)]
    computed = [dev.create_event() for _ in range(batches)]
    out_copied = [dev.create_event() for _ in range(batches)]
    staged = num_streams > 1  # on one stream, order is implied: no cross-stage events

    def wait(stream, event):
        if staged:
            stream.wait(event)

    # The timed loop is a profiler range: the demo diagnoses it, not the staging around it.
    with nullcontext() if warm_up else profiler_range(PIPELINE_RANGE):
        start = dev.now_ns()  # the device clock: real time on cpu, virtual time on sim
        for b in range(batches):
            slot = b % depth
            if b >= depth:
                wait(s_in, computed[b - depth])                # dev_in[slot] was read by that kernel
            s_in.record(ev["h2d", b, 0])
            memcpy_async(dev_in[slot], hosts_in[b], stream=s_in)
            s_in.record(ev["h2d", b, 1])
            s_in.record(in_ready[b])
            wait(s_comp, in_ready[b])
            if b >= depth:
                wait(s_comp, out_copied[b - depth])            # dev_out[slot] was copied out
            s_comp.record(ev["compute", b, 0])
            launch(transform, dev_out[slot].view(np.float64), dev_in[slot].view(np.float64),
                   stream=s_comp, name="transform")
            s_comp.record(ev["compute", b, 1])
            s_comp.record(computed[b])
            wait(s_out, computed[b])
            s_out.record(ev["d2h", b, 0])
            memcpy_async(hosts_out[b], dev_out[slot], stream=s_out)
            s_out.record(ev["d2h", b, 1])
            s_out.record(out_copied[b])
        for s in streams:
            s.synchronize()
        seconds = (dev.now_ns() - start) / 1e9
    result = PipelineResult(num_streams, seconds, batches=batches)
    for stage in STAGES:
        times = [elapsed_time(ev[stage, b, 0], ev[stage, b, 1]) for b in range(batches)]
        result.stage_ms[stage] = float(np.mean(times))
    busy: dict[int, float] = {}
    for stage, s in zip(STAGES, (s_in, s_comp, s_out)):
        busy[s.id] = busy.get(s.id, 0.0) + result.stage_ms[stage] * batches / 1e3
    result.utilization = {f"stream {sid}": t / seconds for sid, t in busy.items()}
    expected = [np.empty_like(x) for x in inputs]
    for x, e in zip(inputs, expected):
        transform(e, x)  # the same computation on the host, to check the device's results
    result.correct = all(np.allclose(h.numpy(np.float64), e) for h, e in zip(hosts_out, expected))
    for s in streams:
        s.destroy()
    for buf in hosts_in + hosts_out + dev_in + dev_out:
        buf.free()
    return result


def pipeline_bound(r1: PipelineResult) -> float:
    """The speedup 3 streams can reach at best: K·(a+b+c) over a+b+c+(K-1)·max(a,b,c), from
    the stage times the 1-stream run measured (one engine per stage, K batches)."""
    a, b, c = (r1.stage_ms[s] for s in STAGES)
    k = r1.batches
    return k * (a + b + c) / (a + b + c + (k - 1) * max(a, b, c))


def check_batches(batches: object, elements: int = 3 << 19) -> None:
    """A count of batches (check_count), whose staged inputs and outputs fit in the memory
    this process can still have (OutOfMemoryError, 207001, otherwise): every batch sits in
    pinned host memory up front, and running out of it gets the process killed, not an error."""
    check_count("batches", batches)
    nbytes = 2 * int(batches) * elements * 8  # type: ignore[call-overload]  # (checked: an int)
    room = _available_memory()
    if room is not None and nbytes > room:
        raise OutOfMemoryError(f"the pipeline stages {nbytes >> 20} MiB of batches in host memory, "
                               f"more than the {room >> 20} MiB available here: use fewer batches")


def _available_memory() -> int | None:
    """Bytes this process can still have: the kernel's MemAvailable (free memory and the page
    cache it can drop), within a cgroup v2 limit if one is set; None where neither is known."""
    room = None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    room = int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as f:
            used = int(f.read().strip())
        if limit != "max":
            left = max(0, int(limit) - used)
            room = left if room is None else min(room, left)
    except (OSError, ValueError):
        pass
    return room


def check_count(what: str, n: object) -> None:
    """A count of batches or runs: an int of at least 1 (InvalidArgumentError otherwise)."""
    if type(n) is not int or n < 1:
        raise InvalidArgumentError(f"{what} must be an int >= 1, got {n!r}")


def measure(batches: int = 12, repeats: int = 3) -> dict:
    """Both pipelines (after a warm-up), interleaved; the median run of each, and whether all
    results were right."""
    check_count("batches", batches)
    check_count("repeats", repeats)
    run_pipeline(1, 3, warm_up=True)  # warm-up: first-touch page faults would otherwise count against one run
    runs: dict[int, list[PipelineResult]] = {1: [], 3: []}
    for _ in range(repeats):  # interleaved, so machine noise hits both alike; medians reported
        for n in (1, 3):
            runs[n].append(run_pipeline(n, batches))
    median = {n: sorted(rs, key=lambda r: r.seconds)[len(rs) // 2] for n, rs in runs.items()}
    correct = all(r.correct for rs in runs.values() for r in rs)
    return {"median": median, "correct": correct, "repeats": repeats,
            "backend": Device(0).properties.backend, "preset": Device(0).properties.preset}


BUSY_LOAD = 0.5  # a 1-minute load average from this high up means other processes run too


def load_average() -> float:
    """This machine's 1-minute load average (0 where the system keeps none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def _print_run(m: dict, batches: int) -> None:
    for r in m["median"].values():
        stages = ", ".join(f"{k} {v:.2f} ms" for k, v in r.stage_ms.items())
        util = ", ".join(f"{k} {v:.0%}" for k, v in r.utilization.items())
        print(f"{r.streams} stream{'s' if r.streams > 1 else ''}: {r.seconds * 1e3:.1f} ms for "
              f"{batches} batches (median of {m['repeats']}); per stage: {stages}; busy: {util}")
    med = m["median"]
    print(f"results: {'correct' if m['correct'] else 'WRONG'}")
    print(f"speedup with 3 streams: {med[1].seconds / med[3].seconds:.2f}x "
          f"(bound from the stage times: {pipeline_bound(med[1]):.2f}x)")


def _sim_side(batches: int, preset: str) -> dict | None:
    """The same demo on the sim backend, in a child process (a process has one backend)."""
    env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_SIM_PRESET=preset)
    env.pop("ASCENTRT_PROFILE", None)
    r = subprocess.run([sys.executable, "-m", "ascentrt.demo", "--json", str(batches)], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode not in (0, 1):
        print(f"(the sim run failed: {r.stderr.strip().splitlines()[-1:]})")
        return None
    return json.loads(r.stdout)


def main(batches: int = 12, repeats: int = 3, compare_preset: str | None = None) -> int:
    """Run both pipelines, check results, print speedup, stage times and utilization; with
    `compare_preset`, also the same program on the sim backend, side by side."""
    load = load_average()  # (before the run: what else shares the cores with it)
    m = measure(batches, repeats if Device(0).properties.backend == "cpu" else 1)
    where = ("sim backend, preset " + m["preset"] + " (virtual time: the same on every run)"
             if m["backend"] == "sim" else "cpu backend (this machine, real time)")
    print(f"== {where}")
    _print_run(m, batches)
    if m["backend"] == "cpu" and load >= BUSY_LOAD:
        print(f"(this machine was busy: 1-minute load average {load:.2f} on {os.cpu_count()} "
              f"cores. Other processes take time from the streams' threads, so the cpu figures, "
              f"the 3-stream speedup most, change from run to run; the sim backend's do not)")
    if compare_preset and m["backend"] == "cpu":
        other = _sim_side(batches, compare_preset)
        if other is not None:
            print(f"== sim backend, preset {compare_preset} (virtual time: the same on every run)")
            print(other["text"], end="")
            med = m["median"]
            rows = [("1 stream", f"{med[1].seconds * 1e3:.1f} ms", f"{other['ms'][0]:.2f} ms"),
                    ("3 streams", f"{med[3].seconds * 1e3:.1f} ms", f"{other['ms'][1]:.2f} ms"),
                    ("speedup", f"{med[1].seconds / med[3].seconds:.2f}x", f"{other['speedup']:.2f}x"),
                    ("bound", f"{pipeline_bound(med[1]):.2f}x", f"{other['bound']:.2f}x")]
            print(f"== side by side\n{'':<11}{'cpu (measured)':<17}sim {compare_preset}")
            for name, a, b in rows:
                print(f"{name:<11}{a:<17}{b}")
    return 0 if m["correct"] else 1


def _json_main(batches: int, repeats: int = 1) -> int:
    """`python -m ascentrt.demo --json N [R]`: the median of R runs per pipeline (default one),
    as JSON (for the side by side and the simulator's accuracy figures)."""
    import contextlib
    import io
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        m = measure(batches, repeats)
        _print_run(m, batches)
    med = m["median"]
    print(json.dumps({"ms": [med[1].seconds * 1e3, med[3].seconds * 1e3],
                      "speedup": med[1].seconds / med[3].seconds, "bound": pipeline_bound(med[1]),
                      "correct": m["correct"], "text": text.getvalue(),
                      "runs": {n: asdict(r) for n, r in med.items()}}))
    return 0 if m["correct"] else 1


__all__ = ["PipelineResult", "check_batches", "check_count", "main", "run_pipeline", "transform"]


def _entry(argv: list[str]) -> int:
    """`python -m ascentrt.demo --json [N [R]]`; a bad argument is one line with its code."""
    try:
        if not argv or argv[0] != "--json" or len(argv) > 3:
            raise InvalidArgumentError("usage: python -m ascentrt.demo --json [batches [repeats]] "
                                       "(the command is `ascentrt demo`)")
        counts = []
        for what, text, default in (("batches", argv[1:2], 12), ("repeats", argv[2:3], 1)):
            try:
                counts.append(int(text[0]) if text else default)
            except ValueError:
                check_count(what, text[0])  # (refuses the text as it stands)
        return _json_main(*counts)
    except AscentError as e:
        print(f"ascentrt demo: error: {e.in_words()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_entry(sys.argv[1:]))
