"""Copy figures: memcpy_async H2D / D2H / D2D at 64 MiB (pinned host memory, warm pages) vs
np.copyto, and the host cost of a small synchronous memcpy on an idle device.

Each timed copy is one memcpy_async plus the stream synchronize that waits for it; the
baseline is np.copyto between two warm numpy arrays of the same size, timed alternately
with it so that machine noise hits both alike.
"""

from __future__ import annotations

import time

import numpy as np
from _common import emit, median, pick

import ascentrt as art

NBYTES = pick(64 << 20, 4 << 20)
REPEATS = pick(21, 3)
TIMEOUT = 60.0


def async_copy_s(dst, src, stream) -> float:
    """Seconds for one memcpy_async and the synchronize that waits for it."""
    t0 = time.perf_counter()
    art.memcpy_async(dst, src, stream=stream)
    stream.synchronize(TIMEOUT)
    return time.perf_counter() - t0


def copyto_s(dst: np.ndarray, src: np.ndarray) -> float:
    """Seconds for one np.copyto."""
    t0 = time.perf_counter()
    np.copyto(dst, src)
    return time.perf_counter() - t0


def main() -> None:
    """Measure and print the three copy figures as JSON lines."""
    dev = art.set_device(0)
    stream = dev.create_stream()
    host = art.malloc_host(NBYTES)
    dev_a, dev_b = art.malloc(NBYTES, dev), art.malloc(NBYTES, dev)
    host.numpy()[:] = 7                        # warm every page of every operand
    np_src, np_dst = np.full(NBYTES, 7, np.uint8), np.zeros(NBYTES, np.uint8)
    cases = (("h2d", dev_a, host), ("d2h", host, dev_a), ("d2d", dev_b, dev_a))
    for _, dst, src in cases:
        async_copy_s(dst, src, stream)
    gb = NBYTES / 1e9
    mib = NBYTES >> 20
    pinned = "pinned" if host.pinned else "page-locked not permitted (mlock limit)"
    for name, dst, src in cases:
        ours, theirs = [], []
        for _ in range(REPEATS):
            theirs.append(copyto_s(np_dst, np_src))
            ours.append(async_copy_s(dst, src, stream))
        emit(f"memcpy_async_{name}_{mib}MiB", gb / median(ours), "GB/s", "np.copyto",
             gb / median(theirs), ">=", 0.9, f"at least 0.9x; median of {REPEATS}",
             note=f"host buffer: {pinned}")
    if not np.array_equal(host.numpy()[:4096], np.full(4096, 7, np.uint8)):
        raise SystemExit("copy results are wrong")
    sync_copy_figures(dev)
    for buf in (host, dev_a, dev_b):
        buf.free()
    stream.destroy()


def per_call_ns(fn, n: int) -> float:
    """ns per call of fn() over n calls."""
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def sync_copy_figures(dev) -> None:
    """Synchronous memcpy of 4 KiB H2D and D2H (pinned host buffer, idle device) against
    np.copyto of 4 KiB called through one Python function."""
    n, calls, rounds = 4096, pick(2000, 50), pick(21, 3)
    host, devbuf = art.malloc_host(n), art.malloc(n, dev)
    a, b = np.zeros(n, np.uint8), np.ones(n, np.uint8)

    def copy(dst, src):
        np.copyto(dst, src)

    memcpy = art.memcpy
    for name, dst, src in (("h2d", devbuf, host), ("d2h", host, devbuf)):
        ours, theirs = [], []
        for _ in range(rounds):
            theirs.append(per_call_ns(lambda: copy(a, b), calls))
            ours.append(per_call_ns(lambda: memcpy(dst, src, n), calls))
        emit(f"memcpy_sync_4KiB_{name}", median(ours), "ns/copy", "np.copyto 4 KiB + a Python call",
             median(theirs), "<=", 4.0, f"at most 4x; median of {rounds} runs of {calls}")
    host.free()
    devbuf.free()


if __name__ == "__main__":
    main()
