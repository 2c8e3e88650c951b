"""Memory pool: cached alloc+free, a random workload, pinned host allocation, scaling with live blocks.

Every figure times one alloc+free pair per sample (perf_counter_ns around both), with the
baseline measured in the same run, interleaved in rounds so machine noise hits both alike.
"Pool" figures time the block level (BlockPool over the device's memory or fake address
space); "malloc" figures time the whole ascentrt.malloc + free path (buffer objects, address
registry, stream checks).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import mmap
import random
import time

import numpy as np
from _common import emit, median, pick

import ascentrt as art
from ascentrt.memory import ArenaChunks, BlockPool

MiB = 1 << 20
SAMPLES = pick(20000, 500)
ROUNDS = 4
_ns = time.perf_counter_ns


def p99(values) -> float:
    """The 99th percentile."""
    return float(np.percentile(values, 99))


def np_cached(n: int, samples: int) -> list[int]:
    """np.empty + del of `n` bytes with 1000 other arrays alive."""
    keep = [np.empty(n, np.uint8) for _ in range(1000)]
    out = []
    for _ in range(samples):
        t0 = _ns()
        a = np.empty(n, np.uint8)
        del a
        out.append(_ns() - t0)
    del keep
    return out


def pool_cached(pool: BlockPool, n: int, samples: int) -> list[int]:
    """BlockPool allocate + deallocate of a cached size with 1000 other blocks alive."""
    keep = [pool.allocate(n) for _ in range(1000)]
    pool.deallocate(pool.allocate(n))
    alloc, free = pool.allocate, pool.deallocate
    out = []
    for _ in range(samples):
        t0 = _ns()
        free(alloc(n))
        out.append(_ns() - t0)
    for b in keep:
        free(b)
    return out


def malloc_cached(n: int, samples: int, live: int = 1000, stream=None) -> list[int]:
    """ascentrt.malloc + free of a cached size with `live` other buffers alive (on `stream`:
    malloc(n, stream=s) + free(stream=s))."""
    keep = [art.malloc(n) for _ in range(live)]
    art.malloc(n).free()
    malloc = art.malloc
    out = []
    if stream is None:
        for _ in range(samples):
            t0 = _ns()
            malloc(n).free()
            out.append(_ns() - t0)
    else:
        for _ in range(samples):
            t0 = _ns()
            malloc(n, stream=stream).free(stream)
            out.append(_ns() - t0)
    for b in keep:
        b.free()
    return out


def random_sizes(count: int, seed: int) -> list[int]:
    """Log-uniform sizes between 512 B and 64 MiB."""
    rng = random.Random(seed)
    return [int(2 ** rng.uniform(9, 26)) for _ in range(count)]


def random_workload(alloc, free, sizes: list[int], live_count: int, seed: int):
    """1000 live blocks; each sample frees a random one and allocates the next size. Returns
    (ns per alloc+free, peak live bytes)."""
    rng = random.Random(seed)
    live = [(alloc(n), n) for n in sizes[:live_count]]
    live_bytes = sum(n for _, n in live)
    peak = live_bytes
    out = []
    for n in sizes[live_count:]:
        i = rng.randrange(live_count)
        t0 = _ns()
        free(live[i][0])
        x = alloc(n)
        out.append(_ns() - t0)
        live_bytes += n - live[i][1]
        peak = max(peak, live_bytes)
        live[i] = (x, n)
    for x, _ in live:
        free(x)
    return out, peak


def pinned_pool_ns(samples: int) -> list[int]:
    """malloc_host(1 MiB) + free from the pinned pool."""
    art.malloc_host(MiB).free()
    out = []
    for _ in range(samples):
        t0 = _ns()
        art.malloc_host(MiB).free()
        out.append(_ns() - t0)
    return out


def mlock_ns(samples: int) -> list[int]:
    """mlock + munlock of 1 MiB of an already-mapped region (what an unpooled pin costs)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    mm = mmap.mmap(-1, MiB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = np.frombuffer(mm, np.uint8)
    addr, size = ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(MiB)
    out = []
    for _ in range(samples):
        t0 = _ns()
        libc.mlock(addr, size)
        libc.munlock(addr, size)
        out.append(_ns() - t0)
    del view
    mm.close()
    return out


def main() -> None:
    """Measure and print the memory figures as JSON lines."""
    dev = art.set_device(0)
    gc.disable()  # a collection inside a timed pair is noise, for both sides alike
    per = SAMPLES // ROUNDS

    # 1. cached alloc+free (1 MiB): pool level, the whole public path (with and without a
    #    stream), all against np.empty + del.
    pool = BlockPool(dev._memory.chunks, name="bench")
    stream = dev.create_stream()
    ours, full, on_stream, theirs = [], [], [], []
    for _ in range(ROUNDS):
        theirs += np_cached(MiB, per)
        ours += pool_cached(pool, MiB, per)
        full += malloc_cached(MiB, per)
        on_stream += malloc_cached(MiB, per, stream=stream)
    pool.empty_cache()
    emit("cached_alloc_free_median", median(ours), "ns", "np.empty+del (1 MiB, 1000 live)",
         median(theirs), "<=", 1.0, "pool level alone at most np.empty's median")
    emit("cached_alloc_free_p99", p99(ours), "ns", "np.empty+del p99 (1 MiB, 1000 live)",
         p99(theirs), "<=", 1.0, "pool level p99 at most np.empty's p99")
    emit("cached_malloc_free_median", median(full), "ns", "np.empty+del (1 MiB, 1000 live)",
         median(theirs), "<=", 2.0, "whole ascentrt.malloc + free() path at most 2x")
    emit("cached_malloc_free_p99", p99(full), "ns", "np.empty+del p99 (1 MiB, 1000 live)",
         p99(theirs), "<=", 3.0, "whole public path p99 at most 3x np.empty's p99")
    emit("cached_malloc_free_on_stream_median", median(on_stream), "ns",
         "np.empty+del (1 MiB, 1000 live)", median(theirs), "<=", 2.0,
         "malloc(n, stream=s) + free(stream=s) at most 2x")

    # 1b. the same at 64 MiB, where np.empty pays mmap + munmap (over fake address space).
    fake = BlockPool(ArenaChunks(1 << 40), name="bench-64m")
    ours, theirs = [], []
    for _ in range(ROUNDS):
        theirs += np_cached(64 * MiB, per // 4)
        ours += pool_cached(fake, 64 * MiB, per // 4)
    emit("cached_alloc_free_64mib_median", median(ours), "ns", "np.empty+del (64 MiB, 1000 live)",
         median(theirs), "<=", 0.5, "pool alloc+free at most half of np.empty's median",
         note=f"p99 ours {p99(ours):.0f} ns, np.empty {p99(theirs):.0f} ns")

    # 2. random workload over fake address space (1000 live blocks of up to 64 MiB).
    live_count = pick(1000, 100)
    sizes = random_sizes(live_count + SAMPLES // 2, 1)
    fake = BlockPool(ArenaChunks(1 << 40), name="random")
    ours, peak_live = random_workload(fake.allocate, fake.deallocate, sizes, live_count, 2)
    theirs, _ = random_workload(lambda n: np.empty(n, np.uint8), lambda a: None, sizes,
                                live_count, 2)
    emit("random_alloc_free_median", median(ours), "ns",
         "np.empty+del (log-uniform 512 B-64 MiB, 1000 live)", median(theirs), "<=", 1.5,
         "random workload median at most 1.5x np.empty's",
         note=f"p99 ours {p99(ours):.0f} ns, np.empty {p99(theirs):.0f} ns")
    # The same workload through the whole public path, on the device's memory (fake space
    # has no bytes to view; the sizes are scaled so 1000 live buffers fit the device).
    cap = dev.properties.total_memory
    scale = max(1, (sum(sizes[:live_count]) * 2) // cap + 1)
    small_sizes = [max(1, n // scale) for n in sizes]
    full, _ = random_workload(art.malloc, art.free, small_sizes, live_count, 2)
    theirs_small, _ = random_workload(lambda n: np.empty(n, np.uint8), lambda a: None,
                                      small_sizes, live_count, 2)
    emit("random_malloc_free_median", median(full), "ns",
         f"np.empty+del (same sizes / {scale}, 1000 live)", median(theirs_small), "<=", 1.5,
         "whole public path on a random workload at most 1.5x np.empty's",
         note=f"p99 ours {p99(full):.0f} ns, np.empty {p99(theirs_small):.0f} ns")
    emit("random_peak_reserved", fake.peak_reserved, "bytes", "peak live bytes", peak_live,
         "<=", 1.25, "peak reserved / peak live")

    # 3. pinned host memory: pool vs mlock + munlock of 1 MiB.
    samples = pick(2000, 100)
    ours = pinned_pool_ns(samples)
    theirs = mlock_ns(samples)
    emit("pinned_alloc_free_1mib", median(ours), "ns", "mlock+munlock 1 MiB", median(theirs),
         "<=", 0.02, "pinned pool at least 50x faster than mlock+munlock")

    # 4. scaling: ascentrt.malloc+free at 100k live buffers vs 1k.
    big = pick(100_000, 10_000)
    small, large = [], []
    for _ in range(ROUNDS):
        small += malloc_cached(256, per, 1000)
        large += malloc_cached(256, per, big)
    emit("malloc_free_100k_live", median(large), "ns", "same at 1k live buffers", median(small),
         "<=", 2.0, "alloc+free cost at 100k live at most 2x the cost at 1k")
    gc.enable()


if __name__ == "__main__":
    main()
