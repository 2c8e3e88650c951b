"""Quick start: init -> set device -> stream -> malloc -> memcpy -> kernel -> sync -> free -> reset -> finalize.

Written as a pyACL program; only the import line differs.
"""

import numpy as np

import ascentrt.acl as acl

ACL_SUCCESS = 0
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_HOST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2


def check(ret, what):
    if ret != ACL_SUCCESS:
        raise RuntimeError(f"{what} failed: {ret} ({acl.get_recent_err_msg()})")


def main():
    check(acl.init(), "init")
    device_id = 0
    check(acl.rt.set_device(device_id), "set_device")
    stream, ret = acl.rt.create_stream()
    check(ret, "create_stream")

    n = 1024
    nbytes = n * 4
    host = np.arange(n, dtype=np.float32)
    dev_x, ret = acl.rt.malloc(nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
    check(ret, "malloc x")
    dev_y, ret = acl.rt.malloc(nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
    check(ret, "malloc y")
    host_buf, ret = acl.rt.malloc_host(nbytes)
    check(ret, "malloc_host")

    # Stage the input in pinned host memory, then copy it to the device (bytes_to_ptr and
    # ptr_to_bytes: pyACL's current way between Python and its pointers; ptr_to_numpy and
    # numpy_to_ptr still work, with pyACL's deprecation warning).
    data = host.tobytes()
    check(acl.rt.memcpy(host_buf, nbytes, acl.util.bytes_to_ptr(data), nbytes, ACL_MEMCPY_HOST_TO_HOST),
          "memcpy stage")
    check(acl.rt.memcpy(dev_x, nbytes, host_buf, nbytes, ACL_MEMCPY_HOST_TO_DEVICE), "memcpy H2D")

    # y = 3 * x on the device (a built-in kernel; any Python callable works the same way).
    x = (dev_x, np.float32, (n,))
    y = (dev_y, np.float32, (n,))
    check(acl.rt.launch_kernel("scale", (y, x, 3.0), stream), "launch_kernel")
    check(acl.rt.memcpy_async(host_buf, nbytes, dev_y, nbytes, ACL_MEMCPY_DEVICE_TO_HOST, stream),
          "memcpy_async D2H")
    check(acl.rt.synchronize_stream(stream), "synchronize_stream")

    result = np.frombuffer(acl.util.ptr_to_bytes(host_buf, nbytes), dtype=np.float32)
    assert np.array_equal(result, 3 * host), "wrong result"
    print(f"y[:4] = {result[:4]}  (3 * x)")

    check(acl.rt.free(dev_x), "free x")
    check(acl.rt.free(dev_y), "free y")
    check(acl.rt.free_host(host_buf), "free_host")
    check(acl.rt.destroy_stream(stream), "destroy_stream")
    check(acl.rt.reset_device(device_id), "reset_device")
    check(acl.finalize(), "finalize")
    print("quick start OK")


if __name__ == "__main__":
    main()
