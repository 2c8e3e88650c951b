"""The fast paths of malloc and free keep every promise of the slow ones: a block queued work
still uses is never handed out early, every pointer into a live buffer resolves (and none into
a freed one), and statistics stay exact under threads."""

import random
import sys
import threading

import numpy as np
import pytest

import ascentrt as art
from ascentrt.errors import InvalidAddressError, InvalidHandleError, MemcpyKindWarning
from ascentrt.memory.registry import REGISTRY

TIMEOUT = 20


def run_in_threads(work, count: int) -> None:
    """Run work(0) .. work(count - 1) on threads of their own and wait for them all."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)


def test_a_cached_size_freed_under_queued_work_is_not_reused_until_that_work_is_done(dev):
    stream = dev.create_stream()
    gate = threading.Event()
    buf = art.malloc(1 << 20)
    art.malloc(1 << 20).free()  # the size is cached: the next malloc takes the fast path
    art.launch_host_func(lambda: gate.wait(TIMEOUT), stream=stream)
    art.launch(lambda out: out.fill(7), buf.view(np.uint8), stream=stream)
    addr = buf.ptr
    buf.free()  # no stream: after all queued work
    others = [art.malloc(1 << 20) for _ in range(4)]
    assert addr not in [o.ptr for o in others]
    for o in others:
        o.numpy()[:] = 1
    gate.set()
    stream.synchronize(TIMEOUT)
    assert all((o.numpy() == 1).all() for o in others)
    again = [art.malloc(1 << 20) for _ in range(4)]  # now the block may come back
    for b in others + again:
        b.free()
    stream.destroy()


def test_a_free_on_a_stream_lets_that_stream_reuse_at_once_and_others_only_after(dev):
    s1, s2 = dev.create_stream(), dev.create_stream()
    gate = threading.Event()
    buf = art.malloc(4096, stream=s1)
    addr = buf.ptr
    art.launch_host_func(lambda: gate.wait(TIMEOUT), stream=s1)
    buf.free(s1)
    other = art.malloc(4096, stream=s2)
    assert other.ptr != addr  # s1's queued work may still touch it
    same = art.malloc(4096, stream=s1)
    assert same.ptr == addr  # stream order protects s1's own reuse
    gate.set()
    s1.synchronize(TIMEOUT)
    for b in (other, same):
        b.free()
    for s in (s1, s2):
        s.destroy()


def test_every_pointer_into_a_live_buffer_resolves_in_every_kind_of_chunk(dev):
    rng = random.Random(3)
    sizes = [32, 100, 4096, 1 << 20, (1 << 20) + 1, 3 << 20, 9 << 20] + \
        [rng.randrange(1, 1 << 18) for _ in range(60)]
    bufs = [art.malloc(n) for n in sizes] + [art.malloc_host(n) for n in (64, 5000, 3 << 20)]
    for b in bufs[::3]:  # holes between live buffers: splits and merges around them
        b.free()
    live = [b for b in bufs if b.alive]
    for b in live:
        for addr in (b.ptr, b.ptr + b.nbytes // 2, b.ptr + b.nbytes - 1):
            assert REGISTRY.find(addr) is b
        assert REGISTRY.find(b.ptr + b.nbytes) is not b
        assert REGISTRY.resolve(b.ptr + 1, b.nbytes - 1) == (b, 1)
        with pytest.raises(InvalidAddressError):
            REGISTRY.resolve(b.ptr, b.nbytes + 1)
    dead = [b for b in bufs if not b.alive]
    for b in dead:
        found = REGISTRY.find(b.ptr)
        assert found is None or found.alive and found is not b
    with pytest.raises(InvalidAddressError):
        art.memcpy(dead[1].ptr, np.zeros(8, np.uint8), 8)
    live_set = set(map(id, live))
    assert live_set <= set(map(id, REGISTRY.live()))
    for b in live:
        b.free()
    assert not set(map(id, bufs)) & set(map(id, REGISTRY.live()))


def test_concurrent_malloc_and_free_from_8_threads_keep_the_statistics_exact(dev, switch_often):
    art.empty_cache()
    before = art.memory_stats()
    errors, spans = [], []
    barrier = threading.Barrier(8)

    def work(seed):
        rng = random.Random(seed)
        mine = []
        try:
            barrier.wait(TIMEOUT)
            for _ in range(400):
                if mine and rng.random() < 0.5:
                    mine.pop(rng.randrange(len(mine))).free()
                else:
                    mine.append(art.malloc(rng.choice((64, 4096, 1 << 20, rng.randrange(1, 1 << 16)))))
            barrier.wait(TIMEOUT)  # every thread's live buffers at one moment: none may overlap
            spans.extend((b.ptr, b.ptr + b.nbytes) for b in mine)
            barrier.wait(TIMEOUT)
            for b in mine:
                b.free()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    run_in_threads(work, 8)
    assert not errors
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two live buffers overlapped
    after = art.memory_stats()
    assert after["allocated_bytes.current"] == before["allocated_bytes.current"]
    assert after["requested_bytes.current"] == before["requested_bytes.current"]
    made = after["num_allocs"] - before["num_allocs"]
    assert made == after["num_frees"] - before["num_frees"] > 8 * 200


@pytest.mark.parametrize("on_stream", [False, True])
def test_cached_malloc_and_free_wait_while_another_thread_holds_the_pool(dev, on_stream):
    # Compiled, the exact-size cache paths take no lock (pool.ATOMIC): they must still stay
    # out while any thread is inside the pool's lock (a statistics reader, a slow path), as
    # the locking paths of the source do.
    stream = dev.create_stream() if on_stream else None
    art.malloc(1 << 20, stream=stream).free(stream)  # the size is in the cache now
    pool = dev._memory.pool
    before = (pool.allocated, pool.n_allocs, pool.n_frees)
    done = threading.Event()

    def cycle():
        art.malloc(1 << 20, stream=stream).free(stream)
        done.set()

    with pool._lock:
        worker = threading.Thread(target=cycle)
        worker.start()
        assert not done.wait(0.2)  # held out while the lock is held
        assert (pool.allocated, pool.n_allocs, pool.n_frees) == before
    worker.join(TIMEOUT)
    assert done.is_set()
    assert (pool.allocated, pool.n_allocs, pool.n_frees) == (before[0], before[1] + 1, before[2] + 1)
    if stream is not None:
        stream.destroy()


@pytest.fixture
def switch_often():
    """Switch threads every microsecond, so that racing calls really interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_a_late_second_release_of_a_buffer_touches_nothing(dev):
    # What two racing frees come down to, made deterministic: both passed the double-free
    # check, and the second reaches the pool after the first (even after a new owner came).
    alloc = dev._memory
    before = art.memory_stats()["allocated_bytes.current"]
    buf = art.malloc(4096)
    alloc.release(buf)
    alloc.release(buf)
    a, b = art.malloc(4096), art.malloc(4096)
    assert a.ptr != b.ptr  # the block was cached once, not twice
    new_owner = a if a.ptr == buf.ptr else b
    alloc.release(buf)  # its block has a new owner now
    assert new_owner.alive and REGISTRY.find(buf.ptr) is new_owner
    assert art.memory_stats()["allocated_bytes.current"] == before + 2 * 4096
    a.free()
    b.free()
    host = art.malloc_host(4096)
    host._release(host)
    host._release(host)
    c, d = art.malloc_host(4096), art.malloc_host(4096)
    assert c.ptr != d.ptr
    c.free()
    d.free()


def test_racing_frees_of_one_buffer_return_its_block_once(dev, switch_often):
    before = art.memory_stats()["allocated_bytes.current"]
    for _ in range(100):
        buf = art.malloc(4096)
        go = threading.Barrier(2)
        outcomes = []

        def free():
            go.wait(TIMEOUT)
            try:
                buf.free()
                outcomes.append("freed")
            except InvalidHandleError:
                outcomes.append("double free")

        threads = [threading.Thread(target=free) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
        assert "freed" in outcomes
        a, b = art.malloc(4096), art.malloc(4096)
        assert a.ptr != b.ptr  # the block was cached once, not twice
        a.free()
        b.free()
    assert art.memory_stats()["allocated_bytes.current"] == before


def test_a_synchronous_memcpy_between_whole_buffers_checks_what_the_full_path_checks(dev):
    host, devbuf, other = art.malloc_host(4096), art.malloc(4096), art.malloc_host(4096)
    host.numpy()[:] = np.arange(4096) % 251
    other.numpy()[:] = 0  # pooled memory comes back as it was left
    art.memcpy(devbuf, host, 4096)
    art.memcpy(other, devbuf, 4000)
    assert (other.numpy()[:4000] == host.numpy()[:4000]).all() and not other.numpy()[4000:].any()
    art.memcpy(other, host, 0)  # nothing to do
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(devbuf, host, 4097)  # past the end of both
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(devbuf, host, -1)
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(devbuf, host, 4096.0)
    devbuf.free()
    with pytest.raises(InvalidHandleError):
        art.memcpy(devbuf, host, 16)
    with pytest.raises(InvalidHandleError):
        art.memcpy(host, devbuf, 16)
    host.free()
    other.free()


def test_a_synchronous_memcpy_between_int_pointers_checks_what_the_full_path_checks(dev):
    """The int-pointer fast path (pyACL's call) copies exactly the bytes asked for, at interior
    pointers too, and leaves every refusal and warning to the full path."""
    host, devbuf, other = art.malloc_host(4096), art.malloc(4096), art.malloc_host(4096)
    host.numpy()[:] = np.arange(4096) % 251
    other.numpy()[:] = 0
    art.memcpy(devbuf.ptr, host.ptr, 4096, art.MemcpyKind.HOST_TO_DEVICE)
    art.memcpy(other.ptr + 100, devbuf.ptr + 8, 3000, 2)  # interior pointers, kind as an int
    want = np.zeros(4096, np.uint8)
    want[100:3100] = host.numpy()[8:3008]
    assert (other.numpy() == want).all()
    art.memcpy(other.ptr, host.ptr, 16, art.MemcpyKind.DEFAULT)  # host to host, pinned
    assert (other.numpy()[:16] == host.numpy()[:16]).all()
    with pytest.raises(InvalidAddressError):
        art.memcpy(devbuf.ptr + 1, host.ptr, 4096)  # runs past the end of dst
    with pytest.raises(InvalidAddressError):
        art.memcpy(devbuf.ptr, host.ptr + 1, 4096)  # reads past the end of src
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(devbuf.ptr, host.ptr, 16, 7)  # no such kind
    with pytest.warns(MemcpyKindWarning):
        art.memcpy(devbuf.ptr, host.ptr, 16, art.MemcpyKind.DEVICE_TO_HOST)  # the addresses decide
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(devbuf.ptr, host.ptr, 16, True)  # a bool names no kind
    ptr = devbuf.ptr
    devbuf.free()
    with pytest.raises(InvalidAddressError):
        art.memcpy(ptr, host.ptr, 16)
    with pytest.raises(InvalidAddressError):
        art.memcpy(host.ptr, ptr, 16)
    host.free()
    other.free()


def test_a_lookup_that_meets_a_half_done_split_asks_again_under_the_pool_lock(dev):
    bufs = [art.malloc(256) for _ in range(4)]
    keep = bufs[2]
    chunk = next(c for c in REGISTRY._pages[keep.ptr >> 21] if c.addr <= keep.ptr < c.addr + c.size)
    held, done = threading.Event(), threading.Event()

    def split_halfway():  # what a split does between its two list inserts, held a while
        with chunk.lock:
            i = chunk.starts.index(keep.addr)
            chunk.starts.insert(i, keep.addr - 128)  # the starts list moved, the blocks not yet
            held.set()
            done.wait(0.3)
            del chunk.starts[i]

    helper = threading.Thread(target=split_halfway)
    helper.start()
    held.wait(TIMEOUT)
    found = REGISTRY.find(keep.ptr + 8)
    done.set()
    helper.join(TIMEOUT)
    assert found is keep
    for b in bufs:
        b.free()


def test_pointers_of_a_live_buffer_resolve_while_its_chunk_splits_and_merges(dev, switch_often):
    pinned = [art.malloc(256) for _ in range(8)]  # neighbours in one shared chunk
    keep = pinned[3]
    stop = threading.Event()
    misses = []

    def churn():
        rng = random.Random(5)
        while not stop.is_set():
            bufs = [art.malloc(rng.randrange(32, 4096)) for _ in range(20)]  # not cached: splits
            for b in bufs:
                b.free()

    def look():
        for _ in range(20000):
            for addr in (keep.ptr, keep.ptr + 100, keep.ptr + keep.nbytes - 1):
                if REGISTRY.find(addr) is not keep:
                    misses.append(addr)

    threads = [threading.Thread(target=churn) for _ in range(2)]
    for t in threads:
        t.start()
    look()
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    assert not misses
    for b in pinned:
        b.free()


def test_each_block_has_its_own_requests_size_class_while_threads_ask_for_different_sizes(dev, switch_often):
    # The pool remembers the last request's size class: a thread must never take another's.
    # (A best fit may hand a free block whole when what would be left is under MIN_SPLIT: at
    # least the request's class, less than MIN_SPLIT more. Each thread's small class is 768
    # bytes or more from every other thread's, so another's class falls outside that range.)
    from ascentrt.memory.block import size_class
    from ascentrt.memory.pool import MIN_SPLIT
    errors = []
    barrier = threading.Barrier(8)

    def work(i):
        sizes = (1000 + 777 * i, 70000 + 4099 * i, (1 << 20) + 96 * i)
        try:
            barrier.wait(TIMEOUT)
            for k in range(300):
                n = sizes[k % 3]
                buf = art.malloc(n)
                want = size_class(n, buf._owner.pool.align)
                if not want <= buf._block.size < want + MIN_SPLIT:
                    errors.append((n, buf._block.size))
                buf.free()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    run_in_threads(work, 8)
    assert not errors


def test_frees_after_empty_cache_are_cached_again_and_counted_once(dev):
    # empty_cache() drops every size's cache (and the one remembered as last used).
    pool = dev._memory.pool
    for round_ in range(3):
        bufs = [art.malloc(4096) for _ in range(3)] + [art.malloc(1 << 20)]
        addrs = {b.ptr for b in bufs}
        for b in bufs:
            b.free()
        assert art.memory_stats()["cached_free_bytes.current"] == pool._cached_bytes > 0
        again = [art.malloc(4096) for _ in range(3)] + [art.malloc(1 << 20)]
        assert {b.ptr for b in again} == addrs  # exact-size reuse of the cached blocks
        for b in again:
            b.free()
        art.empty_cache()
        assert art.memory_stats()["cached_free_bytes.current"] == 0


def test_a_pooled_malloc_makes_no_numpy_view_until_its_bytes_are_asked_for(dev):
    from ascentrt.memory.buffer import UNVIEWED
    buf = art.malloc(3000)  # (a size its block never served: a view would be a new slice)
    assert buf._mem is UNVIEWED and buf.alive
    view = buf.numpy()
    assert view.nbytes == buf.nbytes == 3008 and view.ctypes.data == buf.ptr
    assert buf._bytes() is buf._bytes()  # made once, then kept
    buf.free()
    with pytest.raises(InvalidHandleError):
        buf.numpy()


def test_a_copy_into_a_buffer_nothing_viewed_yet_lands_in_its_bytes(dev):
    src, dst = art.malloc(5000), art.malloc(5000)
    src.numpy()[:] = 9
    art.memcpy(dst.ptr, src.ptr, 5000)  # int pointers: the facade's path
    assert (dst.numpy()[:5000] == 9).all()
    other = art.malloc(6000)
    art.memcpy(other, src, 5000)  # whole buffers
    assert (other.numpy()[:5000] == 9).all()
    for b in (src, dst, other):
        b.free()


def test_tasks_queued_before_the_free_of_a_never_viewed_buffer_still_reach_its_bytes(dev, stream):
    from ascentrt.memory.buffer import UNVIEWED
    gate = threading.Event()
    buf = art.malloc(7000)
    seen = []
    art.launch_host_func(lambda: gate.wait(TIMEOUT), stream=stream)
    art.launch(lambda x: seen.append((x.nbytes, x.ctypes.data)) or x.fill(3), buf, stream=stream)
    assert buf._mem is UNVIEWED  # the kernel asks for the bytes as it runs, after the free
    addr = buf.ptr
    buf.free(stream)
    assert not buf.alive
    again = art.malloc(7000, stream=stream)  # the same stream may reuse the block at once
    gate.set()
    stream.synchronize(TIMEOUT)
    assert seen == [(7008, addr)]
    assert again.ptr == addr and (again.numpy()[:7000] == 3).all()  # ran before the reuse
    again.free()


def test_a_first_view_racing_the_free_never_makes_the_buffer_live_again(dev, switch_often):
    before = art.memory_stats()["allocated_bytes.current"]
    for i in range(200):
        buf = art.malloc(4096 + 64 * (i % 7))
        go = threading.Barrier(2)
        seen = []

        def view():
            go.wait(TIMEOUT)
            try:
                seen.append(buf.numpy().nbytes)
            except InvalidHandleError:
                seen.append("freed")

        t = threading.Thread(target=view)
        t.start()
        go.wait(TIMEOUT)
        buf.free()
        t.join(TIMEOUT)
        assert seen and not buf.alive and buf._mem is None
        with pytest.raises(InvalidHandleError):
            buf.numpy()
        with pytest.raises(InvalidHandleError):
            buf.free()
    assert art.memory_stats()["allocated_bytes.current"] == before


def test_copies_synchronized_from_many_threads_run_once_each_and_come_out_whole(dev):
    # A copy completed twice would count its stream past what was submitted; one never
    # completed would hang its synchronize.
    n, rounds = 64 << 10, 40
    streams = [dev.create_stream() for _ in range(4)]
    bufs = [(art.malloc(n), art.malloc(n)) for _ in streams]
    errors = []

    def work(i):
        s, (a, b) = streams[i % 4], bufs[i % 4]
        try:
            for r in range(rounds):
                if i < 4:
                    art.memset_async(a, r % 251, n, stream=s)
                    art.memcpy_async(b, a, stream=s)
                    s.synchronize(TIMEOUT)
                    if not (b.numpy() == r % 251).all():
                        errors.append(f"stream {i}: round {r} came out wrong")
                else:  # (a second thread synchronizing the same stream meanwhile)
                    s.synchronize(TIMEOUT)
        except Exception as e:  # noqa: BLE001  (reported below, with the thread)
            errors.append(f"thread {i}: {e!r}")

    run_in_threads(work, 8)
    assert not errors, errors
    for s in streams:
        s.synchronize(TIMEOUT)
        assert s._completed == s._submitted
        s.destroy()
    assert streams[0]._dq.busy == [0, 0, 0]
    for a, b in bufs:
        a.free()
        b.free()
