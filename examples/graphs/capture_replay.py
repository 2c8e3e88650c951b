"""Capture a fork/join step across three streams once, replay it many times, update one kernel.

Run: python examples/graphs/capture_replay.py   (prints OK at the end)
"""

import numpy as np

import ascentrt as art


def main() -> None:
    dev = art.set_device(0)
    main_stream, left, right = (dev.create_stream() for _ in range(3))
    n = 1 << 16
    x, a, b = (art.malloc(n * 4) for _ in range(3))
    xv, av, bv = (buf.view(np.float32) for buf in (x, a, b))
    x.numpy(np.float32)[:] = 1.0

    # Record: x -> (a = 2x on one stream, b = 3x on another) -> x = a + b.
    main_stream.begin_capture(art.CaptureMode.GLOBAL)
    fork = main_stream.record()
    left.wait(fork)                      # waiting on a captured event joins the capture
    right.wait(fork)
    art.launch(art.kernels.scale, av, xv, 2.0, stream=left)
    right.begin_task_group()             # this kernel's arguments can be updated later
    art.launch(art.kernels.scale, bv, xv, 3.0, stream=right)
    group = right.end_task_group()
    main_stream.wait(left.record())      # join both streams back before ending
    main_stream.wait(right.record())
    art.launch(art.kernels.add, xv, av, bv, stream=main_stream)
    graph = main_stream.end_capture()
    print(graph, graph.plan_summary())

    for _ in range(3):                   # each step multiplies x by 5
        graph.launch(main_stream)
    main_stream.synchronize(timeout=10)
    assert np.allclose(x.numpy(np.float32), 125.0)

    with graph.update(group, right):     # same kernel, new scalar: each step now multiplies by 6
        art.launch(art.kernels.scale, bv, xv, 4.0, stream=right)
    graph.execute(timeout=10)
    assert np.allclose(x.numpy(np.float32), 750.0)

    print(graph.to_dot().splitlines()[0], "...")
    graph.destroy()
    for s in (main_stream, left, right):
        s.destroy()
    for buf in (x, a, b):
        buf.free()
    print("OK")


if __name__ == "__main__":
    main()
