"""Host functions: they run after the work before them; blocking ones hold back the stream (semantics 4)."""

import threading
import time

import numpy as np
import pytest

import ascentrt as art


def test_host_func_runs_after_the_work_before_it_with_its_args(stream):
    buf = art.malloc(64)
    seen = []
    art.launch(art.kernels.fill, buf.view(np.int32), 7, stream=stream)
    art.launch_host_func(lambda b, tag: seen.append((tag, int(b.numpy(np.int32)[0]))), buf, "x",
                         stream=stream)
    stream.synchronize(timeout=10)
    assert seen == [("x", 7)]
    buf.free()


def test_host_func_runs_on_a_host_executor_thread_not_the_caller(stream):
    where = []
    art.launch_host_func(lambda: where.append(threading.current_thread().name), stream=stream)
    stream.synchronize(timeout=10)
    assert where and where[0] != threading.current_thread().name
    assert "host" in where[0]


def test_blocking_host_func_holds_back_later_tasks_of_the_stream(stream):
    gate = threading.Event()
    entered = threading.Event()
    log = []

    def host():
        entered.set()
        gate.wait(10)
        log.append("host")

    art.launch_host_func(host, stream=stream, blocking=True)
    art.launch(lambda: log.append("kernel"), stream=stream)
    assert entered.wait(10)
    with pytest.raises(art.AscentTimeoutError):
        stream.synchronize(timeout=0.05)   # the kernel cannot start while host() blocks
    assert log == []
    gate.set()
    stream.synchronize(timeout=10)
    assert log == ["host", "kernel"]


@pytest.mark.cpu_only
def test_non_blocking_host_func_lets_later_tasks_go_on(stream):
    gate = threading.Event()
    log = []
    art.launch_host_func(lambda: (gate.wait(10), log.append("host")), stream=stream, blocking=False)
    art.launch(lambda: log.append("kernel"), stream=stream)
    stream.synchronize(timeout=10)          # does not wait for the host function
    assert log == ["kernel"]
    gate.set()
    art.synchronize(timeout=10)             # the device waits for it
    assert log == ["kernel", "host"]


@pytest.mark.cpu_only
def test_non_blocking_host_func_still_runs_after_the_work_before_it(stream):
    log = []
    art.launch(lambda: (time.sleep(0.02), log.append("kernel")), stream=stream)
    art.launch_host_func(lambda: (time.sleep(0.02), log.append("host")), stream=stream,
                         blocking=False)
    # The device synchronize starts while the kernel still runs, before the host function has
    # been handed on: it must still wait for it.
    art.synchronize(timeout=10)
    assert log == ["kernel", "host"]


def test_error_in_a_blocking_host_func_surfaces_at_synchronize(stream):
    def broken():
        raise ValueError("host side broke")

    task_id = art.launch_host_func(broken, stream=stream)
    ran = []
    art.launch(lambda: ran.append(1), stream=stream)
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=10)
    info = err.value.info
    assert err.value.code == art.ErrorCode.RT_AICPU_EXCEPTION
    assert (info.stream_id, info.task_id, info.task_name) == (stream.id, task_id, "broken")
    assert isinstance(info.cause, ValueError) and isinstance(err.value.__cause__, ValueError)
    assert ran == [1]                        # CONTINUE mode: the stream went on
    art.get_last_error()


def test_error_in_a_non_blocking_host_func_surfaces_at_device_synchronize(stream):
    def broken():
        raise RuntimeError("detached broke")

    art.get_last_error()
    art.launch_host_func(broken, stream=stream, blocking=False)
    with pytest.raises(art.TaskError) as err:
        art.synchronize(timeout=10)
    assert isinstance(err.value.info.cause, RuntimeError)
    assert err.value.info.task_name == "broken"
    art.synchronize(timeout=10)              # reported once
    art.get_last_error()


def test_host_func_takes_a_callable(stream):
    with pytest.raises(art.InvalidArgumentError):
        art.launch_host_func(42, stream=stream)
    assert stream.pending == 0


def test_host_func_synchronizing_its_own_stream_is_refused_not_deadlocked(stream):
    errors = []

    def selfish():
        try:
            stream.synchronize(timeout=5)
        except art.AscentError as exc:
            errors.append(exc)

    art.launch_host_func(selfish, stream=stream)
    stream.synchronize(timeout=10)
    assert len(errors) == 1 and isinstance(errors[0], art.StreamStateError)
    art.get_last_error()


def test_host_func_may_launch_work_on_another_stream(dev, stream):
    other = dev.create_stream()
    log = []
    art.launch_host_func(lambda: art.launch(lambda: log.append("child"), stream=other), stream=stream)
    stream.synchronize(timeout=10)
    other.synchronize(timeout=10)
    assert log == ["child"]
    other.destroy()
