"""Describe work as a TaskGraph of byte ranges, let the scheduler place it on streams, run it.

Run: python examples/graphs/task_graph_schedule.py   (prints OK at the end)
"""

import numpy as np

import ascentrt as art


def main() -> None:
    art.set_device(0)
    n = 1 << 15
    data = art.malloc(4 * n * 4)                        # four quarters, one per chain
    out = art.malloc(n * 4)
    quarters = [data[i * n * 4:(i + 1) * n * 4] for i in range(4)]
    views = [q.view(np.float32) for q in quarters]

    g = art.TaskGraph()
    for q, v in zip(quarters, views):                    # dependencies come from the ranges
        g.add_memset(q, 0)
        g.add_kernel(art.kernels.fill, v, 1.0, cost=2.0)
        g.add_kernel(art.kernels.scale, v, v, 2.0, cost=2.0)
    g.add_kernel(lambda o, *parts: np.sum(parts, axis=0, out=o), out.view(np.float32), *views,
                 reads=quarters, writes=[out], name="sum")

    schedule = g.schedule(num_streams=4)
    print(schedule.report())
    schedule.run(timeout=10)
    assert np.all(out.numpy(np.float32) == 8.0)

    graph = schedule.capture()                           # the same work as a replayable graph
    out.numpy(np.float32)[:] = 0
    graph.execute(timeout=10)
    assert np.all(out.numpy(np.float32) == 8.0)
    graph.destroy()
    data.free()
    out.free()
    print("OK")


if __name__ == "__main__":
    main()
