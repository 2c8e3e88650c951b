"""Memory: allocation alignment and rounding, mem_info, copies and fills of every kind (semantics 5, 9)."""

import threading
import warnings

import numpy as np
import pytest

import ascentrt as art
from ascentrt.errors import MemcpyKindWarning
from ascentrt.memory.chunks import ArenaChunks
from ascentrt.memory.pool import BlockPool

K = art.MemcpyKind


@pytest.fixture
def bufs():
    """Free whatever the test allocates (a list it appends buffers to)."""
    held = []
    yield held
    for b in held:
        if b.alive:
            b.free()


def _pattern(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("nbytes", [1, 31, 32, 33, 63, 64, 65, 100, 4095, 1 << 20])
def test_malloc_starts_64_byte_aligned_and_rounds_size_to_32(bufs, nbytes):
    b = art.malloc(nbytes)
    bufs.append(b)
    assert b.ptr % 64 == 0
    assert b.nbytes == -(-nbytes // 32) * 32 and b.nbytes >= nbytes
    assert b.requested == nbytes
    assert b.device is art.current_device()


def test_allocations_do_not_overlap(bufs):
    for n in (1, 100, 64, 33, 4096, 7):
        bufs.append(art.malloc(n))
    spans = sorted((b.ptr, b.ptr + b.nbytes) for b in bufs)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


def test_mem_info_reports_free_and_total_and_follows_allocations(dev, bufs):
    free0, total = dev.mem_info()
    assert total == dev.properties.total_memory and 0 < free0 <= total
    b = art.malloc(1 << 20)
    bufs.append(b)
    free1, _ = dev.mem_info()
    assert free0 - free1 >= 1 << 20
    b.free()
    assert dev.mem_info() == (free0, total)


def test_freed_memory_can_be_allocated_again(dev, bufs):
    free0, _ = dev.mem_info()
    for _ in range(3):
        b = art.malloc(8 << 20)
        b.free()
    assert dev.mem_info()[0] == free0


def test_malloc_host_is_page_aligned_and_says_if_pinned(bufs):
    h = art.malloc_host(1000)
    bufs.append(h)
    assert h.ptr % 4096 == 0 and h.nbytes == 1000
    assert isinstance(h.pinned, bool)
    assert h.numpy().shape == (1000,)


def test_numpy_views_are_zero_copy(bufs):
    b = art.malloc(64)
    bufs.append(b)
    v = b.numpy(np.int32, (4, 4))
    v[:] = 5
    assert b.numpy(np.int32)[0] == 5 and b.numpy(np.int32).shape == (16,)
    assert v.ctypes.data == b.ptr


def _device_with(bufs, data):
    b = art.malloc(data.nbytes)
    bufs.append(b)
    art.memcpy(b, data)
    return b


def test_memcpy_host_to_device_and_back_with_numpy(bufs):
    data = _pattern(4096)
    b = _device_with(bufs, data)
    out = np.zeros_like(data)
    art.memcpy(out, b, data.nbytes)
    assert np.array_equal(out, data)


@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d", "h2h"])
def test_memcpy_async_between_pinned_and_device_memory(stream, bufs, direction):
    data = _pattern(1 << 16, seed=1)
    src = art.malloc_host(data.nbytes) if direction[0] == "h" else art.malloc(data.nbytes)
    dst = art.malloc_host(data.nbytes) if direction[-1] == "h" else art.malloc(data.nbytes)
    bufs += [src, dst]
    src.numpy()[:] = data
    art.memcpy_async(dst, src, stream=stream)
    stream.synchronize(timeout=10)
    assert np.array_equal(dst.numpy(), data)


@pytest.mark.cpu_only
def test_memcpy_async_with_pinned_memory_is_asynchronous(stream, bufs):
    host, dev_buf = art.malloc_host(256), art.malloc(256)
    bufs += [host, dev_buf]
    host.numpy()[:] = 9
    art.memset(dev_buf, 0)
    gate = threading.Event()
    art.launch(lambda: gate.wait(10), stream=stream)
    art.memcpy_async(dev_buf, host, stream=stream)   # returns although the stream is blocked
    assert not dev_buf.numpy().any()
    gate.set()
    stream.synchronize(timeout=10)
    assert (dev_buf.numpy() == 9).all()


def test_memcpy_async_from_pageable_memory_is_complete_on_return(stream, bufs):
    data = _pattern(1 << 16, seed=2)
    b = art.malloc(data.nbytes)
    bufs.append(b)
    art.launch(lambda: threading.Event().wait(0.02), stream=stream)  # earlier work to wait behind
    art.memcpy_async(b, data, stream=stream)
    assert np.array_equal(b.numpy(), data)              # done before the call returned
    data[:] = 0                                          # the caller may reuse its array at once
    stream.synchronize(timeout=10)
    assert not np.array_equal(b.numpy(), data)


def test_memcpy_async_to_pageable_memory_is_complete_on_return(stream, bufs):
    data = _pattern(4096, seed=3)
    b = _device_with(bufs, data)
    out = np.zeros_like(data)
    art.memcpy_async(out, b, stream=stream)
    assert np.array_equal(out, data)


def test_copies_between_slices_touch_only_the_slice(stream, bufs):
    a, b = art.malloc(256), art.malloc(256)
    bufs += [a, b]
    art.memset(a, 1)
    art.memset(b, 2)
    art.memcpy_async(b[64:128], a[0:64], stream=stream)
    stream.synchronize(timeout=10)
    out = b.numpy()
    assert (out[:64] == 2).all() and (out[64:128] == 1).all() and (out[128:] == 2).all()
    assert b[64:128][16:32].ptr == b.ptr + 80       # a slice of a slice stays in the allocation


def test_copies_with_int_pointers(bufs):
    data = _pattern(1024, seed=4)
    a, b = _device_with(bufs, data), art.malloc(1024)
    bufs.append(b)
    art.memcpy(b.ptr + 100, a.ptr + 200, 300)
    assert np.array_equal(b.numpy()[100:400], data[200:500])
    out = np.zeros(300, np.uint8)
    art.memcpy(out, a.ptr + 200, 300)
    assert np.array_equal(out, data[200:500])


def test_memcpy_with_nbytes_copies_a_prefix(bufs):
    data = _pattern(512, seed=5)
    a = _device_with(bufs, data)
    b = art.malloc(512)
    bufs.append(b)
    art.memset(b, 0)
    art.memcpy(b, a, 100)
    assert np.array_equal(b.numpy()[:100], data[:100]) and not b.numpy()[100:].any()


@pytest.mark.parametrize("n", [1, 4095, 65536, 65537, 3 << 20])
def test_copies_either_side_of_the_inline_copy_size_copy_exactly_their_bytes(bufs, stream, n):
    # (the cpu backend copies up to 64 KiB with the interpreter's memmove, larger ones with
    # libc's: each must copy n bytes, from the right place, and not one more)
    data = _pattern(n + 64, seed=n % 251)
    a = _device_with(bufs, data)
    b, host = art.malloc(n + 64), art.malloc_host(n + 64)
    bufs.extend((b, host))
    art.memset(b, 0)
    art.memcpy(b.ptr + 32, a.ptr + 16, n)
    assert np.array_equal(b.numpy()[32:32 + n], data[16:16 + n])
    assert not b.numpy()[:32].any() and not b.numpy()[32 + n:].any()
    host.numpy()[:] = 0
    art.memcpy_async(host, b.ptr + 32, n, stream=stream)
    stream.synchronize()
    assert np.array_equal(host.numpy()[:n], data[16:16 + n]) and not host.numpy()[n:].any()
    art.memcpy(a.ptr + 8, a.ptr, n)  # (overlapping, within one buffer: as memmove)
    assert np.array_equal(a.numpy()[8:8 + n], data[:n])


def test_typed_numpy_arrays_copy_by_bytes(bufs):
    x = np.arange(100, dtype=np.float64)
    b = _device_with(bufs, x)
    assert np.array_equal(b.numpy(np.float64, 100), x)


@pytest.mark.parametrize("kind,ok", [(K.HOST_TO_DEVICE, True), (K.DEFAULT, True),
                                     (K.DEVICE_TO_HOST, False), (K.DEVICE_TO_DEVICE, False),
                                     (K.HOST_TO_HOST, False)])
def test_a_memcpy_kind_that_disagrees_warns_and_the_addresses_decide(bufs, kind, ok):
    data = _pattern(64)
    b = art.malloc(64)
    bufs.append(b)
    art.memset(b, 0)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        art.memcpy(b, data, kind=kind)
    assert np.array_equal(b.numpy(), data)               # copied host -> device, as on CANN
    mismatch = [w for w in seen if issubclass(w.category, MemcpyKindWarning)]
    assert len(mismatch) == (0 if ok else 1)
    if not ok:
        assert "HOST_TO_DEVICE" in str(mismatch[0].message)
        assert mismatch[0].filename == __file__           # blamed on the caller's line


def test_a_memcpy_kind_mismatch_warns_once_per_call_site(bufs):
    b = art.malloc(64)
    bufs.append(b)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(3):
            art.memcpy(b, _pattern(64), kind=K.DEVICE_TO_HOST)   # one site, three calls
        art.memcpy(b, _pattern(64), kind=K.DEVICE_TO_HOST)       # a second site
    assert len([w for w in seen if issubclass(w.category, MemcpyKindWarning)]) == 2


def test_strict_memcpy_kind_refuses_a_mismatch_and_copies_nothing(bufs, monkeypatch):
    monkeypatch.setenv("ASCENTRT_STRICT_MEMCPY_KIND", "1")
    b = art.malloc(64)
    bufs.append(b)
    art.memset(b, 0)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.memcpy(b, _pattern(64), kind=K.DEVICE_TO_HOST)
    assert err.value.code == art.ErrorCode.RT_INVALID_MEMORY_TYPE
    assert not b.numpy().any()


def test_unknown_memcpy_kind_raises(bufs):
    b = art.malloc(64)
    bufs.append(b)
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(b, np.zeros(64, np.uint8), kind=17)


def test_memset_fills_all_or_a_prefix(bufs):
    b = art.malloc(128)
    bufs.append(b)
    art.memset(b, 0xAB)
    assert (b.numpy() == 0xAB).all()
    art.memset(b, 0, 64)
    assert not b.numpy()[:64].any() and (b.numpy()[64:] == 0xAB).all()
    art.memset(b[100:110], 7)
    assert (b.numpy()[100:110] == 7).all() and b.numpy()[110] == 0xAB


def test_memset_async_runs_in_stream_order(stream, bufs):
    b = art.malloc(128)
    bufs.append(b)
    art.memset_async(b, 1, stream=stream)
    art.launch(art.kernels.scale, b.view(np.uint8), b.view(np.uint8), 3, stream=stream)
    art.memset_async(b[0:32], 5, stream=stream)
    stream.synchronize(timeout=10)
    assert (b.numpy()[:32] == 5).all() and (b.numpy()[32:] == 3).all()


def test_memset_async_on_pageable_memory_is_complete_on_return(stream):
    arr = np.zeros(100, np.uint8)
    art.memset_async(arr, 4, stream=stream)
    assert (arr == 4).all()


@pytest.mark.parametrize("value", [-1, 256, 1.5, "a"])
def test_memset_value_must_be_a_byte(bufs, value):
    b = art.malloc(32)
    bufs.append(b)
    art.memset(b, 0)
    with pytest.raises(art.InvalidArgumentError):
        art.memset(b, value)
    assert not b.numpy().any()


def test_memcpy2d_copies_rows_between_pitches(bufs):
    width, height, spitch, dpitch = 10, 4, 16, 32
    src = np.arange(spitch * height, dtype=np.uint8)
    d = art.malloc(dpitch * height)
    bufs.append(d)
    art.memset(d, 0xFF)
    art.memcpy2d(d, dpitch, src, spitch, width, height)
    rows = d.numpy().reshape(height, dpitch)
    assert np.array_equal(rows[:, :width], src.reshape(height, spitch)[:, :width])
    assert (rows[:, width:] == 0xFF).all()


def test_memcpy2d_async_device_to_pinned_host(stream, bufs):
    width, height, spitch, dpitch = 8, 5, 24, 8
    data = _pattern(spitch * height, seed=6)
    d = _device_with(bufs, data)
    h = art.malloc_host(dpitch * height)
    bufs.append(h)
    art.memcpy2d_async(h, dpitch, d, spitch, width, height, stream=stream)
    stream.synchronize(timeout=10)
    assert np.array_equal(h.numpy().reshape(height, dpitch),
                          data.reshape(height, spitch)[:, :width])


def test_memcpy2d_checks_sizes_and_kind(bufs):
    d = art.malloc(64)
    bufs.append(d)
    src = np.zeros(64, np.uint8)
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy2d(d, 8, src, 16, 16, 2)          # width exceeds dpitch
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy2d(d, 32, src, 32, 32, 3)         # 3 rows of pitch 32 do not fit 64 bytes
    with pytest.warns(MemcpyKindWarning):
        art.memcpy2d(d, 32, src, 32, 32, 2, kind=K.DEVICE_TO_HOST)  # the addresses decide


def test_kernels_write_device_memory_the_host_reads_back(stream, bufs):
    n = 1000
    x, y = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    bx, by, out = _device_with(bufs, x), _device_with(bufs, y), art.malloc(4 * n)
    bufs.append(out)
    f32 = lambda b: b.view(np.float32, n)  # noqa: E731
    art.launch(art.kernels.axpy, f32(by), 2.0, f32(bx), stream=stream)       # y = 2x + 1
    art.launch(art.kernels.add, f32(out), f32(by), f32(bx), stream=stream)    # out = 3x + 1
    art.launch(art.kernels.reduce_sum, by[0:4].view(np.float32, 1), f32(out), stream=stream)
    stream.synchronize(timeout=10)
    assert np.allclose(out.numpy(np.float32, n), 3 * x + 1)
    assert np.isclose(by.numpy(np.float32)[0], (3 * x + 1).sum())


def test_matmul_kernel_on_device(stream, bufs):
    a = np.random.default_rng(7).standard_normal((16, 8)).astype(np.float32)
    b = np.random.default_rng(8).standard_normal((8, 4)).astype(np.float32)
    da, db, dc = _device_with(bufs, a), _device_with(bufs, b), art.malloc(16 * 4 * 4)
    bufs.append(dc)
    art.launch("matmul", dc.view(np.float32, (16, 4)), da.view(np.float32, (16, 8)),
               db.view(np.float32, (8, 4)), stream=stream)
    stream.synchronize(timeout=10)
    assert np.allclose(dc.numpy(np.float32, (16, 4)), a @ b, atol=1e-5)


# ---- racing frees of one buffer: exactly one wins ---------------------------------------------

def test_a_free_that_loses_the_race_inside_the_allocator_is_a_double_free():
    buf = art.malloc(4096)
    mem = buf._mem
    assert buf._owner.release(buf) is True            # another thread's free, first
    buf._mem = mem                                    # as if this free checked before it
    with pytest.raises(art.InvalidHandleError) as info:
        buf.free()
    assert info.value.code == 207002


def test_a_host_free_that_loses_the_race_is_a_double_free():
    buf = art.malloc_host(4096)
    mem = buf._mem
    assert buf._release(buf) is True
    buf._mem = mem
    with pytest.raises(art.InvalidHandleError):
        buf.free()


@pytest.mark.parametrize("alloc", [art.malloc, art.malloc_host], ids=["device", "host"])
def test_threads_freeing_one_buffer_exactly_one_succeeds(alloc):
    for _ in range(50):
        buf = alloc(4096)
        barrier = threading.Barrier(6)
        outcomes = []

        def free():
            barrier.wait()
            try:
                buf.free()
                outcomes.append("freed")
            except art.InvalidHandleError:
                outcomes.append("double free")

        threads = [threading.Thread(target=free) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["double free"] * 5 + ["freed"]


def test_observers_see_frees_while_a_trace_records():
    from ascentrt.memory import REGISTRY

    class Seen:
        def __init__(self):
            self.events = []

        def buffer_allocated(self, alloc):
            self.events.append("alloc")

        def buffer_freed(self, alloc, stream=None):
            self.events.append("free")

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    seen = Seen()
    REGISTRY.observe(seen)
    try:
        with art.record_trace() as rec:
            art.malloc(64).free()
            buf = art.malloc(64)
            buf.free()
            with pytest.raises(art.InvalidHandleError):
                buf.free()
    finally:
        REGISTRY.unobserve(seen)
    assert seen.events == ["alloc", "free", "alloc", "free"]
    assert [e[0] for e in rec.events] == ["alloc", "free", "alloc", "free"]


def test_with_the_pool_off_large_and_small_buffers_free_in_every_build():
    # (a compiled registry lost the identity of its large-allocation lists: free raised KeyError)
    from subprocess_util import run_program
    out = run_program("""
        import ascentrt as art
        for n in (1 << 30, 1 << 20, 64):
            b = art.malloc(n)
            b.free()
            print(b.alive)
    """, env={"ASCENTRT_MEM_POOL_ENABLE": "0"})
    assert out.split() == ["False"] * 3


@pytest.mark.cpu_only
@pytest.mark.parametrize("pool", ["1", "0"])
def test_pinned_memory_the_host_cannot_map_is_an_out_of_memory_error(pool):
    # (with the pool off the OS's refusal escaped as a bare OSError; with it on, the message
    # called the host's 2**62-byte stand-in capacity fragmented)
    from subprocess_util import run_program
    out = run_program('''
        import ascentrt as art
        try:
            art.malloc_host(1 << 58)  # past any address space: no host maps it
        except art.OutOfMemoryError as e:
            assert e.code == 207001 and "could not map" in str(e), str(e)
            assert "fragment" not in str(e), str(e)
            print("refused")
        art.malloc_host(1 << 20).free()  # and nothing was left half made
    ''', env={"ASCENTRT_MEM_POOL_ENABLE": pool})
    assert out.strip() == "refused"


@pytest.mark.cpu_only
@pytest.mark.parametrize("pool", ["1", "0"])
def test_pinned_memory_past_the_ram_the_host_has_free_is_refused_not_oom_killed(pool):
    # (mmap of a size the host has, but not free, succeeds; mlock then backs every page, and
    # the OOM killer ended the process: a fuzz test's worker died so with a 20 GiB malloc_host)
    from subprocess_util import run_program
    out = run_program('''
        import ascentrt as art
        from ascentrt.backends.cpu import _lockable_bytes
        size = max(_lockable_bytes(), 0) + (64 << 20)
        try:
            art.malloc_host(size)
        except art.OutOfMemoryError as e:
            assert e.code == 207001 and "can lock now" in str(e), str(e)
            print("refused")
        art.malloc_host(1 << 20).free()  # and nothing was left half made
    ''', env={"ASCENTRT_MEM_POOL_ENABLE": pool})
    assert out.strip() == "refused"


def test_medium_buffers_pack_into_shared_chunks_instead_of_wasting_a_quarter(dev):
    # (each 3 MiB buffer took a 4 MiB chunk of its own: 600 of them, 1.76 GiB on a 2 GiB
    # device, failed after 512 with nothing freed, and the error blamed fragmentation)
    pool = dev._memory.pool
    if pool is None:
        pytest.skip("the pool is off")
    before = pool.reserved
    bufs = [art.malloc(3 << 20) for _ in range(600)]
    try:
        grown = pool.reserved - before
        assert grown <= 1.15 * 600 * (3 << 20)
    finally:
        for b in bufs:
            b.free()


def test_an_oom_from_fragmentation_names_the_piece_it_lacked_and_the_buffers_between(dev):
    pool = BlockPool(ArenaChunks(64 << 20))
    held = [pool.allocate(12 << 20) for _ in range(5)]   # 60 MiB in 5 chunks of their own
    for b in held[::2]:
        pool.deallocate(b)                                # 36 MiB free, in 12 MiB pieces
    with pytest.raises(art.OutOfMemoryError) as err:
        pool.allocate(20 << 20)
    text = str(err.value)
    assert "no free piece holds" in text, text
    assert "the free pieces lie between chunks that live buffers fill: 2 of 12.0 MiB" in text, text
    assert "ASCENTRT_MEM_POOL_ENABLE=0" not in text  # (12, 12 and 16 MiB apart without chunks too)
    for b in held[1::2]:
        pool.deallocate(b)


def test_with_a_split_limit_under_a_shared_chunk_medium_buffers_get_chunks_of_their_own():
    # (each 3 MiB buffer took a whole 20 MiB chunk whose rest the limit kept unsplittable)
    pool = BlockPool(ArenaChunks(256 << 20), split_limit=16 << 20)
    blocks = [pool.allocate(3 << 20) for _ in range(40)]
    assert pool.reserved <= 40 * (4 << 20)
    for b in blocks:
        pool.deallocate(b)


@pytest.mark.cpu_only
def test_a_trace_records_an_allocation_taken_after_waiting_for_pending_frees():
    # (the retry went to the pool past the recorder: the replayed trace lost the allocation)
    from subprocess_util import run_program
    out = run_program('''
        import threading, ascentrt as art
        dev = art.set_device(0)
        s, other = dev.create_stream(), dev.create_stream()
        held = art.malloc(512 << 20)
        a = art.malloc(1 << 30, stream=s)
        gate = threading.Event()
        art.launch(gate.wait, 30, stream=s)
        threading.Timer(0.5, gate.set).start()  # (after the malloc below asked: it waits for it)
        with art.record_trace(dev) as rec:
            a.free(stream=s)  # pending behind the kernel: the next request waits for it
            b = art.malloc(1200 << 20, stream=other)
            b.free()
        print([e[0] for e in rec.events])
    ''', env={"ASCENTRT_LEAK_CHECK": "off"}, timeout=60)
    assert out.split() == ["['alloc',", "'free']"]



def test_a_pageable_call_that_cannot_finish_raises_and_leaves_nothing_to_run_later():
    # (it raised 507950 naming "event 1 synchronize", an event the program never made, and
    # its copy or fill stayed queued: once the stream went on it wrote into the array anyway)
    from subprocess_util import run_program
    out = run_program("""
        import numpy as np, ascentrt as art
        dev = art.set_device(0)
        s, other = dev.create_stream(), dev.create_stream()
        buf = art.malloc(4096)
        art.memset(buf, 0x66)
        calls = {
            "memcpy_async": lambda host: art.memcpy_async(host, buf, stream=s),
            "memset_async": lambda host: art.memset_async(host, 0x55, stream=s),
            "memcpy2d_async": lambda host: art.memcpy2d_async(host, 64, buf, 64, 64, 64, stream=s),
        }
        for call, make in calls.items():
            host = np.zeros(4096, np.uint8)
            note = art.Notify(dev)
            s.wait_notify(note)  # (only the host can record it: this thread, waiting in the call)
            try:
                make(host)
                print(call, "returned")
            except art.DeadlockError as exc:
                said = str(exc)
                named = f"{call} (" in said and f"on stream {s.id} can never finish" in said
                print(call, "raised", "named" if named else said)
            other.record_notify(note)
            s.synchronize(timeout=10)
            print(call, "untouched" if not host.any() else "written later")
            make(host)  # (the stream goes on as before)
            print(call, "then", "done" if host.all() else "not done")
    """, env={"ASCENTRT_LEAK_CHECK": "off"}, timeout=120)
    for call in ("memcpy_async", "memset_async", "memcpy2d_async"):
        assert f"{call} raised named\n{call} untouched\n{call} then done" in out, out


def test_a_pageable_copy_interrupted_by_ctrl_c_before_it_ran_never_runs():
    # (the interrupted call's copy stayed queued and overwrote what the program wrote after it)
    from subprocess_util import run_program
    out = run_program("""
        import os, signal, threading, time
        import numpy as np, ascentrt as art
        dev = art.set_device(0)
        s = dev.create_stream()
        src = art.malloc(4096)
        art.memset(src, 0x55)
        gate = threading.Event()
        art.launch_host_func(gate.wait, 10, stream=s)  # (the stream is held until the Ctrl-C)
        out = np.zeros(4096, np.uint8)
        def ctrl_c():
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
            gate.set()
        threading.Thread(target=ctrl_c, daemon=True).start()
        try:
            art.memcpy_async(out, src, stream=s)
            print("returned")
        except KeyboardInterrupt:
            print("interrupted")
        out[:] = 7
        dev.synchronize(timeout=10)
        print("kept" if (out == 7).all() else "overwritten")
        src.free()
    """, timeout=60)
    assert out.split() == ["interrupted", "kept"], out
