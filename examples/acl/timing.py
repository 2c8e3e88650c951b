"""Event timestamps and elapsed time around a kernel."""

import numpy as np

import ascentrt.acl as acl
from ascentrt.acl.constants import ACL_EVENT_RECORDED_STATUS_COMPLETE, ACL_MEM_MALLOC_HUGE_FIRST


def main():
    acl.init()
    acl.rt.set_device(0)
    stream, _ = acl.rt.create_stream()
    start, _ = acl.rt.create_event()
    end, _ = acl.rt.create_event()
    n = 256
    a, _ = acl.rt.malloc(n * n * 8, ACL_MEM_MALLOC_HUGE_FIRST)
    c, _ = acl.rt.malloc(n * n * 8, ACL_MEM_MALLOC_HUGE_FIRST)
    mat = lambda p: (p, np.float64, (n, n))  # noqa: E731
    acl.rt.launch_kernel("fill", (mat(a), 1.0), stream)
    acl.rt.record_event(start, stream)
    for _ in range(5):
        acl.rt.launch_kernel("matmul", (mat(c), mat(a), mat(a)), stream)
    acl.rt.record_event(end, stream)
    assert acl.rt.synchronize_stream(stream) == 0
    status, _ = acl.rt.query_event_status(end)
    ms, ret = acl.rt.event_elapsed_time(start, end)
    t0, _ = acl.rt.event_get_timestamp(start)
    t1, _ = acl.rt.event_get_timestamp(end)
    print(f"5 matmuls of {n}x{n}: {ms:.3f} ms (timestamps {t0} -> {t1} us)")
    assert ret == 0 and ms > 0 and t1 >= t0 and status == ACL_EVENT_RECORDED_STATUS_COMPLETE
    for ev in (start, end):
        acl.rt.destroy_event(ev)
    acl.rt.free(a)
    acl.rt.free(c)
    acl.rt.destroy_stream(stream)
    acl.rt.reset_device(0)
    acl.finalize()
    print("timing OK")


if __name__ == "__main__":
    main()
