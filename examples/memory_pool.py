"""The memory pool: stream-ordered reuse, an explicit MemPool, statistics and an OOM that explains itself."""

import sys

import numpy as np

import ascentrt as art

MiB = 1 << 20


def main() -> int:
    """Free on a stream and reuse at once on it; read the pool's statistics; provoke an OOM."""
    dev = art.set_device(0)
    s = dev.create_stream()

    # Stream-ordered reuse: the freeing stream may take the block back at once.
    x = art.malloc_async(4 * MiB, stream=s)
    art.launch(lambda a: a.fill(1.0), x.view(np.float32), stream=s)
    x.free(stream=s)                          # the kernel above still runs on these bytes
    y = art.malloc_async(4 * MiB, stream=s)   # same block, ordered after that kernel
    print(f"reuse on the same stream: {'yes' if y.ptr == x.ptr else 'no'}")
    s.synchronize(timeout=30)
    y.free(stream=s)

    # An explicit pool with its own high-water marks; trim returns its cached chunks.
    with art.MemPool(dev) as pool:
        bufs = [pool.malloc_async(3 * MiB, s) for _ in range(8)]
        for b in bufs:
            art.free_async(b, s)
        s.synchronize(timeout=30)
        print(f"MemPool: used high {pool.used_high // MiB} MiB, reserved {pool.reserved_current // MiB} MiB,"
              f" trimmed {pool.trim_to(0) // MiB} MiB")

    stats = art.memory_stats()
    print(f"device pool: {stats['num_allocs']} allocations, peak allocated "
          f"{stats['allocated_bytes.peak'] / MiB:.1f} MiB")

    big = art.malloc(dev.properties.total_memory - MiB // 2)
    try:
        art.malloc(MiB)
    except art.OutOfMemoryError as e:
        print(f"out of memory, explained: {e}")
    finally:
        big.free()
    s.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
