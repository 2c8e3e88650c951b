"""Notifies across streams, device-side wait timeouts, and deadlock detection (semantics 3)."""

import threading

import pytest

import ascentrt as art
from subprocess_util import run_program


@pytest.mark.cpu_only
def test_wait_and_reset_holds_the_stream_until_the_record(dev):
    producer, consumer = dev.create_stream(), dev.create_stream()
    notify = dev.create_notify()
    gate = threading.Event()
    log = []
    art.wait_and_reset_notify(notify, consumer)
    art.launch(lambda: log.append("consumer"), stream=consumer)
    art.launch(lambda: gate.wait(10), stream=producer)
    art.launch(lambda: log.append("producer"), stream=producer)
    art.record_notify(notify, producer)
    assert not consumer.query()
    gate.set()
    consumer.synchronize(timeout=10)
    assert log == ["producer", "consumer"]
    producer.destroy(), consumer.destroy()


def test_a_record_before_the_wait_is_consumed_by_it_and_reset(dev):
    a, b = dev.create_stream(), dev.create_stream()
    notify = dev.create_notify()
    notify.record(a)
    a.synchronize(timeout=10)
    notify.wait_and_reset(b)
    b.synchronize(timeout=10)                 # the earlier record satisfied it
    notify.wait_and_reset(b, timeout=0.05)    # reset: a second wait needs a second record
    with pytest.raises(art.AscentError) as err:
        b.synchronize(timeout=10)
    assert err.value.code == art.ErrorCode.RT_WAIT_TIMEOUT
    a.destroy(), b.destroy()


def test_each_record_releases_one_wait(dev):
    producer = dev.create_stream()
    consumers = [dev.create_stream() for _ in range(3)]
    notify = dev.create_notify()
    for c in consumers:
        notify.wait_and_reset(c)
    for _ in consumers:
        notify.record(producer)
    for c in consumers:
        c.synchronize(timeout=10)
    for s in consumers + [producer]:
        s.destroy()


def test_notify_wait_timeout_fails_the_wait_with_107019_at_synchronize(dev, stream):
    notify = dev.create_notify()
    ran = []
    notify.wait_and_reset(stream, timeout=0.05)
    art.launch(lambda: ran.append(1), stream=stream)
    with pytest.raises(art.AscentError) as err:
        stream.synchronize(timeout=10)
    assert err.value.code == art.ErrorCode.RT_WAIT_TIMEOUT == 107019
    assert err.value.info.stream_id == stream.id
    assert ran == [1]
    stream.synchronize(timeout=10)            # the error was reported once


def test_notify_wait_timeout_in_stop_mode_stops_the_stream(dev):
    s = dev.create_stream(stop_on_failure=True)
    notify = dev.create_notify()
    ran = []
    notify.wait_and_reset(s, timeout=0.05)
    art.launch(lambda: ran.append(1), stream=s)
    with pytest.raises(art.AscentError) as err:
        s.synchronize(timeout=10)
    assert err.value.code == art.ErrorCode.RT_WAIT_TIMEOUT
    assert ran == []
    with pytest.raises(art.StreamStateError):
        art.launch(art.kernels.noop, stream=s)
    s.destroy(force=True)


def test_destroyed_notify_raises_invalid_handle(dev, stream):
    notify = dev.create_notify()
    notify.destroy()
    for use in (lambda: notify.record(stream), lambda: notify.wait_and_reset(stream),
                notify.destroy):
        with pytest.raises(art.InvalidHandleError) as err:
            use()
        assert err.value.code == art.ErrorCode.RT_INVALID_HANDLE
    assert stream.pending == 0


def test_notify_functions_take_a_notify(stream):
    with pytest.raises(art.InvalidArgumentError):
        art.record_notify("x", stream)
    with pytest.raises(art.InvalidArgumentError):
        art.wait_and_reset_notify(None, stream)


def test_a_notify_cycle_is_reported_as_a_deadlock_naming_the_streams(dev):
    a, b = dev.create_stream(), dev.create_stream()
    n1, n2 = dev.create_notify(), dev.create_notify()
    n1.wait_and_reset(a)   # a waits for b's record of n1 ...
    n2.record(a)
    n2.wait_and_reset(b)   # ... and b waits for a's record of n2, which comes after a's wait
    n1.record(b)
    with pytest.raises(art.DeadlockError) as err:
        a.synchronize(timeout=30)
    assert err.value.code == art.ErrorCode.RT_DEADLOCK
    message = str(err.value)
    assert f"stream {a.id}" in message and f"stream {b.id}" in message
    assert f"notify {n1.id}" in message or f"notify {n2.id}" in message
    a.destroy(force=True), b.destroy(force=True)


def test_an_event_cycle_is_reported_as_a_deadlock_naming_the_streams(dev):
    # A wait always refers to a record already submitted, so a cycle through events alone cannot
    # be built; it takes one link of another kind. Here b waits on an event that a records only
    # after a's notify wait, and the notify is recorded by b after that event wait.
    a, b = dev.create_stream(), dev.create_stream()
    notify, ev = dev.create_notify(), dev.create_event()
    notify.wait_and_reset(a)
    ev.record(a)
    b.wait(ev)
    notify.record(b)
    with pytest.raises(art.DeadlockError) as err:
        dev.synchronize(timeout=30)
    message = str(err.value)
    assert f"stream {a.id}" in message and f"stream {b.id}" in message
    assert "for an event recorded on stream" in message
    a.destroy(force=True), b.destroy(force=True)


def test_a_chain_of_event_waits_on_a_stuck_stream_is_not_a_cycle(dev):
    # b and c wait (through events) on a, which only the host can release: no DeadlockError.
    a, b, c = dev.create_stream(), dev.create_stream(), dev.create_stream()
    notify = dev.create_notify()
    notify.wait_and_reset(a)
    b.wait(a.record())
    c.wait(b.record())
    with pytest.raises(art.AscentTimeoutError):
        c.synchronize(timeout=0.6)
    notify.record(dev.create_stream())
    c.synchronize(timeout=10)
    for s in (a, b, c):
        s.destroy()


def test_a_healthy_notify_pipeline_is_not_reported_as_a_deadlock(dev):
    stages = [dev.create_stream() for _ in range(3)]
    links = [dev.create_notify() for _ in range(2)]
    log = []
    for batch in range(20):
        for i, s in enumerate(stages):
            if i:
                links[i - 1].wait_and_reset(s)
            art.launch(lambda i=i, batch=batch: log.append((i, batch)), stream=s)
            if i < len(links):
                links[i].record(s)
    for s in stages:
        s.synchronize(timeout=30)
    for i in range(3):
        assert [b for (stage, b) in log if stage == i] == list(range(20))
    for s in stages:
        s.destroy()


def test_a_wait_only_the_host_can_release_is_not_a_cycle(dev):
    # No stream will ever record the notify, but the host still can: no DeadlockError, and the
    # host's record releases the stream.
    a = dev.create_stream()
    notify = dev.create_notify()
    notify.wait_and_reset(a)
    with pytest.raises(art.AscentTimeoutError):
        a.synchronize(timeout=0.6)   # longer than the deadlock check interval
    notify.record(dev.create_stream())
    a.synchronize(timeout=10)
    a.destroy()


def test_streams_outside_the_cycle_still_synchronize(dev):
    a, b, c = dev.create_stream(), dev.create_stream(), dev.create_stream()
    n1, n2 = dev.create_notify(), dev.create_notify()
    n1.wait_and_reset(a)
    n2.record(a)
    n2.wait_and_reset(b)
    n1.record(b)
    art.launch(art.kernels.noop, stream=c)
    c.synchronize(timeout=10)
    with pytest.raises(art.DeadlockError):
        b.synchronize(timeout=30)
    a.destroy(force=True), b.destroy(force=True), c.destroy()


@pytest.mark.cpu_only
def test_a_host_function_waiting_for_work_behind_it_on_the_host_executor_is_a_deadlock(dev):
    # Stream a's host function synchronizes stream b, whose host function needs the host
    # executor a's function occupies: a cycle through an executor. The waiting host function
    # gets the DeadlockError (breaking the cycle); the host's own synchronize then completes.
    if dev.properties.host_func_threads != 1:
        pytest.skip("needs a single host-function thread")
    a, b, hold = dev.create_stream(), dev.create_stream(), dev.create_stream()
    gate = threading.Event()
    art.launch(lambda: gate.wait(10), stream=hold)
    ready = hold.record()
    b.wait(ready)
    a.wait(ready)     # released together; a's host function takes the executor first
    seen = []

    def waits_for_b():
        try:
            b.synchronize()          # no timeout: only the deadlock check can end this wait
            seen.append("returned")
        except art.DeadlockError as exc:
            seen.append(str(exc))

    art.launch_host_func(waits_for_b, stream=a)
    art.launch_host_func(lambda: seen.append("b ran"), stream=b)
    gate.set()
    a.synchronize(timeout=30)
    b.synchronize(timeout=30)
    assert len(seen) == 2 and seen[1] == "b ran", seen
    assert f"stream {a.id}" in seen[0] and f"stream {b.id}" in seen[0]
    assert "host executor" in seen[0]
    for s in (a, b, hold):
        s.destroy()
    art.get_last_error()


def test_a_host_function_waiting_for_another_stream_is_not_a_deadlock(dev):
    a, b = dev.create_stream(), dev.create_stream()
    seen = []
    art.launch(lambda: threading.Event().wait(0.3), stream=b)   # longer than the deadlock check
    art.launch_host_func(lambda: (b.synchronize(timeout=10), seen.append("ok")), stream=a)
    a.synchronize(timeout=30)
    assert seen == ["ok"]
    a.destroy(), b.destroy()


@pytest.fixture
def stuck_on_a_notify(dev, monkeypatch):
    """A stream waiting on a notify nothing queued will record; stall checks made quick."""
    monkeypatch.setenv("ASCENTRT_DEADLOCK_CHECK_S", "0.05")
    monkeypatch.setenv("ASCENTRT_STALL_WARN_S", "0.2")
    a = dev.create_stream()
    notify = dev.create_notify()
    notify.wait_and_reset(a)
    return a, notify


def test_a_stuck_wait_is_reported_as_a_warning_before_its_timeout(dev, stuck_on_a_notify):
    # No cycle, but nothing on the device can release the stream: the waiting call says why.
    a, notify = stuck_on_a_notify
    with pytest.warns(RuntimeWarning, match=f"notify {notify.id}.*only the host can record it"):
        with pytest.raises(art.AscentTimeoutError):
            a.synchronize(timeout=1.0)
    notify.record(dev.create_stream())
    a.synchronize(timeout=10)
    a.destroy()


def test_a_wait_on_a_destroyed_notify_is_reported_as_unreleasable(stuck_on_a_notify):
    # Not "only the host can record it": a destroyed notify cannot be recorded by anyone, so
    # the wait is a deadlock at once (without a timeout it would otherwise hang for ever).
    a, notify = stuck_on_a_notify
    notify.destroy()
    with pytest.raises(art.DeadlockError, match=f"notify {notify.id}; it was destroyed: nothing can record it"):
        a.synchronize(timeout=1.0)
    with pytest.raises(art.DeadlockError):
        a.synchronize()
    a.destroy(force=True)


@pytest.mark.cpu_only
@pytest.mark.parametrize("how", ["destroy", "stop"])
def test_a_discarded_notify_record_releases_its_waiter(dev, how):
    producer = dev.create_stream(stop_on_failure=how == "stop")
    consumer = dev.create_stream()
    n = art.Notify()
    gate = threading.Event()
    consumer.wait_notify(n)
    after = []
    art.launch_host_func(after.append, "ran", stream=consumer)

    started = threading.Event()

    def body():
        started.set()
        assert gate.wait(10)
        if how == "stop":
            raise RuntimeError("producer fails")
    art.launch(body, stream=producer)
    producer.record_notify(n)          # discarded below, never run
    assert started.wait(10)
    if how == "destroy":
        producer.destroy(force=True)   # (the running body ends: what the record follows ran)
        gate.set()
        consumer.synchronize(timeout=10)  # released, as a discarded event record releases its waits
    else:
        gate.set()
        with pytest.raises(art.TaskError):
            producer.synchronize(timeout=10)
        with pytest.raises(art.TaskError) as info:  # released, and told that what the record
            consumer.synchronize(timeout=10)       # was to follow failed
        assert info.value.code == art.ErrorCode.RT_STREAM_ABORT
    assert after == ["ran"]
    consumer.destroy()
    if how == "stop":
        producer.destroy(force=True)


ENDLESS_WAIT = """
    import signal, sys, threading, time
    import ascentrt as art
    a, notify = art.Stream(), art.Notify()
    notify.wait_and_reset(a)
    if sys.argv[1] == "kernel":  # a kernel on another stream records it later
        art.launch(lambda: (time.sleep(0.3), notify.record(art.Stream())), stream=art.Stream())
    elif sys.argv[1] == "signal":  # a signal handler of the program's records it
        signal.signal(signal.SIGALRM, lambda *_: notify.record(art.Stream()))
        signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        a.synchronize()  # (no timeout: the program would otherwise wait for ever)
        print("done")
    except art.DeadlockError as e:
        print(int(e.code), "only the host can record it" in str(e))
        notify.record(art.Stream())  # the stream goes on once the host records it
        a.synchronize(timeout=10)
"""


@pytest.mark.parametrize("who, expect", [("nobody", "507950 True"), ("kernel", "done"),
                                         ("signal", "done")])
def test_an_endless_wait_for_a_notify_only_this_thread_could_record_is_a_deadlock(who, expect):
    # (it hung for ever: a warning after 10 s, nothing more) But a kernel or a signal handler
    # of the program's may record the notify: then the wait goes on.
    out = run_program(ENDLESS_WAIT.replace("sys.argv[1]", repr(who)),
                      env={"ASCENTRT_DEADLOCK_CHECK_S": "0.05"}, timeout=60)
    assert out.strip() == expect


def test_an_endless_wait_goes_on_while_another_thread_may_record_the_notify(dev, monkeypatch):
    monkeypatch.setenv("ASCENTRT_DEADLOCK_CHECK_S", "0.05")
    import threading
    import time
    a = dev.create_stream()
    notify = dev.create_notify()
    notify.wait_and_reset(a)

    def later():
        time.sleep(0.5)
        notify.record(dev.create_stream())
    t = threading.Thread(target=later)
    t.start()
    a.synchronize()  # no DeadlockError: that thread records it
    t.join()
    a.destroy()


def test_a_submit_to_a_full_queue_that_only_this_thread_could_drain_is_a_deadlock():
    out = run_program("""
        import ascentrt as art
        s, n = art.Stream(), art.Notify()
        s.wait_notify(n)
        try:
            for _ in range(10):
                art.launch(art.kernels.noop, stream=s)
        except art.DeadlockError as e:
            print(int(e.code))
        n.record(art.Stream())
        s.synchronize()
        print("drained")
    """, env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_VARY": '{"queue_depth": 2}'})
    assert out.split() == ["507950", "drained"]


VALUE_CYCLE = """
import ascentrt as art
dev = art.set_device(0)
s1, s2, s3 = dev.create_stream(), dev.create_stream(), dev.create_stream()
a, c = art.Notify(dev), art.Notify(dev)
w = art.malloc(8)
s1.wait_notify(a)
s1.record_notify(c)
s2.wait_value(w, lambda v: v >= 1, "w >= 1")
s2.record_notify(a)
s3.wait_notify(c)
s3.write_value(w, 1)   # (the write the value wait needs, behind s3's wait)
try:
    dev.synchronize()
except art.DeadlockError as e:
    print(int(e.code), s1.id, s2.id, s3.id)
    print(e)
"""


@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_a_cycle_through_a_value_wait_names_every_edge_and_the_queued_write(backend):
    # (it named the value wait alone and said no queued work could write the word, though
    # the write was queued behind a wait of the cycle)
    out = run_program(VALUE_CYCLE, env={"ASCENTRT_BACKEND": backend, "ASCENTRT_CALL_SITES": "1",
                                        "ASCENTRT_LEAK_CHECK": "off"}, timeout=60)
    head, text = out.strip().split("\n", 1)
    code, s1, s2, s3 = head.split()
    assert code == "507950"
    assert f"stream {s2} (device 0) waits at task 1 (queued at " in text and "for w >= 1 -> " \
        f"stream {s3} (device 0) waits at task 1" in text
    assert f"-> stream {s1} (device 0) waits at task 1" in text and f"back to stream {s2}" in text
    assert f"the write of its word is queued on stream {s3} (task 2, queued at " in text
    assert "no work queued on any stream can run" not in text
