"""Events: order work across streams and time it with elapsed_time."""

import sys

import numpy as np

import ascentrt as art


def main() -> int:
    """Time a matmul between two timing events; make a second stream wait for its result."""
    dev = art.set_device(0)
    n = 256
    a = art.malloc(n * n * 4)
    c = art.malloc(n * n * 4)
    total = art.malloc(32)
    art.memcpy(a, np.full((n, n), 0.5, dtype=np.float32))
    compute, reduce = dev.create_stream(), dev.create_stream()
    start, end = dev.create_event(timing=True), dev.create_event(timing=True)
    mat = (lambda b: b.view(np.float32, (n, n)))
    start.record(compute)
    for _ in range(10):
        art.launch(art.kernels.matmul, mat(c), mat(a), mat(a), stream=compute)
    end.record(compute)
    reduce.wait(end)                      # the reduction waits for the matmuls, not for the host
    art.launch(art.kernels.reduce_sum, total.view(np.float32, 1), mat(c), stream=reduce)
    reduce.synchronize(timeout=30)
    ms = art.elapsed_time(start, end)
    value = float(total.numpy(np.float32)[0])
    expected = n * n * (0.5 * 0.5 * n)
    print(f"10 matmuls of {n}x{n} took {ms:.3f} ms between the two events")
    print(f"reduce on stream {reduce.id} waited for stream {compute.id}: sum = {value:.0f} "
          f"(expected {expected:.0f})")
    try:
        art.elapsed_time(dev.create_event(timing=True), end)
    except art.AscentError as exc:
        print(f"elapsed_time with an unrecorded event: error {int(exc.code)}")
    for s in (compute, reduce):
        s.destroy()
    for b in (a, c, total):
        b.free()
    return 0 if value == expected else 1


if __name__ == "__main__":
    sys.exit(main())
