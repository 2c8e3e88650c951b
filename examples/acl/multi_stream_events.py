"""Two producer streams and one consumer: the consumer waits on events, never on the host."""

import numpy as np

import ascentrt.acl as acl
from ascentrt.acl.constants import (ACL_EVENT_SYNC, ACL_EVENT_TIME_LINE, ACL_MEM_MALLOC_HUGE_FIRST,
                                    ACL_MEMCPY_DEVICE_TO_HOST, ACL_SUCCESS)


def check(ret, what):
    if ret != ACL_SUCCESS:
        raise RuntimeError(f"{what} failed: {ret}")


def main():
    check(acl.init(), "init")
    check(acl.rt.set_device(0), "set_device")
    n = 1 << 16
    nbytes = n * 8
    a, _ = acl.rt.malloc(nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
    b, _ = acl.rt.malloc(nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
    out, _ = acl.rt.malloc(nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
    producers = [acl.rt.create_stream()[0] for _ in range(2)]
    consumer, _ = acl.rt.create_stream()
    ready = [acl.rt.create_event_with_flag(ACL_EVENT_SYNC | ACL_EVENT_TIME_LINE)[0] for _ in range(2)]

    def fill(buf, value):
        buf[:] = value

    view = lambda p: (p, np.float64, (n,))  # noqa: E731 - a device pointer seen as float64[n]
    for stream, ptr, value, event in zip(producers, (a, b), (1.5, 2.5), ready):
        check(acl.rt.launch_kernel(fill, (view(ptr), value), stream), "fill")
        check(acl.rt.record_event(event, stream), "record_event")
    for event in ready:
        check(acl.rt.stream_wait_event(consumer, event), "stream_wait_event")
    check(acl.rt.launch_kernel("add", (view(out), view(a), view(b)), consumer), "add")
    result = bytes(nbytes)
    check(acl.rt.memcpy_async(acl.util.bytes_to_ptr(result), nbytes, out, nbytes,
                              ACL_MEMCPY_DEVICE_TO_HOST, consumer), "memcpy_async")
    check(acl.rt.synchronize_stream(consumer), "synchronize consumer")
    status, ret = acl.rt.query_event_wait_status(ready[0])
    check(ret, "query_event_wait_status")
    values = np.frombuffer(result, dtype=np.float64)
    assert status == 0 and np.all(values == 4.0), (status, values[:4])
    print(f"out[:3] = {values[:3]} (1.5 + 2.5), waits complete: {status == 0}")

    for event in ready:
        check(acl.rt.destroy_event(event), "destroy_event")
    for stream in producers + [consumer]:
        check(acl.rt.destroy_stream(stream), "destroy_stream")
    for ptr in (a, b, out):
        check(acl.rt.free(ptr), "free")
    check(acl.rt.reset_device(0), "reset_device")
    check(acl.finalize(), "finalize")
    print("multi-stream events OK")


if __name__ == "__main__":
    main()
