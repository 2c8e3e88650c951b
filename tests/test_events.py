"""Events and timeouts: elapsed time, synchronize/query/reset/destroy, timeout codes (semantics 2, 8)."""

import math
import threading
import time

import pytest

import ascentrt as art


def _blocked(stream):
    """Hold `stream` with a kernel until the returned gate is set."""
    gate = threading.Event()
    art.launch(lambda: gate.wait(20), stream=stream)
    return gate


@pytest.mark.cpu_only
@pytest.mark.serial  # (a duration in wall time: alone, after the rest)
def test_elapsed_time_measures_the_work_between_two_records(dev, stream):
    start, end = dev.create_event(timing=True), dev.create_event(timing=True)
    start.record(stream)
    art.launch(lambda: time.sleep(0.02), stream=stream)
    end.record(stream)
    end.synchronize(timeout=10)
    ms = art.elapsed_time(start, end)
    assert 15.0 <= ms < 5000.0


def test_elapsed_time_of_back_to_back_records_is_small_and_not_negative(dev, stream):
    start, end = dev.create_event(timing=True), dev.create_event(timing=True)
    start.record(stream)
    end.record(stream)
    stream.synchronize(timeout=10)
    assert 0.0 <= art.elapsed_time(start, end) < 1000.0


def test_elapsed_time_without_timing_raises_timestamp_invalid(dev, stream):
    start, end = dev.create_event(timing=False), dev.create_event(timing=True)
    start.record(stream), end.record(stream)
    stream.synchronize(timeout=10)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.elapsed_time(start, end)
    assert err.value.code == art.ErrorCode.RT_EVENT_TIMESTAMP_INVALID


def test_elapsed_time_of_a_never_recorded_event_raises(dev, stream):
    start, end = dev.create_event(timing=True), dev.create_event(timing=True)
    start.record(stream)
    stream.synchronize(timeout=10)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.elapsed_time(start, end)
    assert err.value.code == art.ErrorCode.RT_EVENT_TIMESTAMP_INVALID


@pytest.mark.cpu_only
def test_elapsed_time_of_a_not_completed_record_raises(dev, stream):
    start, end = dev.create_event(timing=True), dev.create_event(timing=True)
    start.record(stream)
    gate = _blocked(stream)
    end.record(stream)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.elapsed_time(start, end)
    assert err.value.code == art.ErrorCode.RT_EVENT_TIMESTAMP_INVALID
    gate.set()
    end.synchronize(timeout=10)
    assert art.elapsed_time(start, end) >= 0.0


def test_elapsed_time_takes_events(dev):
    with pytest.raises(art.InvalidArgumentError):
        art.elapsed_time(1, 2)


@pytest.mark.cpu_only
def test_event_query_and_synchronize_follow_the_recorded_work(dev, stream):
    ev = dev.create_event()
    assert ev.query() and not ev.recorded     # never recorded: nothing to wait for
    gate = _blocked(stream)
    ev.record(stream)
    assert ev.recorded and not ev.query()
    gate.set()
    ev.synchronize(timeout=10)
    assert ev.query()


@pytest.mark.cpu_only
def test_event_synchronize_ignores_work_submitted_after_the_record(dev, stream):
    ev = dev.create_event()
    art.launch(art.kernels.noop, stream=stream)
    ev.record(stream)
    gate = _blocked(stream)
    ev.synchronize(timeout=10)                # does not wait for the blocked kernel
    assert not stream.query()
    gate.set()


def test_event_reset_forgets_the_record(dev, stream):
    ev = dev.create_event()
    ev.record(stream)
    ev.reset()
    assert not ev.recorded and ev.query()
    with pytest.raises(art.InvalidArgumentError):
        stream.wait(ev)


def test_a_reset_on_a_stream_runs_in_its_order_and_until_then_the_record_stands(dev, stream):
    held, other = dev.create_stream(), dev.create_stream()
    n = art.Notify(dev)
    ev = dev.create_event(timing=True)
    order = []
    held.wait_notify(n)                       # held until the notify is recorded
    art.launch(order.append, "recorded work", stream=held)
    ev.record(held)
    stream.wait(ev)
    ev.reset(stream)                          # queued behind the wait: it cannot run yet
    assert ev.recorded and not ev.query()
    with pytest.raises(art.AscentTimeoutError):
        ev.synchronize(timeout=0.05)          # still the recorded work, not done
    with pytest.raises(art.InvalidArgumentError, match="not completed"):
        ev.timestamp_ns
    other.wait(ev)                            # a wait queued before the reset ran: on the record
    art.launch(order.append, "after the wait", stream=other)
    dev.create_stream().record_notify(n)
    other.synchronize(timeout=10)
    stream.synchronize(timeout=10)
    assert order == ["recorded work", "after the wait"]
    assert not ev.recorded and ev.query()     # the reset ran: never recorded
    with pytest.raises(art.InvalidArgumentError):
        stream.wait(ev)
    with pytest.raises(art.InvalidArgumentError, match="never recorded"):
        ev.timestamp_ns
    for s in (held, other):
        s.destroy()


def test_a_reset_queued_before_a_new_record_does_not_undo_it(dev, stream):
    held = dev.create_stream()
    n = art.Notify(dev)
    ev = dev.create_event()
    ev.record(stream)
    held.wait_notify(n)
    ev.reset(held)                            # pending behind the notify wait
    ev.record(stream)                         # a new record: the pending reset is about the old one
    dev.create_stream().record_notify(n)
    held.synchronize(timeout=10)
    stream.synchronize(timeout=10)
    assert ev.recorded
    stream.wait(ev)
    held.destroy()


def test_an_event_reset_cannot_be_captured(dev, stream):
    ev = dev.create_event()
    ev.record(dev.create_stream())
    stream.begin_capture()
    with pytest.raises(art.NotSupportedError):
        ev.reset(stream)
    with pytest.raises(art.CaptureError):
        stream.end_capture()                  # invalidated
    assert ev.recorded


@pytest.mark.cpu_only
def test_rerecording_an_event_moves_it_to_the_new_point(dev, stream):
    ev = dev.create_event()
    ev.record(stream)
    ev.synchronize(timeout=10)
    gate = _blocked(stream)
    ev.record(stream)
    assert not ev.query()
    gate.set()
    ev.synchronize(timeout=10)
    assert ev.query()


def test_destroyed_event_raises_invalid_handle(dev, stream):
    ev = dev.create_event()
    ev.record(stream)
    ev.destroy()
    for use in (ev.query, ev.synchronize, ev.reset, ev.destroy, lambda: ev.record(stream),
                lambda: stream.wait(ev)):
        with pytest.raises(art.InvalidHandleError) as err:
            use()
        assert err.value.code == art.ErrorCode.RT_INVALID_HANDLE


@pytest.mark.cpu_only
def test_event_destroyed_after_record_still_completes_its_waiters(dev):
    a, b = dev.create_stream(), dev.create_stream()
    gate = _blocked(a)
    ev = a.record()
    b.wait(ev)
    ev.destroy()
    done = []
    art.launch(lambda: done.append(1), stream=b)
    gate.set()
    b.synchronize(timeout=10)
    assert done == [1]
    a.destroy(), b.destroy()


def test_event_context_manager_destroys_it(dev):
    with dev.create_event() as ev:
        pass
    with pytest.raises(art.InvalidHandleError):
        ev.query()


@pytest.mark.cpu_only
def test_stream_synchronize_timeout_raises_507046(stream):
    gate = _blocked(stream)
    t0 = time.monotonic()
    with pytest.raises(art.AscentTimeoutError) as err:
        stream.synchronize(timeout=0.05)
    assert err.value.code == art.ErrorCode.RT_STREAM_SYNC_TIMEOUT == 507046
    assert time.monotonic() - t0 < 10
    gate.set()
    stream.synchronize(timeout=10)            # usable afterwards


@pytest.mark.cpu_only
def test_event_synchronize_timeout_raises_507047(dev, stream):
    gate = _blocked(stream)
    ev = stream.record()
    with pytest.raises(art.AscentTimeoutError) as err:
        ev.synchronize(timeout=0.05)
    assert err.value.code == art.ErrorCode.RT_EVENT_SYNC_TIMEOUT == 507047
    gate.set()
    ev.synchronize(timeout=10)


@pytest.mark.cpu_only
def test_device_synchronize_timeout_raises_507046(dev, stream):
    gate = _blocked(stream)
    with pytest.raises(art.AscentTimeoutError) as err:
        dev.synchronize(timeout=0.05)
    assert err.value.code == art.ErrorCode.RT_STREAM_SYNC_TIMEOUT
    gate.set()
    dev.synchronize(timeout=10)


@pytest.mark.cpu_only
def test_a_timeout_is_also_a_builtin_timeout_error(stream):
    gate = _blocked(stream)
    with pytest.raises(TimeoutError):
        stream.synchronize(timeout=0.02)
    gate.set()


BAD_TIMEOUTS = [0, -1, -0.5, math.nan, "1", True, [1]]


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=repr)
def test_bad_timeouts_raise_107000_everywhere(dev, stream, timeout):
    ev = stream.record()
    notify = dev.create_notify()
    calls = [lambda: stream.synchronize(timeout=timeout), lambda: ev.synchronize(timeout=timeout),
             lambda: dev.synchronize(timeout=timeout), lambda: art.synchronize(timeout),
             lambda: notify.wait_and_reset(stream, timeout=timeout),
             lambda: art.set_wait_timeout(timeout)]
    for call in calls:
        with pytest.raises(art.InvalidArgumentError) as err:
            call()
        assert err.value.code == art.ErrorCode.RT_PARAM_INVALID == 107000
    assert stream.pending == 0                # nothing was queued by a rejected wait


def test_infinite_timeout_means_wait_forever(stream):
    art.launch(art.kernels.noop, stream=stream)
    stream.synchronize(timeout=math.inf)
    assert stream.query()


@pytest.mark.cpu_only
def test_device_side_event_wait_timeout_fails_the_wait_with_107019(dev):
    a, b = dev.create_stream(), dev.create_stream()
    gate = _blocked(a)
    ev = a.record()
    art.set_wait_timeout(0.05)
    try:
        b.wait(ev)
    finally:
        art.set_wait_timeout(None)
    ran = []
    art.launch(lambda: ran.append(1), stream=b)
    with pytest.raises(art.AscentError) as err:
        b.synchronize(timeout=10)
    assert err.value.code == art.ErrorCode.RT_WAIT_TIMEOUT == 107019
    assert ran == [1]                         # CONTINUE: the stream went on after the failed wait
    gate.set()
    a.destroy(), b.destroy()


def test_elapsed_time_refuses_events_of_two_devices_and_is_negative_when_reversed():
    # (events of two devices gave a number from two clocks; pyACL refuses a reversed pair)
    from subprocess_util import run_program
    out = run_program('''
        import ascentrt as art
        from ascentrt import acl
        d0, d1 = art.set_device(0), art.Device(1)
        s0, s1 = d0.create_stream(), d1.create_stream()
        a, b, c = art.Event(d0, timing=True), art.Event(d1, timing=True), art.Event(d0, timing=True)
        a.record(s0); b.record(s1); s0.synchronize(); s1.synchronize()
        c.record(s0); s0.synchronize()
        try:
            art.elapsed_time(a, b)
        except art.AscentError as e:
            print(int(e.code))
        print(art.elapsed_time(c, a) < 0 < art.elapsed_time(a, c))
        acl.init(); acl.rt.set_device(0)
        e1, _ = acl.rt.create_event(); e2, _ = acl.rt.create_event()
        acl.rt.record_event(e1, 0); acl.rt.synchronize_stream(0)
        acl.rt.record_event(e2, 0); acl.rt.synchronize_stream(0)
        print(acl.rt.event_elapsed_time(e2, e1)[1], acl.rt.event_elapsed_time(e1, e2)[1])
    ''', env={"ASCENTRT_DEVICES": "2", "ASCENTRT_LEAK_CHECK": "off"}, timeout=60)
    assert out.split() == ["107006", "True", "107007", "0"]



def test_elapsed_time_on_a_reset_event_allows_for_the_reset(dev, stream):
    ev = art.Event(dev, timing=True)
    ev.record(stream)
    stream.synchronize(timeout=5)
    ev.reset()
    with pytest.raises(art.InvalidArgumentError, match=r"event \d+ was never recorded \(or a reset of it ran\)"):
        art.elapsed_time(ev, ev)
