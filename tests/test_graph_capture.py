"""Stream capture: what is recorded, every capture-time error with its code, no side effects."""

import threading

import numpy as np
import pytest

import ascentrt as art
from ascentrt import CaptureMode, CaptureStatus, ErrorCode

T = 10.0  # timeout of every wait in these tests


def _fill(out, value):
    out[...] = value


@pytest.fixture
def streams(dev):
    made = [dev.create_stream() for _ in range(3)]
    yield made
    for s in made:
        if s._capture is not None:  # a test that failed mid-capture must not leak it
            try:
                s._capture.origin.end_capture()
            except art.AscentError:
                pass
        s.destroy(force=True)


@pytest.fixture
def buf(dev):
    b = art.malloc(256)
    b.numpy(np.float32)[:] = 0
    yield b
    b.free()


def _code(excinfo) -> int:
    return int(excinfo.value.code)


def _assert_released(*streams):
    for s in streams:
        assert s.capture_status() == CaptureStatus.NONE
        assert s._capture is None


# ---- recording ---------------------------------------------------------------------------------

def test_captured_work_does_not_run_until_launched(streams, buf):
    s = streams[0]
    s.begin_capture()
    assert s.capture_status() == CaptureStatus.ACTIVE
    art.launch(_fill, buf.view(np.float32), 7.0, stream=s)
    assert s._submitted == 0 and s.pending == 0
    graph = s.end_capture()
    _assert_released(s)
    assert graph.num_nodes == 1
    assert buf.numpy(np.float32)[0] == 0
    graph.launch(s)
    s.synchronize(T)
    assert np.all(buf.numpy(np.float32) == 7.0)


def test_fork_join_across_three_streams_replays_in_dependency_order(streams, buf):
    s0, s1, s2 = streams
    order = []
    x = buf.view(np.float32)
    s0.begin_capture()
    art.launch(lambda: order.append("head"), stream=s0)
    fork = s0.record()
    s1.wait(fork)
    s2.wait(fork)
    art.launch(lambda: order.append("left"), stream=s1)
    art.launch(lambda: order.append("right"), stream=s2)
    s0.wait(s1.record())
    s0.wait(s2.record())
    art.launch(lambda: order.append("tail"), stream=s0)
    art.launch(_fill, x, 1.0, stream=s0)
    graph = s0.end_capture()
    _assert_released(s0, s1, s2)
    assert graph.plan_summary()["lanes"] == 3
    for _ in range(3):
        graph.launch(s0)
    s0.synchronize(T)
    assert len(order) == 12
    for k in range(3):
        run = order[4 * k:4 * k + 4]
        assert run[0] == "head" and run[3] == "tail" and set(run[1:3]) == {"left", "right"}


def test_capture_mode_must_be_known(streams):
    with pytest.raises(art.AscentError) as e:
        streams[0].begin_capture(7)
    assert _code(e) == ErrorCode.RT_CAPTURE_MODE_NOT_SUPPORT
    _assert_released(streams[0])


def test_begin_capture_twice_is_refused(streams):
    s = streams[0]
    s.begin_capture()
    with pytest.raises(art.CaptureError) as e:
        s.begin_capture()
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    s.end_capture()


# ---- errors during capture, and what they leave behind -------------------------------------------

def _invalidated_then_clean(s, buf, *others):
    """After an invalidating error: later work is refused, end_capture raises, nothing ran."""
    with pytest.raises(art.CaptureError) as e:
        art.launch(_fill, buf.view(np.float32), 9.0, stream=s)
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURE_INVALIDATED
    assert s.capture_status() == CaptureStatus.INVALIDATED
    origin = s._capture.origin
    with pytest.raises(art.CaptureError) as e:
        origin.end_capture()
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURE_INVALIDATED
    _assert_released(s, origin, *others)
    assert np.all(buf.numpy(np.float32) == 0)
    for x in (s, origin, *others):
        assert x.pending == 0
    art.launch(_fill, buf.view(np.float32), 3.0, stream=s)  # the stream works eagerly again
    s.synchronize(T)
    assert np.all(buf.numpy(np.float32) == 3.0)


def test_synchronize_of_a_captured_stream_is_107027_and_invalidates(streams, buf):
    s = streams[0]
    s.begin_capture()
    art.launch(_fill, buf.view(np.float32), 5.0, stream=s)
    with pytest.raises(art.CaptureError) as e:
        s.synchronize(T)
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    _invalidated_then_clean(s, buf)


def test_query_of_a_captured_stream_is_107027_and_invalidates(streams, buf):
    s = streams[0]
    s.begin_capture()
    with pytest.raises(art.CaptureError) as e:
        s.query()
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    _invalidated_then_clean(s, buf)


def test_synchronizing_a_forked_stream_invalidates_the_whole_capture(streams, buf):
    s0, s1, _ = streams
    s0.begin_capture()
    s1.wait(s0.record())
    with pytest.raises(art.CaptureError) as e:
        s1.synchronize(T)
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    _invalidated_then_clean(s1, buf, s0)


@pytest.mark.parametrize("on", ["origin", "forked"])
@pytest.mark.parametrize("how", ["free_async", "free_stream"])
def test_a_stream_ordered_free_on_a_captured_stream_is_107027_and_frees_nothing(streams, buf, on, how):
    # (it freed the buffer at once: a malloc_async later in the capture got the same block, and
    # end_capture failed with 107017 without a word of the capture)
    s0, s1, _ = streams
    m = art.malloc_async(4096, stream=s0)
    s0.begin_capture()
    s = s0
    if on == "forked":
        s1.wait(s0.record())
        s = s1
    art.memset_async(m, 7, stream=s)
    with pytest.raises(art.CaptureError) as e:
        art.free_async(m, stream=s) if how == "free_async" else m.free(stream=s)
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED and "captured" in str(e.value)
    assert m.alive
    other = art.malloc_async(4096, stream=s)   # (its block is not the one still in use)
    assert other.ptr != m.ptr
    _invalidated_then_clean(s, buf, s0)
    m.free(), other.free()


def test_a_buffer_freed_during_a_capture_fails_end_capture_naming_the_capture(streams):
    s = streams[0]
    b = art.malloc(4096)
    s.begin_capture()
    art.memset_async(b, 1, stream=s)
    b.free()                                   # (not stream-ordered: it waits for no capture)
    with pytest.raises(art.InvalidHandleError) as e:
        s.end_capture()
    assert _code(e) == ErrorCode.RT_INVALID_HANDLE and "before end_capture" in str(e.value)
    assert s._capture is None


def test_synchronous_memcpy_in_global_mode_is_refused(streams, buf):
    s = streams[0]
    s.begin_capture(CaptureMode.GLOBAL)
    host = np.ones(64, np.float32)
    with pytest.raises(art.CaptureError) as e:
        art.memcpy(buf, host)
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    _invalidated_then_clean(s, buf)


def test_pageable_memcpy_async_in_global_mode_is_refused(streams, buf):
    s = streams[0]
    s.begin_capture()
    with pytest.raises(art.CaptureError) as e:
        art.memcpy_async(buf, np.ones(64, np.float32), stream=s)
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    _invalidated_then_clean(s, buf)


def _in_thread(fn):
    out = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed back to the test thread
            out["error"] = exc
    t = threading.Thread(target=body)
    t.start()
    t.join(T)
    assert not t.is_alive()
    return out


def test_global_capture_refuses_unsafe_calls_in_other_threads(streams, buf):
    s = streams[0]
    s.begin_capture(CaptureMode.GLOBAL)
    out = _in_thread(lambda: art.memcpy(buf, np.ones(64, np.float32)))
    assert isinstance(out.get("error"), art.CaptureError)
    assert out["error"].code == ErrorCode.RT_STREAM_CAPTURED
    _invalidated_then_clean(s, buf)


def test_thread_local_capture_allows_other_threads_only(streams, buf):
    s = streams[0]
    s.begin_capture(CaptureMode.THREAD_LOCAL)
    out = _in_thread(lambda: art.memcpy(buf, np.full(64, 2, np.float32)))
    assert "error" not in out
    assert s.capture_status() == CaptureStatus.ACTIVE
    with pytest.raises(art.CaptureError) as e:
        art.memcpy(buf, np.ones(64, np.float32))
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    with pytest.raises(art.CaptureError):
        s.end_capture()
    _assert_released(s)


def test_relaxed_capture_allows_unsafe_calls_and_captures_pageable_copies(streams, buf):
    s = streams[0]
    s.begin_capture(CaptureMode.RELAXED)
    src = np.arange(64, dtype=np.float32)
    art.memcpy(buf, np.zeros(64, np.float32))   # runs now: RELAXED does not forbid it
    art.memcpy_async(buf, src, stream=s)        # recorded, not run
    graph = s.end_capture()
    assert np.all(buf.numpy(np.float32) == 0)
    graph.launch(s)
    s.synchronize(T)
    assert np.array_equal(buf.numpy(np.float32), src)


def test_device_synchronize_during_global_capture_is_refused(dev, streams, buf):
    s = streams[0]
    s.begin_capture()
    with pytest.raises(art.CaptureError) as e:
        dev.synchronize(T)
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURED
    _invalidated_then_clean(s, buf)


def test_fork_that_never_joins_is_107025_and_nothing_runs(streams, buf):
    s0, s1, _ = streams
    s0.begin_capture()
    s1.wait(s0.record())
    art.launch(_fill, buf.view(np.float32), 4.0, stream=s1)
    with pytest.raises(art.CaptureError) as e:
        s0.end_capture()
    assert _code(e) == ErrorCode.RT_STREAM_UNJOINED
    _assert_released(s0, s1)
    assert np.all(buf.numpy(np.float32) == 0)
    assert s0.pending == 0 and s1.pending == 0


def test_work_after_the_join_point_counts_as_unjoined(streams, buf):
    s0, s1, _ = streams
    s0.begin_capture()
    s1.wait(s0.record())
    art.launch(_fill, buf.view(np.float32), 1.0, stream=s1)
    s0.wait(s1.record())
    art.launch(_fill, buf.view(np.float32), 2.0, stream=s1)  # after the join: never waited on
    with pytest.raises(art.CaptureError) as e:
        s0.end_capture()
    assert _code(e) == ErrorCode.RT_STREAM_UNJOINED


def test_end_capture_of_a_stream_not_capturing_is_107029(streams):
    with pytest.raises(art.CaptureError) as e:
        streams[0].end_capture()
    assert _code(e) == ErrorCode.RT_STREAM_NOT_CAPTURED


def test_end_capture_on_a_forked_stream_is_107036(streams):
    s0, s1, _ = streams
    s0.begin_capture()
    s1.wait(s0.record())
    with pytest.raises(art.CaptureError) as e:
        s1.end_capture()
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURE_UNMATCHED
    s0.wait(s1.record())
    s0.end_capture()  # the capture itself is intact
    _assert_released(s0, s1)


def test_end_capture_from_another_thread_is_107038_unless_relaxed(streams):
    s = streams[0]
    s.begin_capture(CaptureMode.THREAD_LOCAL)
    out = _in_thread(s.end_capture)
    assert out["error"].code == ErrorCode.RT_STREAM_CAPTURE_WRONG_THREAD
    assert s.capture_status() == CaptureStatus.ACTIVE
    s.end_capture()
    s.begin_capture(CaptureMode.RELAXED)
    out = _in_thread(s.end_capture)
    assert isinstance(out.get("value"), art.Graph)


def test_a_thread_with_the_id_of_the_ended_capturing_thread_is_another_thread(streams):
    # (a THREAD_LOCAL capture took a new thread with the ended one's id for its own)
    s = streams[0]
    began = []
    t = threading.Thread(target=lambda: began.append(s.begin_capture(CaptureMode.THREAD_LOCAL)))
    t.start()
    t.join(10)
    assert began and s.capture_status() == CaptureStatus.ACTIVE
    out = {}
    for _ in range(50):                      # a thread Python gives the ended one's id
        other = threading.Thread(target=lambda: out.update(ident=threading.get_ident(),
                                                           result=_call(s.end_capture)))
        other.start()
        other.join(10)
        if out["ident"] == t.ident or s.capture_status() != CaptureStatus.ACTIVE:
            break
    if out["ident"] != t.ident:
        pytest.skip("Python gave no new thread the ended one's id")
    assert out["result"].code == ErrorCode.RT_STREAM_CAPTURE_WRONG_THREAD
    assert s.capture_status() == CaptureStatus.ACTIVE


def _call(fn):
    try:
        return fn()
    except Exception as exc:
        return exc


def test_waiting_on_an_event_recorded_outside_the_capture_is_107024(streams, buf):
    s0, s1, _ = streams
    outside = s1.record()
    s0.begin_capture()
    with pytest.raises(art.CaptureError) as e:
        s0.wait(outside)
    assert _code(e) == ErrorCode.RT_CAPTURE_DEPENDENCY
    _invalidated_then_clean(s0, buf)


def test_host_calls_on_a_captured_event_are_107028(streams, buf):
    s = streams[0]
    s.begin_capture()
    ev = s.record()
    with pytest.raises(art.CaptureError) as e:
        ev.query()
    assert _code(e) == ErrorCode.RT_EVENT_CAPTURED
    with pytest.raises(art.CaptureError) as e:
        ev.synchronize(T)
    assert _code(e) == ErrorCode.RT_EVENT_CAPTURED
    _invalidated_then_clean(s, buf)


def test_waiting_on_a_captured_event_after_the_capture_is_107028(streams):
    s0, s1, _ = streams
    s0.begin_capture()
    ev = s0.record()
    s0.end_capture()
    with pytest.raises(art.CaptureError) as e:
        s1.wait(ev)
    assert _code(e) == ErrorCode.RT_EVENT_CAPTURED
    assert s1.pending == 0
    ev.record(s0)  # recording it again outside the capture makes it usable
    s1.wait(ev)
    s1.synchronize(T)


def test_notifies_cannot_be_captured(dev, streams, buf):
    s = streams[0]
    n = dev.create_notify()
    s.begin_capture()
    with pytest.raises(art.NotSupportedError):
        s.record_notify(n)
    _invalidated_then_clean(s, buf)


def test_graph_launch_into_a_capturing_stream_is_refused(streams):
    s0, s1, _ = streams
    s0.begin_capture()
    g = s0.end_capture()
    s1.begin_capture()
    with pytest.raises(art.NotSupportedError):
        g.launch(s1)
    s1.end_capture()


def test_task_groups_are_marked_only_while_capturing_and_must_be_closed(streams, buf):
    s = streams[0]
    with pytest.raises(art.CaptureError) as e:
        s.begin_task_group()
    assert _code(e) == ErrorCode.RT_STREAM_NOT_CAPTURED
    s.begin_capture()
    with pytest.raises(art.CaptureError) as e:
        s.end_task_group()
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURE_UNMATCHED
    s.begin_task_group()
    art.launch(_fill, buf.view(np.float32), 1.0, stream=s)
    with pytest.raises(art.CaptureError) as e:
        s.end_capture()  # the group was never ended: the capture is discarded
    assert _code(e) == ErrorCode.RT_STREAM_CAPTURE_UNMATCHED
    _assert_released(s)
    assert np.all(buf.numpy(np.float32) == 0)


def test_execute_times_out_with_a_code_instead_of_hanging(streams):
    s = streams[0]
    gate = threading.Event()
    s.begin_capture()
    art.launch_host_func(gate.wait, T, stream=s)
    g = s.end_capture()
    with pytest.raises(art.AscentTimeoutError) as e:
        g.execute(timeout=0.2)
    assert _code(e) == ErrorCode.RT_STREAM_SYNC_TIMEOUT
    gate.set()
    g.synchronize(T)
    g.destroy()


def test_timing_a_captured_event_gets_the_captured_event_error(dev):
    # (elapsed_time said "not completed yet", 107006, which would never change)
    s = dev.create_stream()
    a, b = art.Event(timing=True), art.Event(timing=True)
    s.begin_capture()
    a.record(s)
    art.launch(lambda: None, stream=s)
    b.record(s)
    g = s.end_capture()
    g.launch(s)
    s.synchronize(timeout=30)
    for call in (lambda: art.elapsed_time(a, b), lambda: b.timestamp_ns):
        with pytest.raises(art.AscentError) as err:
            call()
        assert err.value.code == art.ErrorCode.RT_EVENT_CAPTURED


def test_destroying_a_stream_that_joined_a_capture_is_refused_as_a_destroy(dev):
    # (the refusal named a synchronize the program never called)
    s, joined = dev.create_stream(), dev.create_stream()
    s.begin_capture(art.CaptureMode.GLOBAL)
    joined.wait(s.record())
    with pytest.raises(art.CaptureError) as err:
        joined.destroy()
    assert err.value.code == art.ErrorCode.RT_STREAM_CAPTURED
    assert str(err.value).split("] ", 1)[1].startswith(f"destroy of stream {joined.id} while it is being captured")
    with pytest.raises(art.AscentError):
        s.end_capture()  # (invalidated)
    joined.destroy()
    s.destroy()
