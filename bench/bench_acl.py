"""pyACL facade figures: what the translation (arg parsing, handles, pointer checks) costs over the core.

Each figure interleaves the facade call with the same core call in one process; the ratio is
facade / core per call (lower is better).
"""

from __future__ import annotations

import time

from _common import emit, median, pick

import ascentrt as art
import ascentrt.acl as acl
from ascentrt.kernels import noop

BURST = pick(2000, 100)
BURSTS = pick(21, 3)
COPY_BYTES = 4096


def per_call_ns(fn, n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - t0) / n


def interleaved(facade, core, sync) -> tuple[float, float]:
    """Median ns per call of the facade and of the core over alternating bursts."""
    a, b = [], []
    for _ in range(BURSTS):
        a.append(per_call_ns(facade, BURST))
        sync()
        b.append(per_call_ns(core, BURST))
        sync()
    return median(a), median(b)


def main() -> None:
    acl.rt.set_device(0)
    handle, _ = acl.rt.create_stream()
    from ascentrt.acl._api import STREAMS
    stream = STREAMS.get(handle)

    def sync():
        stream.synchronize(120)

    facade, core = interleaved(lambda: acl.rt.launch_kernel(noop, (), handle),
                               lambda: art.launch(noop, stream=stream), sync)
    emit("acl_launch_kernel_noop", facade, "ns/launch", "ascentrt.launch", core, "<=", 4.0,
         "parsing, handle lookup and translation cost at most 3 core launches")

    dev, _ = acl.rt.malloc(COPY_BYTES, 0)
    host, _ = acl.rt.malloc_host(COPY_BYTES)
    facade, core = interleaved(lambda: acl.rt.memcpy(dev, COPY_BYTES, host, COPY_BYTES, 1),
                               lambda: art.memcpy(dev, host, COPY_BYTES), sync)
    emit("acl_memcpy_4k_h2d", facade, "ns/copy", "ascentrt.memcpy(int pointers)", core, "<=", 1.5,
         "the facade adds at most half of the core's checked pointer copy")
    acl.rt.free(dev)
    acl.rt.free_host(host)

    def acl_malloc_free():
        ptr, _ = acl.rt.malloc(1 << 20, 0)
        acl.rt.free(ptr)

    facade, core = interleaved(acl_malloc_free, lambda: art.malloc(1 << 20).free(), sync)
    emit("acl_malloc_free_1MiB", facade, "ns", "ascentrt.malloc + free()", core, "<=", 1.5,
         "the facade's int pointers cost at most half the core path more")

    ev_core = art.Event(stream.device)
    ev, _ = acl.rt.create_event()
    facade, core = interleaved(lambda: acl.rt.record_event(ev, handle),
                               lambda: ev_core.record(stream), sync)
    emit("acl_record_event", facade, "ns/record", "Event.record", core, "<=", 2.0,
         "two handle lookups add at most one core record")
    acl.rt.reset_device_force(0)


if __name__ == "__main__":
    main()
