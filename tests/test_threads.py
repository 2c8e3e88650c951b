"""The API used concurrently from 8 host threads: results stay correct and nothing deadlocks."""

import threading

import numpy as np

import ascentrt as art

THREADS = 8


def _run_threads(target, count=THREADS, timeout=60):
    """Run target(i) on `count` threads; return the exceptions they raised (none expected)."""
    errors = []
    barrier = threading.Barrier(count)

    def body(i):
        try:
            barrier.wait(10)
            target(i)
        except BaseException as exc:  # collected and asserted on by the caller
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), name=f"user{i}") for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a host thread hung"
    return errors


def test_eight_threads_with_own_streams_and_buffers_and_a_shared_stream(dev):
    shared = dev.create_stream()
    shared_log = []
    n = 4096
    results = {}

    def work(i):
        art.set_device(0)
        rng = np.random.default_rng(i)
        x = rng.standard_normal(n).astype(np.float32)
        own = [dev.create_stream(priority=i % 8) for _ in range(2)]
        host = art.malloc_host(x.nbytes)
        a, b = art.malloc(x.nbytes), art.malloc(x.nbytes)
        f32 = lambda buf: buf.view(np.float32, n)  # noqa: E731
        for rep in range(10):
            host.numpy(np.float32)[:] = x
            art.memcpy_async(a, host, stream=own[0])
            ready = own[0].record()
            own[1].wait(ready)
            art.launch(art.kernels.scale, f32(b), f32(a), float(rep + 1), stream=own[1])
            art.launch(lambda i=i, rep=rep: shared_log.append((i, rep)), stream=shared)
            art.memcpy_async(host, b, stream=own[1])
            own[1].synchronize(timeout=30)
            assert np.allclose(host.numpy(np.float32), x * (rep + 1))
            own[0].synchronize(timeout=30)
        ev = dev.create_event(timing=True)
        ev.record(own[1])
        ev.synchronize(timeout=30)
        results[i] = True
        for buf in (a, b, host):
            buf.free()
        for s in own:
            s.destroy()

    errors = _run_threads(work)
    assert errors == []
    assert sorted(results) == list(range(THREADS))
    shared.synchronize(timeout=30)
    # Each thread's launches on the shared stream run in that thread's submission order.
    for i in range(THREADS):
        assert [rep for (t, rep) in shared_log if t == i] == list(range(10))
    assert len(shared_log) == 10 * THREADS
    shared.destroy()


def test_concurrent_malloc_and_free_keep_allocations_disjoint(dev):
    before = dev.mem_info()
    live = []
    lock = threading.Lock()

    def work(i):
        rng = np.random.default_rng(100 + i)
        mine = []
        for _ in range(200):
            if mine and rng.random() < 0.4:
                mine.pop(rng.integers(len(mine))).free()
            else:
                b = art.malloc(int(rng.integers(1, 8192)))
                b.numpy()[:] = i            # each thread writes its own mark
                mine.append(b)
        for b in mine:
            assert (b.numpy() == i).all()   # nobody else wrote into it
        with lock:
            live.extend(mine)

    assert _run_threads(work) == []
    spans = sorted((b.ptr, b.ptr + b.nbytes) for b in live)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
    for b in live:
        b.free()
    assert dev.mem_info() == before


def test_concurrent_waits_and_records_between_threads_make_progress(dev):
    # Thread i waits on the event thread i-1 recorded: a ring of handoffs across host threads.
    streams = [dev.create_stream() for _ in range(THREADS)]
    events = [dev.create_event() for _ in range(THREADS)]
    recorded = [threading.Event() for _ in range(THREADS)]
    log = []

    def work(i):
        art.launch(lambda: log.append(i), stream=streams[i])
        events[i].record(streams[i])
        recorded[i].set()
        prev = (i - 1) % THREADS
        assert recorded[prev].wait(10)
        streams[i].wait(events[prev])
        art.launch(lambda: log.append(("after", i)), stream=streams[i])
        streams[i].synchronize(timeout=30)

    assert _run_threads(work) == []
    for i in range(THREADS):
        assert log.index(("after", i)) > log.index((i - 1) % THREADS)
    for s in streams:
        s.destroy()


def test_concurrent_failures_report_to_the_thread_that_launched_them(dev):
    codes = {}

    def work(i):
        art.get_last_error()
        s = dev.create_stream()
        if i % 2:
            art.launch(lambda: 1 / 0, stream=s)
        try:
            s.synchronize(timeout=30)
        except art.TaskError:
            pass
        codes[i] = art.get_last_error()
        s.destroy()

    assert _run_threads(work) == []
    for i in range(THREADS):
        assert codes[i] == (art.ErrorCode.RT_AICORE_EXCEPTION if i % 2 else 0)
