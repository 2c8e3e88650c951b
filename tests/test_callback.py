"""ascentrt.callback: report threads subscribed to streams run their callbacks, in stream order."""

import os
import subprocess
import sys
import threading
import time

import pytest

import ascentrt as art
from ascentrt import callback
from ascentrt.errors import AscentError, ErrorCode

sim_only = pytest.mark.skipif(os.environ.get("ASCENTRT_BACKEND") != "sim",
                              reason="runs in the --backend sim session")


class Reporter:
    """A thread looping on process_reports() until closed."""

    def __init__(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            try:
                callback.process_reports(0.02)
            except AscentError:
                pass  # idle or not subscribed yet

    def close(self):
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def reporter():
    r = Reporter()
    yield r
    r.close()


def test_blocking_callback_runs_on_the_report_thread_in_order(stream, reporter):
    callback.subscribe(reporter.thread.ident, stream)
    order = []
    art.launch(order.append, "before", stream=stream)
    callback.launch_callback(lambda d: order.append((d, threading.current_thread() is reporter.thread)),
                             "cb", stream)
    art.launch(order.append, "after", stream=stream)
    stream.synchronize(10)
    assert order == ["before", ("cb", True), "after"]
    callback.unsubscribe(reporter.thread.ident, stream)


@sim_only
@pytest.mark.parametrize("blocking", [False, True], ids=["non_blocking", "blocking"])
def test_a_report_thread_moves_the_simulated_device_on_to_its_coming_callbacks_and_no_further(
        stream, reporter, blocking):
    # (process_reports waited in real time beside the simulation: with the host blocked outside
    # the runtime, as a pyACL pipeline's main thread on a threading.Event, only the idle pump
    # moved the device, a callback per ~0.1 s of real time)
    tl = stream.device._backend.timeline
    pumped, patience = tl.unattended, tl.patience_spent
    callback.subscribe(reporter.thread.ident, stream)
    n, ran, done = 20, [], threading.Event()

    def cb(i):
        ran.append(i)
        if i == n - 1:
            done.set()
    for i in range(n):
        art.launch(art.kernels.noop, stream=stream, cost=5e-6)
        callback.launch_callback(cb, i, stream, blocking=blocking)
    assert done.wait(30) and ran == list(range(n))
    # the report thread's wait moved the device, at once: the pump never had to, and no
    # blocking callback handed to the very thread that stepped waited out a host function's
    # patience
    assert (tl.unattended, tl.patience_spent) == (pumped, patience)
    stream.synchronize(10)
    # With none coming, its wait moves nothing: the host's time stays the host's while it
    # computes (what the host does between runtime calls takes no virtual time).
    before = stream.device._backend.now_ns()
    until = time.monotonic() + 0.3
    while time.monotonic() < until:
        pass
    assert stream.device._backend.now_ns() == before
    callback.unsubscribe(reporter.thread.ident, stream)


def test_subscribe_launch_and_unsubscribe_from_inside_the_streams_own_callback_are_107011(
        stream, reporter):
    # (CANN refuses them there, ACL_ERROR_RT_STREAM_SUBSCRIBE; they were accepted)
    other = stream.device.create_stream()
    callback.subscribe(reporter.thread.ident, stream)
    callback.subscribe(reporter.thread.ident, other)
    codes = []

    def inside(_):
        for attempt in (lambda: callback.launch_callback(lambda d: None, None, stream),
                        lambda: callback.unsubscribe(reporter.thread.ident, stream),
                        lambda: callback.subscribe(reporter.thread.ident, stream)):
            try:
                attempt()
                codes.append(0)
            except AscentError as e:
                codes.append(int(e.code))
        codes.append(callback.launch_callback(lambda d: codes.append("other ran"), None, other) > 0)

    callback.launch_callback(inside, None, stream)
    stream.synchronize(10)
    other.synchronize(10)
    assert codes == [107011, 107011, 107011, True, "other ran"]
    callback.unsubscribe(reporter.thread.ident, stream)
    callback.unsubscribe(reporter.thread.ident, other)
    other.destroy()


def test_launch_without_subscriber_is_107015(stream):
    with pytest.raises(AscentError) as err:
        callback.launch_callback(print, None, stream)
    assert err.value.code == ErrorCode.RT_STREAM_NO_CB_REG


def test_a_stream_has_one_report_thread(stream, reporter):
    callback.subscribe(reporter.thread.ident, stream)
    with pytest.raises(AscentError) as err:
        callback.subscribe(threading.get_ident(), stream)
    assert err.value.code == ErrorCode.REPEAT_SUBSCRIBE
    assert callback.subscribed_streams(reporter.thread.ident) == [stream]
    callback.unsubscribe(reporter.thread.ident, stream)
    assert callback.subscribed_streams(reporter.thread.ident) == []


def test_process_reports_states(stream):
    with pytest.raises(AscentError) as err:
        callback.process_reports(0.01)
    assert err.value.code == ErrorCode.RT_THREAD_SUBSCRIBE
    callback.subscribe(threading.get_ident(), stream)
    with pytest.raises(AscentError) as err:
        callback.process_reports(0.01)
    assert err.value.code == ErrorCode.RT_REPORT_TIMEOUT
    callback.launch_callback(lambda d: None, None, stream, blocking=False)
    stream.synchronize(10)
    assert callback.process_reports(1) == 1
    callback.unsubscribe(threading.get_ident(), stream)


def test_unsubscribe_cancels_a_pending_blocking_callback(stream):
    me = threading.get_ident()
    callback.subscribe(me, stream)
    callback.launch_callback(lambda d: None, None, stream)
    ev = art.Event(stream.device)
    ev.record(stream)
    callback.unsubscribe(me, stream)   # nobody will run it: the stream must not hang
    with pytest.raises(AscentError) as err:
        stream.synchronize(10)
    assert err.value.code == ErrorCode.RT_STREAM_NO_CB_REG


def test_unsubscribe_keeps_handed_over_non_blocking_callbacks_for_the_threads_next_process_reports(stream):
    # (they were cancelled: their tasks had completed, so 10 callbacks launched, synchronized,
    # then unsubscribed, as a pyACL post-processing loop does, ran 0 times with no error)
    me = threading.get_ident()
    other = art.Stream()
    callback.subscribe(me, stream)
    callback.subscribe(me, other)
    ran = []
    for i in range(10):
        callback.launch_callback(ran.append, i, stream, blocking=False)
    callback.launch_callback(ran.append, "other", other, blocking=False)
    stream.synchronize(10)
    other.synchronize(10)
    callback.unsubscribe(me, stream)
    callback.unsubscribe(me, other)
    assert callback.process_reports(1) == 11   # (in the order the streams handed them over)
    assert [r for r in ran if r != "other"] == list(range(10)) and "other" in ran
    with pytest.raises(AscentError) as err:   # (then the thread serves nothing, as before)
        callback.process_reports(0.01)
    assert err.value.code == ErrorCode.RT_THREAD_SUBSCRIBE
    callback.subscribe(me, stream)            # and may subscribe again
    callback.launch_callback(ran.append, "again", stream, blocking=False)
    stream.synchronize(10)
    assert callback.process_reports(1) == 1 and ran[-1] == "again"
    callback.unsubscribe(me, stream)
    other.destroy()


def test_subscribe_needs_a_live_thread(stream):
    with pytest.raises(AscentError):
        callback.subscribe(1, stream)


def test_synchronizing_its_own_stream_inside_a_blocking_callback_fails_instead_of_hanging(stream, reporter):
    callback.subscribe(reporter.thread.ident, stream)
    seen = []

    def sync_inside(_):
        try:
            stream.synchronize(10)
        except AscentError as exc:
            seen.append(exc.code)

    callback.launch_callback(sync_inside, None, stream)
    stream.synchronize(10)
    assert seen == [ErrorCode.RT_STREAM_SUBSCRIBE]
    callback.unsubscribe(reporter.thread.ident, stream)


def test_callbacks_for_a_report_thread_that_exited_fail_loudly(stream, caplog):
    subscribed, leave = threading.Event(), threading.Event()

    def reporter():
        callback.subscribe(threading.get_ident(), stream)
        subscribed.set()
        leave.wait(10)                       # ... then exits without unsubscribing or processing
    t = threading.Thread(target=reporter)
    t.start()
    assert subscribed.wait(10)
    callback.launch_callback(lambda _: None, None, stream, blocking=False)
    stream.synchronize(timeout=10)           # delivered to its queue, never to run
    leave.set()
    t.join(10)
    with pytest.raises(art.InvalidArgumentError) as err:   # refused, not accepted and lost
        callback.launch_callback(lambda _: None, None, stream, blocking=False)
    assert err.value.code == art.ErrorCode.RT_STREAM_NO_CB_REG
    assert any("exited without unsubscribing: 1 callback(s) handed to it will not run" in r.getMessage()
               for r in caplog.records)


def _thread_with_ident(ident, target):
    """A started thread that Python gave `ident` (an ended thread's id goes to a later thread),
    or None when none got it in 50 tries. (A thread that got another id ends at once: joining
    one that ran `target` waited out its 10 s whenever the first try missed.)"""
    for _ in range(50):
        chosen, decided = [], threading.Event()

        def run():
            decided.wait(10)
            if chosen:
                target()
        t = threading.Thread(target=run)
        t.start()
        if t.ident == ident:
            chosen.append(True)
            decided.set()
            return t
        decided.set()
        t.join(10)
    return None


@pytest.mark.cpu_only  # (its kernel blocks on a host gate: on sim the step waited out 10 s)
def test_a_new_thread_with_an_ended_report_threads_id_is_not_its_report_thread(stream, caplog):
    # (the dead thread's blocking callback waited for ever: the new thread passed for it)
    subscribed, leave = threading.Event(), threading.Event()

    def reporter():
        callback.subscribe(threading.get_ident(), stream)
        subscribed.set()
        leave.wait(10)
    t = threading.Thread(target=reporter)
    t.start()
    assert subscribed.wait(10)
    gate = threading.Event()
    art.launch(gate.wait, 10, stream=stream)
    callback.launch_callback(lambda _: None, None, stream)  # blocking, reached after t ended
    leave.set()
    t.join(10)
    stop = threading.Event()
    other = _thread_with_ident(t.ident, stop.wait)
    if other is None:
        gate.set()
        with pytest.raises(AscentError):
            stream.synchronize(timeout=5)
        pytest.skip("Python gave no new thread the ended one's id")
    try:
        gate.set()
        with pytest.raises(AscentError) as err:
            stream.synchronize(timeout=5)
        assert err.value.code == ErrorCode.RT_STREAM_NO_CB_REG
        with pytest.raises(AscentError) as err:   # not subscribed: it never was
            callback.subscribed_streams(other.ident) or callback.unsubscribe(other.ident, stream)
        assert err.value.code == ErrorCode.RT_STREAM_NO_CB_REG
    finally:
        stop.set()
        other.join(10)


@pytest.mark.cpu_only
def test_a_report_thread_synchronizing_the_stream_it_must_serve_gets_a_deadlock_error(stream):
    outcome = []
    subscribed, submitted = threading.Event(), threading.Event()
    other = art.Device(0).create_stream()

    def reporter():
        me = threading.get_ident()
        callback.subscribe(me, stream)
        subscribed.set()
        assert submitted.wait(10)
        # Synchronize without processing the blocking callback that will be queued for this
        # thread: directly, then through a stream that waits on it.
        for target in (stream, other):
            try:
                target.synchronize(timeout=20)
            except art.DeadlockError as exc:
                outcome.append(str(exc))
        callback.process_reports(timeout=10)   # now serve it: the stream goes on
        callback.unsubscribe(me, stream)
    t = threading.Thread(target=reporter)
    t.start()
    assert subscribed.wait(10)
    gate = threading.Event()
    art.launch(lambda: gate.wait(10), stream=stream)
    callback.launch_callback(lambda _: None, None, stream, blocking=True)
    other.wait(stream.record())
    submitted.set()
    gate.set()
    t.join(30)
    assert len(outcome) == 2 and all("can never finish" in m for m in outcome), outcome
    stream.synchronize(timeout=10)
    other.destroy()


def test_a_callback_interrupted_by_ctrl_c_leaves_the_rest_of_its_batch_queued(dev):
    # (the rest of the batch was dropped: a blocking callback's stream waited for ever)
    s1, s2 = dev.create_stream(), dev.create_stream()
    me = threading.get_ident()
    callback.subscribe(me, s1)
    callback.subscribe(me, s2)
    try:
        def interrupted(_):
            raise KeyboardInterrupt
        ran = []
        callback.launch_callback(interrupted, None, s1, blocking=False)
        s1.synchronize(timeout=5)
        callback.launch_callback(lambda _: ran.append(1), None, s2)  # blocking: s2 waits for it
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(callback._reporters[me].queue) < 2:
            time.sleep(0.01)
        with pytest.raises(KeyboardInterrupt):
            callback.process_reports(timeout=1)
        assert callback.process_reports(timeout=1) == 1 and ran == [1]
        s2.synchronize(timeout=5)
    finally:
        callback.unsubscribe(me, s1)
        callback.unsubscribe(me, s2)
        s1.destroy(), s2.destroy()


def test_callbacks_left_queued_for_a_report_thread_at_exit_are_named(tmp_path):
    # (a program that subscribed its main thread and ended before processing lost them silently)
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import threading, time, ascentrt as art\n"
        "from ascentrt import callback\n"
        "s = art.Stream()\n"
        "callback.subscribe(threading.get_ident(), s)\n"
        "callback.launch_callback(print, 'a', s, blocking=False)\n"
        "callback.launch_callback(print, 'b', s)\n"
        "deadline = time.monotonic() + 10\n"
        "while len(callback._reporters[threading.get_ident()].queue) < 2 and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n")
    out = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "the program ended with 2 callback(s) queued for report thread" in out.stderr
