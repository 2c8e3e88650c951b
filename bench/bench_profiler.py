"""Profiler figures: launch cost with profiling off and on, against launches before any profile;
the time and peak memory of writing a 50k-task program's profile folder.

Profiling off leaves no profiler code on the launch path (the recording wrappers exist only
while a profile runs), so the off figure is the launch cost after profiles ran and stopped,
against the same process before any profile: the baseline with no profiler code path. Each
round is a fresh process (baseline bursts, then profiled bursts alternating with off bursts);
the figures are medians over rounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from _common import QUICK, emit, median, pick

BURST = pick(1000, 200)    # launches per timed burst (a burst ends with an untimed sync)
BURSTS = pick(9, 3)        # bursts per child process and mode
ROUNDS = pick(7, 1)        # fresh processes (machine load varies: several)
WRITE_TASKS = pick(50_000, 2_000)  # tasks of the program whose profile folder is written
WRITE_ROUNDS = pick(3, 1)
TIMEOUT = 120.0


def launch_burst_ns(art, stream, n: int) -> float:
    """ns per launch of `n` no-op kernels on `stream` (the synchronize after is not timed)."""
    from ascentrt.kernels import noop
    launch = art.launch  # looked up per burst: profiling swaps it
    t0 = time.perf_counter_ns()
    for _ in range(n):
        launch(noop, stream=stream)
    t1 = time.perf_counter_ns()
    stream.synchronize(TIMEOUT)
    return (t1 - t0) / n


def child() -> None:
    """In a fresh process: bursts before any profile (baseline), then profiled bursts, each in
    its own session, alternating with bursts after it stopped (off); prints the three lists."""
    import ascentrt as art
    stream = art.set_device(0).create_stream()
    for _ in range(3):
        launch_burst_ns(art, stream, BURST)  # warm-up: threads started, code specialized
    baseline = [launch_burst_ns(art, stream, BURST) for _ in range(BURSTS)]
    on, off = [], []
    for _ in range(BURSTS):
        with art.profile():
            on.append(launch_burst_ns(art, stream, BURST))
        # Swapping methods on classes makes CPython re-specialize the code using them: the
        # first burst after a stop pays that once (a few %); the steady state is what "off" is.
        launch_burst_ns(art, stream, BURST)
        off.append(launch_burst_ns(art, stream, BURST))
    print(json.dumps({"baseline": baseline, "on": on, "off": off}))


def write_child() -> None:
    """In a fresh process: a program of WRITE_TASKS no-op launches under a profile; prints the
    seconds its folder takes to write and the process's peak RSS before and after the write."""
    import resource
    import tempfile
    import ascentrt as art
    from ascentrt.kernels import noop
    stream = art.set_device(0).create_stream()
    with tempfile.TemporaryDirectory() as folder:
        session = art.profile(folder)
        session.__enter__()
        for _ in range(WRITE_TASKS):
            art.launch(noop, stream=stream)
        stream.synchronize(TIMEOUT)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        session.stop()  # records end, the folder is written
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "rss_before_mib": before / 1024, "rss_peak_mib": after / 1024}))


def run_child(mode: str = "--child") -> dict:
    args = [sys.executable, __file__, mode] + (["--quick"] if QUICK else [])
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure and print the off and on figures as JSON lines."""
    samples = {"baseline": [], "off": [], "on": []}
    for _ in range(ROUNDS):  # fresh processes: one unlucky process does not decide the figure
        for key, values in run_child().items():
            samples[key].append(median(values))
    base = median(samples["baseline"])
    emit("profiler_off_launch_cost", median(samples["off"]), "ns/launch",
         "launch before any profile ran", base, "<=", 1.05,
         "profiling off: no measurable launch overhead")
    emit("profiler_on_launch_cost", median(samples["on"]), "ns/launch",
         "launch before any profile ran", base, "<=", 2.0,
         "profiling on: at most 2x the launch cost")
    writes = [run_child("--write-child") for _ in range(WRITE_ROUNDS)]
    emit(f"profile_write_{WRITE_TASKS // 1000}k_tasks", median(w["seconds"] for w in writes), "s",
         "a budget of 3 s", 3.0, "<=", 1.0,
         f"writing the profile folder of a {WRITE_TASKS}-task program; median of {WRITE_ROUNDS} processes")
    emit(f"profile_write_{WRITE_TASKS // 1000}k_tasks_peak_rss", median(w["rss_peak_mib"] for w in writes),
         "MiB", "a budget of 100 MiB", 100.0, "<=", 1.0,
         "the process's peak RSS through the write",
         note=f"peak RSS before the write (the program and its records): "
              f"{median(w['rss_before_mib'] for w in writes):.0f} MiB")


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    elif "--write-child" in sys.argv:
        write_child()
    else:
        main()
