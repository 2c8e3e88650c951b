"""A freed block never gets a new owner while queued work of its old owner can still touch it:
not through another device's peer copy, not through a wait that times out, not through a copy
queued on a stream the free did not wait for."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ascentrt as art
from subprocess_util import run_program

TIMEOUT = 20
N = 1 << 16


@pytest.fixture
def gate():
    ev = threading.Event()
    yield ev
    ev.set()


@pytest.fixture
def streams(dev):
    made = [dev.create_stream() for _ in range(2)]
    yield made
    art.set_wait_timeout(None)
    for s in made:
        s.destroy(force=True)


@pytest.mark.cpu_only
def test_a_free_without_stream_waits_for_another_devices_peer_copy_into_the_block():
    code = textwrap.dedent(f'''
        import threading
        import numpy as np
        import ascentrt as art
        gate = threading.Event()
        d0, d1 = art.Device(0), art.Device(1)
        target = d0.malloc({N})
        source = d1.malloc({N})
        art.memset(source, 0xAB)
        s1 = d1.create_stream()
        d1.enable_peer_access(d0)
        art.launch(lambda: gate.wait(20), stream=s1)
        art.memcpy_async(target, source, stream=s1)   # a peer copy into device 0's memory, queued
        old = target.ptr
        target.free()                                  # no stream: must wait for s1 as well
        fresh = [d0.malloc({N}) for _ in range(4)]
        for f in fresh:
            art.memset(f, 0x11)
        gate.set()
        s1.synchronize(timeout=20)
        assert all((f.numpy() == 0x11).all() for f in fresh), "a peer copy wrote into a reused block"
        print("ok", any(f.ptr == old for f in fresh))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ASCENTRT_DEVICES": "2"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


@pytest.mark.cpu_only
def test_reuse_never_rests_on_a_wait_that_can_time_out(streams, gate):
    a, b = streams
    pool = art.MemPool()            # its own chunks: buf's 2 MiB block fills one, no remainder
    buf = pool.malloc_async(2 << 20, a)
    art.memset(buf, 7)
    seen = []
    art.launch(lambda x: (gate.wait(TIMEOUT), seen.append(int(x.max()))), buf.view(np.uint8), stream=a)
    buf.free(stream=a)
    art.set_wait_timeout(0.2)
    b.wait(a.record())              # a user wait that gives up after 0.2 s
    art.set_wait_timeout(None)
    new = pool.malloc_async(2 << 20, b)   # buf's block only if ordered after a's kernel
    art.memset_async(new, 0xFF, stream=b)
    try:
        b.synchronize(timeout=1.0)  # by now b's own wait has timed out
    except (art.TaskError, art.AscentTimeoutError):
        pass  # the user's wait timed out (TaskError), or b still waits behind a's kernel
    gate.set()
    a.synchronize(timeout=TIMEOUT)
    try:
        b.synchronize(timeout=TIMEOUT)
    except art.TaskError:
        pass  # the user's wait timed out: that error belongs to b
    assert seen == [7], "the block's new owner wrote before its old owner's kernel read it"
    new.free()
    pool.destroy()


@pytest.mark.cpu_only
def test_a_copy_queued_on_another_stream_before_a_stream_ordered_free_is_refused(streams, gate):
    a, b = streams
    buf = art.malloc(N, stream=a)
    host = art.malloc_host(N)
    host.numpy()[:] = 0xCD
    art.launch(lambda: gate.wait(TIMEOUT), stream=b)
    art.memcpy_async(buf, host, stream=b)    # queued on b, which the free below does not wait for
    art.memset_async(buf, 0, stream=b)
    buf.free(stream=a)                       # a is idle: the block is a's to reuse at once
    new = art.malloc(N, stream=a)
    art.memset_async(new, 0x11, stream=a)
    a.synchronize(timeout=TIMEOUT)
    gate.set()
    with pytest.raises(art.TaskError) as err:
        b.synchronize(timeout=TIMEOUT)
    assert err.value.code == art.ErrorCode.RT_INVALID_HANDLE
    assert (new.numpy() == 0x11).all(), "a copy queued before the free wrote into the new owner"
    new.free()
    host.free()


@pytest.mark.cpu_only
@pytest.mark.parametrize("via", ["event", "two events"])
def test_work_the_freeing_stream_waits_for_still_sees_the_bytes(dev, streams, gate, via):
    # (the free on `a`, which waits for b's read through an event, counted only a's own tasks
    # as queued before it: b's correctly ordered read failed with 107017)
    a, b = streams
    c = dev.create_stream()
    buf = art.malloc(N, stream=a)
    buf.numpy()[:] = 7
    out = art.malloc(N)
    art.launch(lambda: gate.wait(TIMEOUT), stream=b)
    art.memcpy_async(out, buf, stream=b)      # reads buf, on b
    if via == "event":
        a.wait(b.record())                    # a (the freeing stream) waits for that read
    else:
        c.wait(b.record())                    # ... through a third stream
        a.wait(c.record())
    buf.free(stream=a)
    new = art.malloc(N, stream=a)             # the same block, behind the read
    art.memset_async(new, 0x11, stream=a)
    gate.set()
    b.synchronize(timeout=TIMEOUT)
    a.synchronize(timeout=TIMEOUT)
    assert (out.numpy() == 7).all() and (new.numpy() == 0x11).all()
    for x in (new, out):
        x.free()
    c.destroy()


@pytest.mark.cpu_only
@pytest.mark.parametrize("via", ["a wait that can time out", "a non-blocking host function"])
def test_ordering_that_does_not_hold_the_free_keeps_no_freed_bytes(streams, gate, via):
    # (ordered_before followed a timed wait, which may give up and let the free pass with the
    # reader still running, and took a non-blocking host function as its stream's, which a
    # record there does not wait for: both were shown bytes the next owner then had)
    a, b = streams
    buf = art.malloc(N, stream=a)
    freed, seen = threading.Event(), []

    def late_view():
        freed.wait(TIMEOUT)
        try:
            buf.numpy()
            seen.append("bytes")
        except art.AscentError as e:
            seen.append(int(e.code))
    out = art.malloc(N)
    if via == "a wait that can time out":
        art.launch(lambda: gate.wait(TIMEOUT), stream=b)
        art.memcpy_async(out, buf, stream=b)
        art.set_wait_timeout(TIMEOUT)
    else:  # (it looks while b, and so the record a waits for, is still held by the gate)
        art.launch_host_func(late_view, stream=b, blocking=False)
        art.launch(lambda: gate.wait(TIMEOUT), stream=b)
    a.wait(b.record())
    art.set_wait_timeout(None)
    buf.free(stream=a)
    freed.set()
    if via != "a wait that can time out":
        deadline = time.monotonic() + TIMEOUT
        while not seen and time.monotonic() < deadline:
            time.sleep(0.005)
    gate.set()
    if via == "a wait that can time out":
        with pytest.raises(art.TaskError) as err:
            b.synchronize(timeout=TIMEOUT)
        assert err.value.code == art.ErrorCode.RT_INVALID_HANDLE
    else:
        art.synchronize(timeout=TIMEOUT)
        assert seen == [int(art.ErrorCode.RT_INVALID_HANDLE)]
    out.free()


@pytest.mark.cpu_only
@pytest.mark.parametrize("order", ["event", "inserted"])
def test_a_stream_destroyed_with_force_holds_its_records_until_its_running_task_ends(dev, gate, order):
    # (the discard released the waiters of the records behind the running kernel at once: the
    # block's next owner went on, and the old kernel then overwrote its bytes)
    a, b = dev.create_stream(), dev.create_stream()
    pool = art.MemPool()
    buf = pool.malloc_async(16 << 20, a)
    started = threading.Event()

    def slow_writer(x):
        started.set()
        gate.wait(TIMEOUT)
        x[:] = 0xEE
    art.launch(slow_writer, buf, stream=a)
    assert started.wait(TIMEOUT)
    buf.free(stream=a)
    if order == "event":
        b.wait(a.record())  # b's later work waits for a's kernel: the pool may reuse the block
    new = pool.malloc_async(16 << 20, b)  # ("inserted": the pool inserts that wait itself)
    assert new.ptr == buf.ptr  # the block is reused, behind a's kernel
    art.memset_async(new, 0x11, stream=b)
    a.destroy(force=True)  # (the running kernel cannot be stopped)
    assert not b.query()  # b still waits for the kernel
    gate.set()
    b.synchronize(timeout=TIMEOUT)
    assert (new.numpy() == 0x11).all()
    new.free()
    b.destroy()
    pool.destroy()


@pytest.mark.cpu_only
def test_with_the_pool_off_a_free_still_comes_after_the_work_queued_before_it():
    # (without a pool the range went back to the arena at once: a kernel queued before
    # free(stream=s) failed with 107017, a running one wrote into the next owner, and a queued
    # copy from freed pinned memory delivered zeros)
    code = textwrap.dedent('''
        import threading, time, numpy as np, ascentrt as art
        s = art.Stream()
        gate = threading.Event()
        buf = art.malloc(1 << 16)
        art.memset(buf, 7)
        seen = []
        art.launch(lambda: gate.wait(10), stream=s)
        art.launch(lambda x: seen.append(int(x.max())), buf, stream=s)
        threading.Timer(0.2, gate.set).start()
        buf.free(stream=s)  # the kernel queued before it still sees the bytes
        s.synchronize(timeout=10)
        buf = art.malloc(1 << 16)
        started = threading.Event()
        def slow(x):
            started.set(); time.sleep(0.3); x[:] = 0xEE
        art.launch(slow, buf, stream=s)
        started.wait(5)
        buf.free()  # waits for the running kernel
        new = art.malloc(1 << 16)
        art.memset(new, 0x11)
        s.synchronize(timeout=10)
        h, d = art.malloc_host(4096), art.malloc(4096)
        h.numpy()[:] = 0x5A
        gate2 = threading.Event()
        art.launch(lambda: gate2.wait(10), stream=s)
        art.memcpy_async(d, h, stream=s)
        threading.Timer(0.2, gate2.set).start()
        h.free()  # the queued copy still reads the pinned bytes
        s.synchronize(timeout=10)
        t, seen2, gate3 = art.Stream(), [], threading.Event()
        buf = art.malloc(1 << 16)
        art.memset(buf, 7)
        art.launch(lambda: gate3.wait(10), stream=t)
        art.launch(lambda x: seen2.append(int(x.max())), buf, stream=t)
        art.record_stream(buf, t)
        buf.free(stream=s)  # waits for t too
        art.memset(art.malloc(1 << 16), 0x11)
        gate3.set()
        t.synchronize(timeout=10)
        done = []
        x = art.malloc(4096)
        art.launch_host_func(lambda: (x.free(), done.append("freed")), stream=s)
        t.wait(s.record())  # t waits for the host function that frees (it must not wait for t)
        art.launch(lambda: None, stream=t)
        s.synchronize(timeout=10), t.synchronize(timeout=10)
        print(seen, np.unique(new.numpy()).tolist(), np.unique(d.numpy()).tolist(), seen2, done)
    ''')
    out = run_program(code, env={"ASCENTRT_MEM_POOL_ENABLE": "0", "ASCENTRT_LEAK_CHECK": "off"})
    assert out.split("\n")[0] == "[7] [17] [90] [7] ['freed']"


# ---- an allocation refused while memory waits for queued work ---------------------------------
# Memory freed after queued work is the program's again once that work ends (as after CANN's
# synchronous aclrtFree): an allocation that only it could satisfy waits for the work, where the
# calling thread may wait, instead of failing.

_WAITS_FOR_FREES = '''
import time, numpy as np, ascentrt as art
cap = art.Device(0).properties.total_memory
n = int(cap * 0.6) & ~63
s = art.Stream()
def busy(seconds):  # (the same length of work on cpu, where it runs, and on sim, from its cost)
    art.launch(time.sleep, seconds, stream=s, cost=seconds)
seen = []
buf = art.malloc(n)
art.memset(buf, 7)
busy(0.3)
art.launch(lambda x: seen.append(int(x.max())), buf, stream=s)
buf.free(stream=s)
again = art.malloc(n)  # waits for the two kernels, then reuses their memory
assert s.query() and seen == [7], (s.query(), seen)
art.memset(again, 1)
again.free()
# Inside a task it may not wait (its own stream may be what it waits for): refused at once.
big = art.malloc(n)
busy(0.5)
big.free(stream=s)
out = []
def inside():
    try:
        art.malloc(n)
        out.append("allocated")
    except art.OutOfMemoryError as e:
        out.append(str(e))
t = art.Stream()
art.launch_host_func(inside, stream=t)
t.synchronize(timeout=10)
assert out and "queued work not done yet" in out[0], out
s.synchronize(timeout=10)
# Work that can never finish (its stream waits on a notify only this thread would record
# later): a deadlock, so the allocation reports the memory it lacks instead of hanging.
note = art.Notify()
blocked = art.malloc(n)
s.wait_notify(note)
art.memset_async(blocked, 3, n, stream=s)
blocked.free(stream=s)
try:
    art.malloc(n)
    print("allocated")
except art.OutOfMemoryError as e:
    assert "queued work not done yet" in str(e), str(e)
    print("refused")
'''


@pytest.mark.cpu_only
@pytest.mark.parametrize("pool", ["1", "0"])
@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_an_allocation_waits_for_the_work_its_memory_is_freed_after(pool, backend):
    env = {"ASCENTRT_MEM_POOL_ENABLE": pool, "ASCENTRT_BACKEND": backend,
           "ASCENTRT_DEVICE_MEMORY": str(64 << 20)}
    assert run_program(_WAITS_FOR_FREES, env=env, timeout=60).strip() == "refused"


# ---- work queued on other streams as part of a stream's (red team 5) ---------------------------

@pytest.mark.parametrize("queued_behind_work", [False, True])
def test_a_free_after_a_non_blocking_host_function_waits_for_it(dev, queued_behind_work):
    # (the host function runs on a stream of its own: the free went through at once, and the
    # next owner's bytes showed through it; and where the free came before the stream reached
    # the hand-off, it waited for the stream only)
    s = dev.create_stream()
    gate = threading.Event()
    b = art.malloc(4096)
    b.numpy()[:] = 1
    seen = {}

    def reader(buf):
        a = buf.numpy()
        time.sleep(0.2)
        seen["sum"] = int(a.sum())
    if queued_behind_work:
        art.launch_host_func(lambda: gate.wait(10), stream=s)
    art.launch_host_func(reader, b, stream=s, blocking=False)
    b.free(stream=s)
    gate.set()
    if queued_behind_work:
        s.synchronize(timeout=10)
    b2 = art.malloc(4096)
    b2.numpy()[:] = 9
    dev.synchronize(timeout=10)
    assert seen["sum"] == 4096
    b2.free()
    s.destroy()


def test_a_free_after_a_graph_replay_waits_for_its_forked_lanes_and_they_see_the_bytes(dev):
    # (a forked lane's copy found the buffer freed, failed on the lane's own stream, and the
    # launch stream's synchronize reported nothing)
    s, cap, left = (dev.create_stream() for _ in range(3))
    x = art.malloc(4096)
    x.numpy()[:] = 1
    out = art.malloc_host(4096)
    out.numpy()[:] = 0
    cap.begin_capture()
    left.wait(cap.record())
    art.memcpy_async(out[:2048], x[:2048], stream=cap)
    art.memcpy_async(out[2048:], x[2048:], stream=left)
    cap.wait(left.record())
    g = cap.end_capture()
    g.launch(s)
    x.free(stream=s)
    s.synchronize(timeout=10)
    assert int(out.numpy().sum()) == 4096
    dev.synchronize(timeout=10)
    out.free()
    g.destroy()


def test_a_buffer_allocated_in_a_capture_never_takes_a_block_the_streams_earlier_work_uses(dev):
    # (it took the stream's own pending block: the graph, replayed on another stream, was not
    # ordered after the kernel still writing it)
    s, t = dev.create_stream(), dev.create_stream()
    a = art.malloc(4096, stream=s)
    art.launch(lambda x: (time.sleep(0.2), x.fill(1)), a.view(), stream=s, cost=0.2)
    a.free(stream=s)
    # (on sim, a host descheduled for 0.2 s of real time under load lets the device move on by
    # itself: the kernel may be done before the capture, and its block then free to take)
    done = s._completed >= s._submitted
    s.begin_capture()
    b = art.malloc(4096, stream=s)
    art.memset_async(b, 9, stream=s)
    g = s.end_capture()
    g.launch(t)
    t.synchronize(timeout=10)
    dev.synchronize(timeout=10)
    assert (b.ptr != a.ptr or done) and np.unique(b.numpy()).tolist() == [9]
    b.free()
    g.destroy()
