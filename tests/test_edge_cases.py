"""Edge cases found in review: huge timeouts, wait clocks, reset, non-blocking errors, odd inputs."""

import threading
import time

import numpy as np
import pytest

import ascentrt as art
from subprocess_util import run_program


def test_a_huge_device_side_timeout_means_forever_and_later_timeouts_still_fire(dev, stream):
    forever = dev.create_notify()
    stream.wait_notify(forever, timeout=1e308)   # beyond what threading can wait: forever
    other = dev.create_stream()
    try:
        other.wait_notify(dev.create_notify(), timeout=0.05)
        with pytest.raises(art.TaskError) as err:
            other.synchronize(timeout=10)
        assert err.value.code == art.ErrorCode.RT_WAIT_TIMEOUT
        forever.record(other)
        stream.synchronize(timeout=10)
    finally:
        other.destroy(force=True)


def test_a_device_side_wait_timeout_counts_from_when_the_wait_starts(dev, stream):
    notify = dev.create_notify()
    art.launch(time.sleep, 1.0, stream=stream)        # the wait starts blocking after ~1 s
    stream.wait_notify(notify, timeout=0.5)
    recorder = dev.create_stream()
    try:
        art.launch(time.sleep, 1.2, stream=recorder)  # recorded ~0.2 s into the wait
        notify.record(recorder)
        stream.synchronize(timeout=10)                # no timeout error: 0.2 s < 0.5 s
    finally:
        recorder.destroy(force=True)


def test_timeouts_are_checked_as_numbers():
    with pytest.raises(art.InvalidArgumentError) as err:
        art.default_stream().synchronize(timeout=float("nan"))
    assert err.value.code == art.ErrorCode.RT_PARAM_INVALID


def test_device_reset_lets_a_stopped_default_stream_take_work_again(dev):
    s = dev.default_stream
    s.set_failure_mode(art.FailureMode.STOP)
    art.launch(lambda: 1 / 0, stream=s)
    with pytest.raises(art.TaskError):
        s.synchronize(timeout=10)
    with pytest.raises(art.StreamStateError):
        art.launch(art.kernels.noop, stream=s)
    dev.reset()
    art.launch(art.kernels.noop, stream=s)
    s.synchronize(timeout=10)
    assert s.failure_mode == art.FailureMode.CONTINUE


def test_a_failing_non_blocking_host_function_is_reported_on_its_own_stream(stream):
    def broken():
        raise RuntimeError("late failure")
    task_id = art.launch_host_func(broken, stream=stream, blocking=False)
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=10)
        art.current_device().synchronize(timeout=10)  # the host function may still be running
        stream.synchronize(timeout=10)
    assert err.value.info.stream_id == stream.id
    assert err.value.info.task_id == task_id


def test_waiting_on_a_completed_event_from_a_stopped_stream_is_refused(dev):
    s = dev.create_stream(stop_on_failure=True)
    try:
        done = dev.default_stream.record()
        done.synchronize(timeout=10)
        art.launch(lambda: 1 / 0, stream=s)
        with pytest.raises(art.TaskError):
            s.synchronize(timeout=10)
        with pytest.raises(art.StreamStateError):
            s.wait(done)
    finally:
        s.destroy(force=True)


def test_stream_priority_and_failure_flag_are_validated(dev):
    s = dev.create_stream(priority=3)
    try:
        assert s.priority == 3
        with pytest.raises(AttributeError):
            s.priority = 0  # fixed at creation: the ready queues index by it
    finally:
        s.destroy()
    with pytest.raises(art.InvalidArgumentError):
        dev.create_stream(stop_on_failure="no")


@pytest.mark.parametrize("dtype, shape", [("foo", None), (object, None), (np.uint8, 3.0),
                                          (np.uint8, "4")])
def test_buffer_views_reject_odd_dtypes_and_shapes(dtype, shape):
    buf = art.malloc(64)
    try:
        with pytest.raises(art.InvalidArgumentError):
            buf.numpy(dtype, shape)
        with pytest.raises(art.InvalidArgumentError):
            buf.view(dtype, shape)
    finally:
        buf.free()


def test_copies_reject_strided_and_read_only_python_buffers():
    buf = art.malloc(64)
    try:
        with pytest.raises(art.InvalidArgumentError):
            art.memcpy(buf, memoryview(bytearray(128))[::2])
        with pytest.raises(art.InvalidArgumentError):
            art.memcpy(memoryview(b"x" * 64), buf)
    finally:
        buf.free()


def test_a_pool_miss_that_is_then_served_leaves_no_last_error():
    out = run_program("""
        import ascentrt as art
        art.get_last_error()
        art.malloc(2 << 20).free()
        b = art.malloc(3 << 20)       # the cached 2 MiB chunk is released and the range reused
        print(art.get_last_error())
    """, env={"ASCENTRT_DEVICE_MEMORY": "4M"})
    assert out.strip() == "0"


def test_the_watchdog_survives_many_early_ending_timed_waits(dev, stream):
    other = dev.create_stream()
    try:
        for _ in range(300):  # each wait ends long before its deadline
            n = dev.create_notify()
            n.record(other)
            stream.wait_notify(n, timeout=600)
        stream.synchronize(timeout=30)
        stream.wait_notify(dev.create_notify(), timeout=0.05)
        with pytest.raises(art.TaskError):
            stream.synchronize(timeout=10)
    finally:
        other.destroy(force=True)


def test_a_thread_can_use_a_buffer_from_another_thread(dev, stream):
    buf = art.malloc(1024)
    seen = []

    def worker():
        art.memset(buf, 7)
        seen.append(int(buf.numpy()[0]))

    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert seen == [7]
    buf.free()


def test_dropped_graphs_give_their_streams_back(dev):
    import gc
    s = dev.create_stream()
    before = len(dev._dq.streams)
    try:
        for _ in range(30):
            s.begin_capture(art.CaptureMode.GLOBAL)
            side = dev.create_stream()
            fork = s.record()
            side.wait(fork)
            art.launch(art.kernels.noop, stream=side)
            s.wait(side.record())
            graph = s.end_capture()
            graph.execute(timeout=10)
            side.destroy()
            del graph
            gc.collect()
        # Released lazily (at the next instantiation), so a few remain: a constant, not 2 per graph.
        assert len(dev._dq.streams) <= before + 8
    finally:
        s.destroy(force=True)
