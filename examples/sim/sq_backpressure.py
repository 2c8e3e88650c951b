"""Submission-queue back-pressure: a stream holds at most queue_depth pending tasks (2048 on
ascend910b); the launch after that waits for the oldest to finish, as a full SQ makes the
host wait on hardware.

    python examples/sim/sq_backpressure.py
"""

import os
import subprocess
import sys

PROGRAM = r"""
import ascentrt as art
dev = art.Device(0)
s = dev.create_stream()
depth = art.Device(0)._backend.preset.queue_depth
marks = []
for i in range(depth + 3):
    t0 = dev.now_ns()
    art.launch(lambda: None, stream=s, cost=10e-3, name="k")   # 10 ms each: the SQ fills
    marks.append(dev.now_ns() - t0)
s.synchronize()
print(depth, marks[depth - 1], marks[depth], marks[depth + 1])
"""

if __name__ == "__main__":
    env = dict(os.environ, ASCENTRT_BACKEND="sim")
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    depth, before, full, after = (int(x) for x in out)
    print(f"queue depth {depth}: launch {depth} took {before / 1e3:.1f} us of host time, "
          f"launch {depth + 1} {full / 1e3:.1f} us (it waited for a slot), "
          f"launch {depth + 2} {after / 1e3:.1f} us")
