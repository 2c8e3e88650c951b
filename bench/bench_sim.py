"""Speed of the simulator itself: small tasks simulated per wall second against the cpu
backend's tasks per second for the same program, and the wall time of a 100k-task program.

Each side runs in its own process (a process has one backend), interleaved run by run so that
machine noise hits both alike. The program: no-op kernels launched round-robin over 4 streams,
with an event record and a wait between streams every 8 launches, then one synchronize.
"""

from __future__ import annotations

import os
import subprocess
import sys

from _common import emit, median, pick

TASKS = pick(20000, 500)
BIG = pick(100_000, 1000)
RUNS = pick(5, 1)

PROGRAM = r"""
import sys, time
import ascentrt as art
from ascentrt.kernels import noop
n = int(sys.argv[1])
streams = [art.Stream() for _ in range(4)]
launch = art.launch
t0 = time.perf_counter()
tasks = 0
for i in range(n):
    s = streams[i % 4]
    launch(noop, stream=s)
    tasks += 1
    if i % 8 == 7:
        streams[(i + 1) % 4].wait(s.record())
        tasks += 2
for s in streams:
    s.synchronize()
wall = time.perf_counter() - t0
print(tasks / wall, wall, art.Device(0).now_ns())
"""


def run(backend: str, n: int) -> tuple[float, float, int]:
    """(tasks per wall second, wall seconds, device clock at the end) of one run."""
    env = dict(os.environ, ASCENTRT_BACKEND=backend)
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(n)], env=env, capture_output=True,
                         text=True, timeout=600, check=True)
    rate, wall, clock = out.stdout.split()
    return float(rate), float(wall), int(clock)


def main() -> None:
    sim, cpu, clocks = [], [], set()
    for _ in range(RUNS):
        cpu.append(run("cpu", TASKS)[0])
        rate, _, clock = run("sim", TASKS)
        sim.append(rate)
        clocks.add(clock)
    emit("sim_tasks_per_wall_second", median(sim), "tasks/s", "cpu backend, same program",
         median(cpu), ">=", 1.0, "simulating is at least as fast as running on cpu",
         note=f"virtual end time identical in every run: {len(clocks) == 1}")
    walls = [run("sim", BIG)[1] for _ in range(max(1, RUNS // 2))]
    emit("sim_100k_task_program_wall", median(walls), "s", "one minute", 60.0, "<=", 0.5,
         "a 100k-launch program simulates in well under a minute")




# ---- accuracy: the `calibrated` preset against the cpu backend it was measured on -----------

COPY_PROGRAM = r"""
import time, ascentrt as art
n = 64 << 20
s = art.Stream(); h = art.malloc_host(n); d = art.malloc(n)
art.memcpy_async(d, h, stream=s); s.synchronize()
dev = art.Device(0)
times = []
for _ in range(7):
    t0 = dev.now_ns(); art.memcpy_async(d, h, stream=s); s.synchronize(); times.append(dev.now_ns() - t0)
print(sorted(times)[3] / 1e6)
"""


def _demo_ms(env) -> list[float]:
    out = subprocess.run([sys.executable, "-m", "ascentrt.demo", "--json", "12"], env=env,
                         capture_output=True, text=True, timeout=600, check=True)
    return __import__("json").loads(out.stdout)["ms"]


def accuracy() -> None:
    """Predicted (sim, calibrated) vs measured (cpu) for the demo pipeline and a 64 MiB copy."""
    import tempfile
    preset = os.path.join(tempfile.mkdtemp(), "calibrated.toml")
    subprocess.run([sys.executable, "-m", "ascentrt", "calibrate", "-o", preset], check=True,
                   capture_output=True, timeout=600)
    cpu_env = dict(os.environ, ASCENTRT_BACKEND="cpu")
    sim_env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_SIM_PRESET=preset)
    measured = [_demo_ms(cpu_env) for _ in range(max(3, RUNS))]
    predicted = _demo_ms(sim_env)
    for i, label in enumerate(("1_stream", "3_streams")):
        runs = [m[i] for m in measured]
        meas = median(runs)
        spread = (max(runs) - min(runs)) / meas
        emit(f"sim_accuracy_demo_{label}", abs(predicted[i] - meas) / meas, "error", "exact",
             1.0, "<=", 0.15, "calibrated sim within 15% of the measured cpu run",
             note=f"predicted {predicted[i]:.2f} ms, measured {meas:.2f} ms (median of "
                  f"{len(runs)}, spread {spread:.0%})")
    copy = [float(subprocess.run([sys.executable, "-c", COPY_PROGRAM], env=env, capture_output=True,
                                 text=True, timeout=600, check=True).stdout) for env in (cpu_env, sim_env)]
    emit("sim_accuracy_copy_64MiB", abs(copy[1] - copy[0]) / copy[0], "error", "exact", 1.0, "<=",
         0.15, "calibrated sim within 15% of the measured cpu copy",
         note=f"predicted {copy[1]:.2f} ms, measured {copy[0]:.2f} ms")


if __name__ == "__main__":
    main()
    accuracy()
