"""The program's code the runtime calls (value-wait conditions, report-thread callbacks,
exception-info callbacks) raising SystemExit or KeyboardInterrupt (BaseExceptions, not
Exceptions): each is that code's documented failure, no runtime thread dies of it, and nothing
of it escapes from an unrelated call (kernels and host functions: see test_failures)."""

import logging
import time
import threading

import numpy as np
import pytest

import ascentrt as art
from ascentrt import callback

TIMEOUT = 10


def _word(value=0):
    word = art.malloc(8)
    art.memset(word, value)
    return word


def _runtime_threads_go_on(dev, s):
    """A device-side timed wait still times out (the watchdog lives, on a real-time device)
    and the host function behind it runs: the runtime's threads are all still at work."""
    note, ran = art.Notify(dev), threading.Event()
    s.wait_notify(note, timeout=0.2)
    art.launch_host_func(ran.set, stream=s)
    with pytest.raises(art.TaskError) as err:
        s.synchronize(timeout=TIMEOUT)
    assert err.value.code == art.ErrorCode.RT_WAIT_TIMEOUT and ran.is_set()


def test_a_value_wait_condition_that_raises_system_exit_fails_the_wait(dev, stream):
    # (SystemExit escaped from wait_value, or, looked at by the watchdog, ended that thread:
    # no timed wait timed out any more)
    word = _word()

    def met(w):
        raise SystemExit(3)
    stream.wait_value(word, met, "a condition that exits")
    art.launch_host_func(lambda: None, stream=stream)
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=TIMEOUT)
    assert err.value.code == art.ErrorCode.RT_AICPU_EXCEPTION
    assert isinstance(err.value.__cause__.__cause__, SystemExit)
    _runtime_threads_go_on(dev, stream)
    word.free()


@pytest.mark.cpu_only  # (the watchdog's thread: a simulated device looks from the host's)
@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_a_condition_that_raises_on_the_watchdog_fails_its_wait_and_the_watchdog_lives(dev, stream, exc):
    word = _word()
    raised = threading.Event()

    def met(w):
        if threading.current_thread().name == "ascentrt-watchdog":
            raised.set()
            raise exc()
        return False
    stream.wait_value(word, met, "a condition the watchdog looks at")
    assert raised.wait(TIMEOUT)
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=TIMEOUT)
    assert err.value.code == art.ErrorCode.RT_AICPU_EXCEPTION
    assert any(t.name == "ascentrt-watchdog" for t in threading.enumerate())
    _runtime_threads_go_on(dev, stream)
    # the word the host writes is still looked at every millisecond
    released = threading.Event()
    stream.wait_value(word, lambda w: w == 1, "the word to be 1", timeout=TIMEOUT)
    art.launch_host_func(released.set, stream=stream)
    word.numpy(np.int64)[0] = 1
    assert released.wait(TIMEOUT)
    stream.synchronize(timeout=TIMEOUT)
    word.free()


def test_a_condition_the_race_sanitizer_asks_that_raises_system_exit_meets_nothing(dev, stream):
    word = _word()
    other = dev.create_stream()
    calls = []

    def met(w):
        calls.append(w)
        if w == 5:
            raise SystemExit(3)
        return False
    with art.sanitize("log"):
        other.write_value(word, 5)
        other.synchronize(timeout=TIMEOUT)
        stream.wait_value(word, met, "a condition that exits at 5", timeout=0.2)
        art.launch_host_func(lambda: None, stream=stream)
        with pytest.raises(art.TaskError):
            stream.synchronize(timeout=TIMEOUT)
    assert 5 in calls
    _runtime_threads_go_on(dev, stream)
    other.destroy()
    word.free()


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_a_report_thread_callback_that_raises_a_base_exception_is_logged_and_the_rest_run(stream, exc, caplog):
    # (it ended the report thread's process_report: the callbacks after it never ran and
    # their stream failed with 107015; pyACL logs an exception in fn)
    stop, subscribed, ran, ended = threading.Event(), threading.Event(), [], []

    def reporter():
        callback.subscribe(threading.get_ident(), stream)
        subscribed.set()
        try:
            while not stop.is_set():
                try:
                    callback.process_reports(timeout=0.05)
                except art.AscentTimeoutError:
                    pass
        except BaseException as e:
            ended.append(e)
    t = threading.Thread(target=reporter)
    t.start()
    assert subscribed.wait(TIMEOUT)

    def cb(i):
        ran.append(i)
        if i == 1:
            raise exc()
    try:
        with caplog.at_level(logging.ERROR, logger="ascentrt.callback"):
            for i in range(3):
                callback.launch_callback(cb, i, stream)
            stream.synchronize(timeout=TIMEOUT)
        assert ran == [0, 1, 2] and ended == [] and t.is_alive()
        assert any("callback" in r.getMessage() and "cb" in r.getMessage() for r in caplog.records)
    finally:
        callback.unsubscribe(t.ident, stream)
        stop.set()
        t.join(TIMEOUT)


def test_an_exception_info_callback_that_exits_is_logged_under_the_programs_name(dev, stream, caplog):
    # (logged as "<function _dispatch ...>", the facade's hook, not the program's function)
    import ascentrt.acl as acl

    def my_info_callback(handle):
        raise SystemExit(3)

    def bad():
        raise ValueError("boom")
    assert acl.rt.set_exception_info_callback(my_info_callback) == 0
    try:
        with caplog.at_level(logging.ERROR, logger="ascentrt"):
            art.launch(bad, stream=stream)
            with pytest.raises(art.TaskError):
                stream.synchronize(timeout=TIMEOUT)
            # (the callback runs on the executor once the failure is recorded, outside the
            # engine's lock: a synchronize may return before it has been called)
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline and not any(
                    "exception-info callback" in r.getMessage() for r in caplog.records):
                time.sleep(0.01)
        logged = [r.getMessage() for r in caplog.records if "exception-info callback" in r.getMessage()]
        assert logged and all("my_info_callback" in m and "_dispatch" not in m for m in logged)
    finally:
        acl.rt.set_exception_info_callback(None)
    _runtime_threads_go_on(dev, stream)



# A value wait whose condition raises KeyboardInterrupt on the main thread (as a Ctrl-C landing
# in it would): the wait fails, and the program gets its Ctrl-C back a moment later.
CONDITION_TAKES_A_CTRL_C = """
import time, ascentrt as art
dev = art.set_device(0)
s = dev.create_stream()
word = art.malloc(8)
art.memset(word, 0)
def met(w):
    raise KeyboardInterrupt
try:
    s.wait_value(word, met, "a condition that took a Ctrl-C")
    time.sleep(5)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
try:
    s.synchronize(timeout=5)
    print("synchronized")
except art.TaskError as exc:
    print("wait failed", int(exc.code))
word.free()
"""


def test_a_ctrl_c_sent_again_while_its_timer_still_starts_reaches_the_program():
    # (on a loaded machine the 2 ms timer that sends a held-back Ctrl-C again fired before its
    # start returned; the signal landed while the shim was still deciding, joined the list the
    # timer had just emptied, and nothing sent it again: the program never saw its Ctrl-C)
    from subprocess_util import run_program
    slow_first_timer_start = """
import threading, time
start = threading.Timer.start
def start_slowly(self):  # (the first start returns after its timer fired)
    start(self)
    if threading.Timer.start is start_slowly:
        threading.Timer.start = start
        time.sleep(0.05)
threading.Timer.start = start_slowly
"""
    out = run_program(slow_first_timer_start + CONDITION_TAKES_A_CTRL_C + """
print("slowed", threading.Timer.start is start)
""", timeout=60)
    assert out.split() == ["interrupted", "wait", "failed", "507018", "slowed", "True"], out


def test_a_ctrl_c_a_condition_took_on_the_main_thread_fails_its_wait_and_reaches_the_program():
    # (the KeyboardInterrupt escaped from inside the engine's step, the wait neither met nor
    # failed, and escaped again from each later call that looked at the word)
    from subprocess_util import run_program
    out = run_program(CONDITION_TAKES_A_CTRL_C, timeout=60)
    assert out.split("\n")[:2] == ["interrupted", "wait failed 507018"], out
