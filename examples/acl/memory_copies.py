"""Memory copies of every kind: H2H, H2D, D2H, D2D, DEFAULT, 2-D pitched, async, memset."""

import numpy as np

import ascentrt.acl as acl
from ascentrt.acl import constants as C


def check(ret, what):
    if ret != C.ACL_SUCCESS:
        raise RuntimeError(f"{what} failed: {ret} ({acl.get_recent_err_msg()})")


def main():
    check(acl.init(), "init")
    check(acl.rt.set_device(0), "set_device")
    stream, _ = acl.rt.create_stream()
    n = 4096
    src = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    src_bytes = src.tobytes()                  # keep it alive while its pointer is in use
    src_ptr = acl.util.bytes_to_ptr(src_bytes)
    pinned, _ = acl.rt.malloc_host(n)
    dev_a, _ = acl.rt.malloc(n, C.ACL_MEM_MALLOC_NORMAL_ONLY)
    dev_b, _ = acl.rt.malloc(n, C.ACL_MEM_MALLOC_HUGE_ONLY)
    back = bytes(n)
    back_ptr = acl.util.bytes_to_ptr(back)

    check(acl.rt.memcpy(pinned, n, src_ptr, n, C.ACL_MEMCPY_HOST_TO_HOST), "H2H")
    check(acl.rt.memcpy(dev_a, n, pinned, n, C.ACL_MEMCPY_HOST_TO_DEVICE), "H2D")
    check(acl.rt.memcpy(dev_b, n, dev_a, n, C.ACL_MEMCPY_DEVICE_TO_DEVICE), "D2D")
    check(acl.rt.memcpy(back_ptr, n, dev_b, n, C.ACL_MEMCPY_DEFAULT), "DEFAULT (D2H)")
    assert back == src.tobytes()
    print("sync copies H2H -> H2D -> D2D -> D2H: round trip equal")

    # Asynchronous: from pinned memory the call returns at once; synchronize before reading.
    check(acl.rt.memset_async(dev_a, n, 0xAB, n, stream), "memset_async")
    check(acl.rt.memcpy_async(pinned, n, dev_a, n, C.ACL_MEMCPY_DEVICE_TO_HOST, stream), "D2H async")
    check(acl.rt.synchronize_stream(stream), "synchronize")
    assert acl.util.ptr_to_bytes(pinned, n) == b"\xab" * n
    print("memset_async + memcpy_async D2H: all bytes 0xab")

    # 2-D: copy a 16x32 window out of a 64-byte-pitch host image into a packed device array.
    rows, width, pitch = 16, 32, 64
    image = np.arange(rows * pitch, dtype=np.uint8).reshape(rows, pitch)
    image_bytes = image.tobytes()
    image_ptr = acl.util.bytes_to_ptr(image_bytes)
    check(acl.rt.memcpy2d(dev_a, width, image_ptr, pitch, width, rows, C.ACL_MEMCPY_HOST_TO_DEVICE), "2d H2D")
    packed = np.frombuffer(acl.util.ptr_to_bytes(dev_a, rows * width), np.uint8).reshape(rows, width)
    assert np.array_equal(packed, image[:, :width])
    print("memcpy2d H2D: window equal")

    check(acl.rt.memset(dev_b, n, 7, 100), "memset")
    assert acl.util.ptr_to_bytes(dev_b, 100) == b"\x07" * 100
    free, total, ret = acl.rt.get_mem_info(C.ACL_HBM_MEM)
    print(f"device memory: {free} of {total} bytes free")
    check(ret, "get_mem_info")

    for ptr in (dev_a, dev_b):
        check(acl.rt.free(ptr), "free")
    check(acl.rt.free_host(pinned), "free_host")
    check(acl.rt.destroy_stream(stream), "destroy_stream")
    check(acl.rt.reset_device(0), "reset_device")
    check(acl.finalize(), "finalize")
    print("memory copies OK")


if __name__ == "__main__":
    main()
