"""Profiler figures: launch cost with profiling off and on, against launches before any profile.

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


def run_child() -> dict:
    args = [sys.executable, __file__, "--child"] + (["--quick"] if QUICK else [])
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


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
