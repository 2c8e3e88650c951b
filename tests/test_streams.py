"""Streams: ordering within a stream, cross-stream waits, query, destroy, priorities (semantics 1, 2, 7)."""

import threading
import time

import numpy as np
import pytest

import ascentrt as art
from subprocess_util import run_program


def _append(log, item, seconds=0.0):
    """A kernel that takes `seconds` of (sleeping) work, then appends `item` to `log`."""
    def kernel():
        if seconds:
            time.sleep(seconds)
        log.append(item)
    kernel.__name__ = f"append_{item}"
    return kernel


def test_tasks_of_one_stream_run_in_submission_order_under_concurrency(dev):
    streams = [dev.create_stream() for _ in range(8)]
    logs = [[] for _ in streams]
    for i in range(40):
        for k, s in enumerate(streams):
            # Uneven durations: a slow task must still finish before the fast one after it starts.
            seconds = 0.002 if (i + k) % 7 == 0 else 0.0
            art.launch(_append(logs[k], i, seconds), stream=s)
    for s in streams:
        s.synchronize(timeout=30)
    for log in logs:
        assert log == list(range(40))
    for s in streams:
        s.destroy()


def test_a_stream_never_runs_two_tasks_at_once(dev, stream):
    running, overlaps = [0], []
    lock = threading.Lock()

    def kernel():
        with lock:
            running[0] += 1
            overlaps.append(running[0])
        time.sleep(0.0005)
        with lock:
            running[0] -= 1

    for _ in range(50):
        art.launch(kernel, stream=stream)
    stream.synchronize(timeout=30)
    assert overlaps and max(overlaps) == 1


@pytest.mark.cpu_only
def test_submission_returns_before_the_task_runs(stream):
    gate = threading.Event()
    ran = []
    art.launch(lambda: gate.wait(10), stream=stream)
    art.launch(lambda: ran.append(1), stream=stream)
    assert ran == [] and not stream.query() and stream.pending == 2
    gate.set()
    stream.synchronize(timeout=10)
    assert ran == [1] and stream.query() and stream.pending == 0


@pytest.mark.cpu_only
def test_wait_on_event_orders_the_waiting_stream_after_the_recorded_work(dev):
    a, b = dev.create_stream(), dev.create_stream()
    gate = threading.Event()
    log = []
    art.launch(lambda: gate.wait(10), stream=a)
    art.launch(_append(log, "a"), stream=a)
    ev = a.record()
    b.wait(ev)
    art.launch(_append(log, "b"), stream=b)
    assert not b.query()  # b is held back by a's pending work
    gate.set()
    b.synchronize(timeout=10)
    assert log == ["a", "b"]
    a.destroy(), b.destroy()


@pytest.mark.cpu_only
def test_wait_uses_the_record_that_precedes_it_not_a_later_one(dev):
    a, b = dev.create_stream(), dev.create_stream()
    second_gate = threading.Event()
    log = []
    ev = dev.create_event()
    art.launch(_append(log, "a1"), stream=a)
    ev.record(a)
    b.wait(ev)                                # waits for a1 only
    art.launch(_append(log, "b"), stream=b)
    art.launch(lambda: second_gate.wait(10), stream=a)
    ev.record(a)                              # a later record must not affect the earlier wait
    b.synchronize(timeout=10)                 # finishes while a is still blocked
    assert log == ["a1", "b"]
    assert not a.query()
    second_gate.set()
    a.synchronize(timeout=10)
    a.destroy(), b.destroy()


@pytest.mark.cpu_only
def test_wait_on_an_event_recorded_later_does_not_see_that_record(dev):
    a, b = dev.create_stream(), dev.create_stream()
    gate = threading.Event()
    ev = dev.create_event()
    ev.record(a)                              # nothing before it: complete at once
    ev.synchronize(timeout=5)
    b.wait(ev)
    art.launch(lambda: gate.wait(10), stream=a)
    ev.record(a)                              # after the wait call: b must not wait for it
    done = []
    art.launch(lambda: done.append(1), stream=b)
    b.synchronize(timeout=10)
    assert done == [1] and not a.query()
    gate.set()
    a.destroy(), b.destroy()


def test_wait_on_a_never_recorded_event_raises(dev, stream):
    ev = dev.create_event()
    with pytest.raises(art.InvalidArgumentError) as err:
        stream.wait(ev)
    assert err.value.code == art.ErrorCode.RT_PARAM_INVALID
    assert stream.pending == 0  # nothing was queued


def test_wait_takes_an_event(stream):
    with pytest.raises(art.InvalidArgumentError):
        stream.wait("not an event")


@pytest.mark.cpu_only
def test_query_and_pending_follow_the_work(stream):
    assert stream.query() and stream.pending == 0
    gate = threading.Event()
    art.launch(lambda: gate.wait(10), stream=stream)
    art.launch(art.kernels.noop, stream=stream)
    assert not stream.query()
    assert stream.pending == 2
    gate.set()
    stream.synchronize(timeout=10)
    assert stream.query() and stream.pending == 0


def test_destroy_waits_for_pending_work(dev):
    s = dev.create_stream()
    log = []
    art.launch(_append(log, 1, 0.01), stream=s)
    assert s.destroy() == 0
    assert log == [1]


def test_destroy_twice_raises_invalid_handle(dev):
    s = dev.create_stream()
    s.destroy()
    with pytest.raises(art.InvalidHandleError) as err:
        s.destroy()
    assert err.value.code == art.ErrorCode.RT_INVALID_HANDLE


@pytest.mark.cpu_only
def test_destroy_with_force_discards_pending_tasks_and_reports_how_many(dev):
    s = dev.create_stream()
    gate = threading.Event()
    started = threading.Event()
    ran = []

    def blocker():
        started.set()
        gate.wait(10)

    # Queue everything behind a wait first, so the blocker and the 5 tasks after it reach an
    # executor together (as one batch) once the wait is released.
    hold = dev.create_stream()
    release = threading.Event()
    art.launch(lambda: release.wait(10), stream=hold)
    s.wait(hold.record())
    art.launch(blocker, stream=s)
    for i in range(5):
        art.launch(lambda i=i: ran.append(i), stream=s)
    release.set()
    assert started.wait(10)
    assert s.destroy(force=True) == 5  # the running task finishes; the 5 queued ones are dropped
    gate.set()
    other = dev.create_stream()        # the device keeps working
    art.launch(lambda: ran.append("other"), stream=other)
    other.synchronize(timeout=10)
    other.destroy()
    hold.destroy()
    assert ran == ["other"]


def test_force_destroy_accounts_for_every_task_it_did_not_run(dev):
    # Destroy while short tasks stream through: each task either ran or was reported discarded.
    for _ in range(20):
        s = dev.create_stream()
        ran = []
        cond = threading.Condition()

        def task(i):
            with cond:
                ran.append(i)
                cond.notify_all()

        total = 200
        for i in range(total):
            art.launch(task, i, stream=s)
        dropped = s.destroy(force=True)
        with cond:
            assert cond.wait_for(lambda: len(ran) + dropped >= total, timeout=10)
        assert len(ran) + dropped == total
        assert ran == list(range(len(ran)))  # the ones that ran are a prefix, in order


@pytest.mark.cpu_only
def test_force_destroy_releases_streams_waiting_on_its_records(dev):
    a, b = dev.create_stream(), dev.create_stream()
    gate = threading.Event()
    art.launch(lambda: gate.wait(10), stream=a)
    art.launch(art.kernels.noop, stream=a)
    ev = a.record()
    b.wait(ev)
    art.launch(art.kernels.noop, stream=b)
    a.destroy(force=True)
    gate.set()
    # Must not hang on a record that will never run, and says its wait went on without it
    # (CANN: a synchronization after an abort returns ACL_ERROR_RT_STREAM_ABORT).
    with pytest.raises(art.TaskError) as info:
        b.synchronize(timeout=10)
    assert info.value.code == art.ErrorCode.RT_STREAM_ABORT
    b.synchronize(timeout=10)
    b.destroy()


@pytest.mark.parametrize("use", [
    lambda s: art.launch(art.kernels.noop, stream=s),
    lambda s: s.synchronize(),
    lambda s: s.query(),
    lambda s: s.record(),
    lambda s: art.launch_host_func(lambda: None, stream=s),
    lambda s: art.memset_async(np.zeros(64, np.uint8), 0, stream=s),
], ids=["launch", "synchronize", "query", "record", "host_func", "memset_async"])
def test_use_of_a_destroyed_stream_raises_invalid_handle(dev, use):
    s = dev.create_stream()
    s.destroy()
    with pytest.raises(art.InvalidHandleError) as err:
        use(s)
    assert err.value.code == art.ErrorCode.RT_INVALID_HANDLE


def test_default_stream_cannot_be_destroyed(dev):
    with pytest.raises(art.InvalidArgumentError):
        dev.default_stream.destroy()
    art.launch(art.kernels.noop, stream=dev.default_stream)
    dev.default_stream.synchronize(timeout=10)


def test_context_manager_destroys_the_stream_after_its_work(dev):
    log = []
    with dev.create_stream() as s:
        art.launch(_append(log, 1, 0.005), stream=s)
    assert log == [1]
    with pytest.raises(art.InvalidHandleError):
        s.query()


@pytest.mark.cpu_only
def test_streams_run_concurrently_on_different_executors(dev):
    # Two streams whose kernels wait for each other can only finish if they run at once.
    if dev.properties.compute_units < 2:
        pytest.skip("needs two compute units")
    a_started, b_started = threading.Event(), threading.Event()
    seen = []
    a, b = dev.create_stream(), dev.create_stream()
    art.launch(lambda: (a_started.set(), seen.append(b_started.wait(10))), stream=a)
    art.launch(lambda: (b_started.set(), seen.append(a_started.wait(10))), stream=b)
    a.synchronize(timeout=20), b.synchronize(timeout=20)
    assert seen == [True, True]
    a.destroy(), b.destroy()


@pytest.mark.cpu_only
def test_higher_priority_ready_streams_run_first_under_contention():
    out = run_program("""
        import threading
        import ascentrt as art
        dev = art.set_device(0)
        assert dev.properties.compute_units == 1
        blocker = dev.create_stream(priority=0)
        gate, started = threading.Event(), threading.Event()
        art.launch(lambda: (started.set(), gate.wait(10)), stream=blocker)
        assert started.wait(10)
        # The only compute unit is busy: submit the lowest priorities first.
        order = []
        streams = [dev.create_stream(priority=p) for p in (7, 5, 3, 0)]
        for s in streams:
            art.launch(lambda p=s.priority: order.append(p), stream=s)
        gate.set()
        art.synchronize(timeout=10)
        print(order)
    """, env={"ASCENTRT_COMPUTE_UNITS": "1"})
    assert out.strip() == "[0, 3, 5, 7]"


@pytest.mark.cpu_only
def test_equal_priorities_run_in_the_order_they_became_ready():
    out = run_program("""
        import threading
        import ascentrt as art
        dev = art.set_device(0)
        gate, started = threading.Event(), threading.Event()
        art.launch(lambda: (started.set(), gate.wait(10)), stream=dev.create_stream())
        assert started.wait(10)
        order = []
        for i in range(4):
            art.launch(lambda i=i: order.append(i), stream=dev.create_stream(priority=2))
        gate.set()
        art.synchronize(timeout=10)
        print(order)
    """, env={"ASCENTRT_COMPUTE_UNITS": "1"})
    assert out.strip() == "[0, 1, 2, 3]"


@pytest.mark.parametrize("priority", [-1, 8, 1.0, "0", None, True])
def test_bad_priority_raises_and_creates_nothing(dev, priority):
    before = len(dev.streams())
    with pytest.raises(art.InvalidArgumentError) as err:
        dev.create_stream(priority=priority)
    assert err.value.code == art.ErrorCode.INVALID_PARAM
    assert len(dev.streams()) == before


def test_a_numpy_int_priority_is_taken_as_its_value(dev):
    # (it was refused with 100000, where every size and count takes numpy's ints)
    s = dev.create_stream(priority=np.int64(3))
    assert s.priority == 3 and type(s.priority) is int
    with pytest.raises(art.InvalidArgumentError):
        dev.create_stream(priority=np.int64(8))
    s.destroy()


def test_priority_range_is_reported(dev):
    assert dev.properties.stream_priority_range == (7, 0)


def test_abort_discards_the_tasks_not_started_and_the_stream_goes_on(dev):
    # (CANN's aclrtStreamAbort: the running task finishes, waits on dropped records are let go)
    s, t = dev.create_stream(), dev.create_stream()
    ran = []
    art.launch(lambda: ran.append("first"), stream=s, cost=1e-3)
    s.synchronize(timeout=10)
    art.launch(lambda: (time.sleep(0.3), ran.append("slow")), stream=s, cost=0.3)  # (running)
    for i in range(4):
        art.launch(lambda i=i: ran.append(i), stream=s, cost=1e-3)
    ev = s.record()
    t.wait(ev)
    art.launch(lambda: ran.append("t"), stream=t)
    dropped = s.abort()
    assert dropped >= 5  # (4 kernels and the record; the slow one may have started)
    s.synchronize(timeout=10)
    with pytest.raises(art.TaskError) as info:  # (its wait went on without the dropped record)
        t.synchronize(timeout=10)
    assert info.value.code == art.ErrorCode.RT_STREAM_ABORT
    art.launch(lambda: ran.append("after"), stream=s)
    s.synchronize(timeout=10)
    assert [r for r in ran if isinstance(r, int)] == [] and ran[-1] == "after" and "t" in ran
    s.destroy()
    with pytest.raises(art.InvalidHandleError):
        s.abort()
    t.destroy()


def _stuck_stream(dev):
    """A stream whose queued copy waits behind a notify nothing records: it never runs."""
    s = dev.create_stream()
    n = art.Notify()
    s.wait_notify(n)
    return s


def _synchronize_in_thread(wait):
    """Run wait() in a thread that starts waiting now; returns (thread, the error it got)."""
    got = []

    def run():
        try:
            wait()
            got.append(None)
        except art.AscentError as exc:
            got.append(exc)
    th = threading.Thread(target=run)
    th.start()
    waits = art.engine.ENGINE._thread_waits  # (the engine notes each host thread that waits)
    deadline = time.monotonic() + 10
    while th.ident not in waits and th.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    return th, got


@pytest.mark.parametrize("how", ["abort", "destroy"])
def test_a_synchronize_whose_work_is_discarded_meanwhile_gets_107023(dev, how):
    # (CANN: a synchronize that waited on a stream aborted meanwhile exits with STREAM_ABORT;
    # it returned as if the work had run, and the program went on with stale results)
    s = _stuck_stream(dev)
    buf = art.malloc(64)
    art.memset_async(buf, 7, stream=s)
    th, got = _synchronize_in_thread(lambda: s.synchronize(timeout=30))
    s.abort() if how == "abort" else s.destroy(force=True)
    th.join(30)
    assert not th.is_alive()
    assert isinstance(got[0], art.StreamStateError) and got[0].code == art.ErrorCode.RT_STREAM_ABORT
    assert "never ran" in str(got[0])
    if how == "abort":
        s.synchronize(timeout=10)  # (reported once, to the synchronize that waited)
        s.destroy()
    buf.free()


def test_an_event_synchronize_whose_record_is_discarded_meanwhile_gets_107023(dev):
    s = _stuck_stream(dev)
    ev = s.record()
    th, got = _synchronize_in_thread(lambda: ev.synchronize(timeout=30))
    s.abort()
    th.join(30)
    assert isinstance(got[0], art.StreamStateError) and got[0].code == art.ErrorCode.RT_STREAM_ABORT
    s.destroy()


def test_a_reset_that_discards_stuck_work_says_so(dev):
    s = _stuck_stream(dev)
    th, got = _synchronize_in_thread(lambda: s.synchronize(timeout=30))
    with pytest.warns(RuntimeWarning, match=r"device 0 reset discarded 1 pending task"):
        dev.reset()
    th.join(30)
    assert got[0].code == art.ErrorCode.RT_STREAM_ABORT


def test_an_abort_before_a_synchronize_is_no_error_for_it(dev):
    s = _stuck_stream(dev)
    s.abort()
    s.synchronize(timeout=10)  # (nothing left to wait for, nothing was waited for)
    s.destroy()


def test_an_event_whose_record_an_abort_dropped_says_so_until_recorded_again(dev):
    # (it read as complete: a synchronize, a query or another stream's wait went on as if the
    # work before it had run; CANN's event synchronize returns STREAM_ABORT after an abort)
    s, t = _stuck_stream(dev), dev.create_stream()
    ev = art.Event()
    ev.record(s)
    s.abort()
    for use in (ev.synchronize, ev.query, lambda: t.wait(ev)):
        with pytest.raises(art.AscentError) as err:
            use()
        assert err.value.code == art.ErrorCode.RT_STREAM_ABORT and "abort" in str(err.value)
    ev.record(s)  # a new record is a new point: waits on it work again
    t.wait(ev)
    ev.synchronize(timeout=10)
    t.synchronize(timeout=10)
    assert ev.query()
    for x in (s, t):
        x.destroy()


def test_abort_and_event_limits_refuse_bad_input_with_a_code(dev):
    s = dev.create_stream()
    s.begin_capture()
    with pytest.raises(art.AscentError) as err:  # (a capture runs nothing: nothing to abort)
        s.abort()
    assert err.value.code == art.ErrorCode.RT_STREAM_CAPTURED
    with pytest.raises(art.AscentError):
        s.end_capture()  # (the refusal invalidated the capture)
    s.destroy(force=True)
    with pytest.raises(art.InvalidArgumentError):
        art.Event(limited="no")


def test_a_discard_of_work_queued_after_a_synchronize_began_is_not_its_error(dev):
    s = dev.create_stream()
    gate = threading.Event()
    art.launch_host_func(gate.wait, 30, stream=s)         # what the synchronize waits for
    th, got = _synchronize_in_thread(lambda: s.synchronize(timeout=30))
    blocked = _stuck_stream(dev)
    s.wait(blocked.record())                              # queued later: never runs
    later = art.malloc(64)
    art.memset_async(later, 1, stream=s)
    gate.set()
    time.sleep(0.2)
    s.abort()                                             # drops only the later work
    th.join(30)
    assert got == [None]
    s.destroy()
    blocked.destroy(force=True)
    later.free()


@pytest.mark.parametrize("force", [False, True])
def test_destroying_a_capturing_stream_is_refused_or_ends_its_capture(dev, force):
    s = dev.create_stream()
    s.begin_capture()
    art.launch(lambda: None, stream=s)
    if not force:
        with pytest.raises(art.CaptureError) as err:
            s.destroy()
        assert err.value.code == art.ErrorCode.RT_STREAM_CAPTURED
    else:
        s.destroy(force=True)
    with pytest.raises(art.AscentError):  # (the capture is invalid: no graph comes of it)
        s.end_capture()
    if not force:
        s.destroy()


def test_wait_value_refuses_what_is_no_device_word_and_a_raising_condition_fails_it(dev):
    # (a bad word reached numpy with no code; a condition that raised would have raised under
    # the engine's lock, in an executor)
    s = dev.create_stream()
    word = art.malloc(8)
    art.memset(word, 0)
    for bad in (np.zeros(1, np.uint64), "x", None, art.malloc(8)[:4], art.malloc_host(8)):
        with pytest.raises(art.InvalidArgumentError) as err:
            s.wait_value(bad, lambda w: True, "a word")
        assert err.value.code == art.ErrorCode.INVALID_PARAM
    with pytest.raises(art.InvalidArgumentError):
        s.wait_value(word, 3, "a word")
    for bad in ("yes", None, 2):  # (last_resort: a flag)
        with pytest.raises(art.InvalidArgumentError):
            s.wait_value(word, lambda w: True, "a word", last_resort=bad)
    assert s.pending == 0
    s.wait_value(word, lambda w: 1 / 0, "a broken condition")
    with pytest.raises(art.TaskError) as err:  # (failed, not counted as met; the stream goes on)
        s.synchronize(10)
    assert err.value.code == art.ErrorCode.RT_AICPU_EXCEPTION and "ZeroDivisionError" in str(err.value)
    s.wait_value(word, lambda w: w == 0, "the word to be 0")
    s.synchronize(10)
    word.free()
    s.destroy()


def test_write_value_writes_the_word_in_stream_order_and_refuses_bad_input(dev):
    s = dev.create_stream()
    word = art.malloc(16)
    art.memset(word, 0)
    short, host = art.malloc(8), art.malloc_host(8)
    for bad in (np.zeros(1, np.uint64), None, short[:4], host):
        with pytest.raises(art.InvalidArgumentError) as err:
            s.write_value(bad, 1)
        assert err.value.code == art.ErrorCode.INVALID_PARAM
    short.free()
    host.free()
    for bad in (1 << 64, -(1 << 63) - 1, 1.5, "1", True, None):
        with pytest.raises(art.InvalidArgumentError):
            s.write_value(word, bad)
    assert s.pending == 0
    other = dev.create_stream()
    other.wait_value(word, lambda w: w == (1 << 64) - 1, "the word to be all ones")
    s.write_value(word[8:16], 7)  # (another word: leaves this one)
    s.write_value(word, -1)       # (two's complement)
    other.synchronize(10)
    assert word.numpy(np.uint64)[:2].tolist() == [(1 << 64) - 1, 7]
    for st in (s, other):
        st.destroy()
    word.free()


@pytest.mark.parametrize("poll", ["stream", "event"])
def test_a_query_loop_sees_a_value_wait_the_host_released_by_writing_the_word(dev, poll):
    # (on sim a `while not s.query()` loop spun for ever: only a waiting host looked at the words)
    s = dev.create_stream()
    word = art.malloc(8)
    art.memset(word, 0)
    s.wait_value(word, lambda w: w == 1, "the word to be 1")
    ev = s.record()
    art.memcpy(word, np.array([1], np.uint64))
    end = time.monotonic() + 10
    while not (ev.query() if poll == "event" else s.query()):
        assert time.monotonic() < end, "the query loop never saw the wait let go"
    s.destroy()
    word.free()


def test_a_value_wait_s_errors_name_the_value_wait_and_the_call_that_waited(dev):
    # (its timeout was said as a notify's; a destroy that could never finish as a synchronize)
    s = dev.create_stream()
    word = art.malloc(8)
    art.memset(word, 0)
    s.wait_value(word, lambda w: w == 1, "the word to be 1", timeout=0.05)
    with pytest.raises(art.AscentError) as err:
        s.synchronize(10)
    assert err.value.code == art.ErrorCode.RT_WAIT_TIMEOUT
    assert "value wait for the word to be 1" in str(err.value) and "notify" not in str(err.value)
    s.wait_value(word, lambda w: w == 1, "the word to be 1")
    with pytest.raises((art.DeadlockError, art.AscentTimeoutError)) as err:  # (deadlock: no other thread)
        s.destroy(timeout=0.2)
    assert "destroy of stream" in str(err.value) and "synchronize" not in str(err.value)
    s.destroy(force=True)
    word.free()


def test_a_queued_value_write_whose_word_was_freed_fails_instead_of_writing_its_next_owner(dev):
    # (its view was made as it was queued: the word's block, freed after another stream's work
    # and handed on, was written under its new owner, silently, where a kernel fails with 107017)
    s, o = dev.create_stream(), dev.create_stream()
    gate, word = art.malloc(8), art.malloc(8)
    art.memset(gate, 0)
    art.memset(word, 0)
    s.wait_value(gate, lambda w: w == 1, "the gate to open", timeout=10)
    s.write_value(word, 0xBEEF)
    word.free(o)                  # after o's work only: not after the queued write
    victim = art.malloc(8)
    art.memset(victim, 0)
    art.memcpy(gate, np.ones(1, np.uint64))
    with pytest.raises(art.TaskError) as err:
        s.synchronize(10)
    assert err.value.code == art.ErrorCode.RT_INVALID_HANDLE
    assert victim.numpy(np.uint64)[0] == 0
    for b in (gate, victim):
        b.free()
    s.destroy(), o.destroy()
