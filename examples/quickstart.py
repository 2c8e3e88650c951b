"""Quick start: allocate, copy to the device, run a kernel, copy back, check the result."""

import sys

import numpy as np

import ascentrt as art


def main() -> int:
    """Scale a vector on device 0 and print what happened."""
    dev = art.set_device(0)
    p = dev.properties
    print(f"device {p.id}: {p.name} ({p.backend}), {p.compute_units} compute units, "
          f"{p.copy_engines} copy engines, {p.total_memory >> 20} MiB")
    x = np.arange(1 << 16, dtype=np.float32)
    with dev.create_stream() as stream:
        buf_in, buf_out = art.malloc(x.nbytes), art.malloc(x.nbytes)
        host = art.malloc_host(x.nbytes)            # pinned: copies from it are asynchronous
        host.numpy(np.float32)[:] = x
        art.memcpy_async(buf_in, host, stream=stream)
        art.launch(art.kernels.scale, buf_out.view(np.float32), buf_in.view(np.float32), 2.0,
                   stream=stream)
        art.memcpy_async(host, buf_out, stream=stream)
        stream.synchronize(timeout=10)
        ok = np.array_equal(host.numpy(np.float32), 2 * x)
        print(f"buffers at {buf_in.ptr:#x} and {buf_out.ptr:#x} (64-byte aligned: "
              f"{buf_in.ptr % 64 == 0 and buf_out.ptr % 64 == 0}), host pinned: {host.pinned}")
        for b in (buf_in, buf_out, host):
            b.free()
    free, total = dev.mem_info()
    print(f"memory free after freeing: {free} of {total} bytes")
    print(f"result: {'correct' if ok else 'WRONG'} (2 * x for {x.size} floats)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
