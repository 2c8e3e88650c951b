"""Task failures: CONTINUE and STOP modes, ExceptionInfo, per-thread last error (semantics 6)."""

import threading
import time

import pytest

import ascentrt as art
from subprocess_util import run_program


def _broken():
    raise ZeroDivisionError("kernel broke")


def test_continue_mode_runs_later_tasks_and_reports_the_failure_at_synchronize(stream):
    assert stream.failure_mode == art.FailureMode.CONTINUE
    ran = []
    art.launch(_broken, stream=stream)
    art.launch(lambda: ran.append(1), stream=stream)
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=10)
    assert ran == [1]
    assert err.value.code == art.ErrorCode.RT_AICORE_EXCEPTION
    art.launch(lambda: ran.append(2), stream=stream)  # the stream still takes work
    stream.synchronize(timeout=10)
    assert ran == [1, 2]


def test_exception_info_names_device_stream_task_code_and_cause(dev, stream):
    art.launch(art.kernels.noop, stream=stream)
    task_id = art.launch(_broken, stream=stream, name="my_kernel")
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=10)
    info = err.value.info
    assert isinstance(info, art.ExceptionInfo)
    assert info.device_id == dev.id
    assert info.stream_id == stream.id
    assert info.task_id == task_id == 2
    assert info.error_code == art.ErrorCode.RT_AICORE_EXCEPTION
    assert info.task_name == "my_kernel"
    assert isinstance(info.cause, ZeroDivisionError)
    assert info.thread_id == threading.get_ident()
    assert "my_kernel" in str(err.value) and "ZeroDivisionError" in str(err.value)


def test_a_failure_is_raised_once(stream):
    art.launch(_broken, stream=stream)
    with pytest.raises(art.TaskError):
        stream.synchronize(timeout=10)
    stream.synchronize(timeout=10)           # already reported
    art.synchronize(timeout=10)


def test_several_failures_are_reported_together_by_the_first(stream):
    first = art.launch(_broken, stream=stream)
    art.launch(_broken, stream=stream)
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=10)
    assert err.value.info.task_id == first
    assert "1 more failed task" in str(err.value)
    stream.synchronize(timeout=10)


def test_failure_surfaces_at_device_synchronize(dev, stream):
    art.launch(_broken, stream=stream)
    with pytest.raises(art.TaskError) as err:
        dev.synchronize(timeout=10)
    assert err.value.info.stream_id == stream.id
    stream.synchronize(timeout=10)           # reported once, by whichever sync saw it


@pytest.mark.cpu_only
def test_event_synchronize_reports_only_failures_before_its_record(dev, stream):
    ev = dev.create_event()
    ev.record(stream)
    art.launch(_broken, stream=stream)
    ev2 = stream.record()
    stream_done = threading.Event()
    art.launch_host_func(stream_done.set, stream=stream)
    assert stream_done.wait(10)
    ev.synchronize(timeout=10)               # the failure came after this record
    with pytest.raises(art.TaskError):
        ev2.synchronize(timeout=10)          # ... and before this one


def test_stop_mode_discards_later_tasks_and_refuses_new_ones(dev):
    s = dev.create_stream(stop_on_failure=True)
    assert s.failure_mode == art.FailureMode.STOP
    ran = []
    art.launch(_broken, stream=s, cost=1.0)  # long on sim: the launches below get in first
    for i in range(5):
        art.launch(lambda i=i: ran.append(i), stream=s)
    with pytest.raises(art.TaskError):
        s.synchronize(timeout=10)
    assert ran == []
    with pytest.raises(art.StreamStateError) as err:
        art.launch(art.kernels.noop, stream=s)
    assert err.value.code == art.ErrorCode.RT_STREAM_ABORT
    assert err.value.info is not None and isinstance(err.value.info.cause, ZeroDivisionError)
    with pytest.raises(art.StreamStateError):
        s.record()
    s.destroy(force=True)


@pytest.mark.cpu_only
def test_stop_mode_releases_streams_waiting_on_discarded_records(dev):
    s = dev.create_stream(stop_on_failure=True)
    other = dev.create_stream()
    gate = threading.Event()
    art.launch(lambda: (gate.wait(10), _broken()), stream=s)
    art.launch(art.kernels.noop, stream=s)
    ev = s.record()
    other.wait(ev)
    done = []
    art.launch(lambda: done.append(1), stream=other)
    gate.set()
    # Never hangs on a record the stop discarded, and says the wait it released went on without
    # the work before that record (its stream, in CONTINUE mode, ran what came after).
    with pytest.raises(art.TaskError) as info:
        other.synchronize(timeout=10)
    assert info.value.code == art.ErrorCode.RT_STREAM_ABORT and "stopped at a failed task" in str(info.value)
    assert done == [1]
    other.synchronize(timeout=10)
    with pytest.raises(art.TaskError):
        s.synchronize(timeout=10)
    s.destroy(force=True), other.destroy()


def test_set_failure_mode_switches_modes(stream):
    stream.set_failure_mode(art.FailureMode.STOP)
    assert stream.failure_mode == art.FailureMode.STOP
    stream.set_failure_mode(0)
    assert stream.failure_mode == art.FailureMode.CONTINUE
    with pytest.raises(art.InvalidArgumentError):
        stream.set_failure_mode(5)


def test_get_last_error_returns_and_clears_peek_keeps(stream):
    art.get_last_error()
    art.launch(_broken, stream=stream)
    with pytest.raises(art.TaskError):
        stream.synchronize(timeout=10)
    assert art.peek_at_last_error() == art.ErrorCode.RT_AICORE_EXCEPTION
    assert art.peek_at_last_error() == art.ErrorCode.RT_AICORE_EXCEPTION
    assert art.get_last_error() == art.ErrorCode.RT_AICORE_EXCEPTION
    assert art.get_last_error() == 0
    assert art.peek_at_last_error() == 0


def test_last_error_of_a_failed_task_belongs_to_the_thread_that_launched_it(stream):
    art.get_last_error()
    seen = {}

    def other_thread():
        seen["before"] = art.peek_at_last_error()
        art.launch(_broken, stream=stream)
        done = threading.Event()
        art.launch_host_func(done.set, stream=stream)
        done.wait(10)
        seen["after"] = art.get_last_error()

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(20)
    assert seen == {"before": 0, "after": art.ErrorCode.RT_AICORE_EXCEPTION}
    assert art.peek_at_last_error() == 0     # the main thread launched nothing that failed
    with pytest.raises(art.TaskError):
        stream.synchronize(timeout=10)
    art.get_last_error()


def test_an_ended_threads_failed_task_is_no_new_threads_last_error(stream):
    # (a thread that got the ended one's id, as Python hands ids out again, got its error)
    def submitter():
        art.launch(_broken, stream=stream)
        done = threading.Event()
        art.launch_host_func(done.set, stream=stream)
        done.wait(10)                        # the failure is noted for this thread; it ends

    t = threading.Thread(target=submitter)
    t.start()
    t.join(20)
    seen = []
    for _ in range(50):                      # a thread that Python gives the ended one's id
        other = threading.Thread(target=lambda: seen.append((threading.get_ident(),
                                                             art.peek_at_last_error())))
        other.start()
        other.join(10)
        if seen[-1][0] == t.ident:
            break
    with pytest.raises(art.TaskError):
        stream.synchronize(timeout=10)
    art.get_last_error()
    if seen[-1][0] != t.ident:
        pytest.skip("Python gave no new thread the ended one's id")
    assert seen[-1][1] == 0


def test_a_usage_error_becomes_the_last_error_of_its_thread(stream):
    art.get_last_error()
    with pytest.raises(art.InvalidArgumentError):
        art.malloc(-1)
    codes = []
    t = threading.Thread(target=lambda: codes.append(art.peek_at_last_error()))
    t.start()
    t.join(10)
    assert codes == [0]
    assert art.get_last_error() == art.ErrorCode.INVALID_PARAM


def test_exception_in_kernel_does_not_kill_the_executor(dev, stream):
    for _ in range(2 * dev.properties.compute_units + 1):
        art.launch(_broken, stream=stream)
    with pytest.raises(art.TaskError):
        stream.synchronize(timeout=10)
    done = []
    art.launch(lambda: done.append(1), stream=stream)
    stream.synchronize(timeout=10)
    assert done == [1]
    art.get_last_error()


def test_base_exceptions_in_kernels_are_contained(stream):
    def exits():
        raise SystemExit(3)

    art.launch(exits, stream=stream)
    with pytest.raises(art.TaskError) as err:
        stream.synchronize(timeout=10)
    assert isinstance(err.value.info.cause, SystemExit)
    art.get_last_error()


@pytest.mark.parametrize("by", ["event", "notify, queued", "notify, blocked"])
def test_a_wait_released_by_a_record_a_destroy_dropped_fails_its_stream(dev, by):
    # (a force-destroy dropped the producer's memset and its record; the stream waiting on that
    # record went on and its synchronize succeeded, its consumer having read stale bytes)
    from ascentrt.engine import Hooks
    producer, consumer = dev.create_stream(), dev.create_stream()
    hold, handoff = art.Notify(dev), art.Notify(dev)
    buf = art.malloc(4096)
    art.memset(buf, 0, 4096)
    producer.wait_notify(hold)                       # holds the producer's work back
    art.memset_async(buf, 1, 4096, stream=producer)
    if by == "event":
        consumer.wait(producer.record())
    else:
        if by == "notify, queued":                   # (not at its wait yet when it is dropped)
            consumer.wait_notify(hold)
        producer.record_notify(handoff)
        consumer.wait_notify(handoff)
    art.memset_async(buf, 2, 64, stream=consumer)    # later work of the waiting stream
    told = []
    Hooks.exception_callbacks.append(told.append)
    try:
        producer.destroy(force=True)                 # drops the memset and the record unrun
        if by == "notify, queued":
            hold.record(dev.create_stream())         # lets the consumer reach its wait
        with pytest.raises(art.TaskError) as info:
            consumer.synchronize()
        deadline = time.monotonic() + 5              # (the callbacks run on a thread of their own)
        while not told and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        Hooks.exception_callbacks.remove(told.append)
    assert info.value.code == art.ErrorCode.RT_STREAM_ABORT
    assert "never ran" in str(info.value) and f"stream {producer.id}" in str(info.value)
    assert [i.error_code for i in told] == [art.ErrorCode.RT_STREAM_ABORT]
    assert art.get_last_error() == art.ErrorCode.RT_STREAM_ABORT  # (the thread that submitted it)
    consumer.synchronize()                           # raised once; the stream goes on
    hold.destroy(), handoff.destroy(), consumer.destroy(), buf.free()


@pytest.mark.cpu_only  # (its own process, on the cpu backend)
def test_a_forked_child_is_told_that_the_parents_queued_work_never_ran_there():
    # (the child's synchronize and query said the parent's queued memset had completed, and it
    # read the bytes from before it)
    out = run_program("""
        import os, ascentrt as art
        dev = art.set_device(0)
        s = dev.create_stream()
        hold = art.Notify(dev)
        buf = art.malloc(4096)
        s.wait_notify(hold)
        art.memset_async(buf, 9, 4096, stream=s)
        pid = os.fork()
        if pid == 0:
            try:
                s.synchronize(timeout=5)
                print("child: synchronized", flush=True)
            except art.TaskError as exc:
                print("child:", int(exc.code), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        hold.record(dev.create_stream())  # (the parent's own work goes on)
        s.synchronize()
        print("parent:", int(buf.numpy()[0]))
    """, env={"ASCENTRT_LEAK_CHECK": "off"}, timeout=60)
    assert out.split() == ["child:", "107023", "parent:", "9"]


@pytest.mark.cpu_only  # (its own process)
def test_a_thread_left_waiting_for_a_notify_after_the_main_thread_returned_is_told_of_the_deadlock():
    # (the main thread returned and waited to join it: the process never exited)
    out = run_program("""
        import threading, time, ascentrt as art
        dev = art.set_device(0)
        s = dev.create_stream()
        s.wait_notify(art.Notify(dev))  # only the host can record it, and nobody will
        def worker():
            try:
                s.synchronize()
            except art.DeadlockError as exc:
                print("worker:", int(exc.code), flush=True)
        threading.Thread(target=worker).start()
        time.sleep(0.3)
        print("main: returns", flush=True)
    """, env={"ASCENTRT_LEAK_CHECK": "off"}, timeout=60)
    assert out.split() == ["main:", "returns", "worker:", "507950"]


@pytest.mark.parametrize("sites", ["0", "1"])
def test_a_deadlock_report_names_the_lines_that_queued_the_waits_when_asked(sites):
    # (tasks keep no call site by default: taking one costs ~0.3 us a submit; the report says
    # how to have them)
    out = run_program("""
        import ascentrt as art
        dev = art.set_device(0)
        a, b = dev.create_stream(), dev.create_stream()
        na, nb = dev.create_notify(), dev.create_notify()
        na.wait_and_reset(a)                 # line 6
        nb.wait_and_reset(b)                 # line 7
        nb.record(a)
        na.record(b)
        try:
            dev.synchronize(timeout=30)
        except art.DeadlockError as exc:
            print(exc)
    """, env={"ASCENTRT_CALL_SITES": sites})
    assert "the streams wait on each other" in out, out
    if sites == "1":
        assert "waits at task 1 (queued at <string>:6) for notify" in out, out
        assert "waits at task 1 (queued at <string>:7) for notify" in out, out
        assert "ASCENTRT_CALL_SITES" not in out
    else:
        assert "queued at" not in out and "ASCENTRT_CALL_SITES=1 names the program lines" in out, out


def test_a_notify_wait_whose_record_is_queued_behind_it_on_its_own_stream_says_so():
    # (it read as a cycle of one: "the streams wait on each other: stream 2 waits at task 1 for
    # notify 1 -> back to stream 2")
    out = run_program("""
        import ascentrt as art
        dev = art.set_device(0)
        s = dev.create_stream()
        n = dev.create_notify()
        n.wait_and_reset(s)                  # line 6
        s.record_notify(n)                   # line 7: behind the wait that needs it
        try:
            s.synchronize(timeout=30)
        except art.DeadlockError as exc:
            print(exc.code, exc)
    """, env={"ASCENTRT_CALL_SITES": "1"})
    assert "507950" in out and "wait on each other" not in out, out
    assert ("waits at task 1 (queued at <string>:6) for notify 1, and its only record (task 2, "
            "queued at <string>:7) is queued on the same stream behind the wait that needs it"
            in out), out
    assert "Record notify 1 on another stream, or before the wait" in out, out


@pytest.mark.parametrize("sites", ["0", "1"])
def test_a_task_left_without_its_bytes_by_a_free_on_another_stream_names_that_free(sites):
    # (it said only "device buffer at 0x... was freed": not where, nor on which stream)
    out = run_program("""
        import os, threading, ascentrt as art
        dev = art.set_device(0)
        a, b = dev.create_stream(), dev.create_stream()
        gate = threading.Event()  # (on sim: a 1 ms kernel holds a past the free)
        x = art.malloc(4096)
        art.launch(lambda: os.environ.get("ASCENTRT_BACKEND") == "sim" or gate.wait(10), stream=a, cost=1e-3)
        art.memset_async(x, 1, stream=a)     # queued before the free, on a
        x.free(stream=b)                     # line 9: b does not wait for a's work
        gate.set()
        try:
            a.synchronize(timeout=10)
        except art.TaskError as exc:
            print(exc)
    """, env={"ASCENTRT_CALL_SITES": sites})
    at = " at <string>:9" if sites == "1" else ""
    assert (f"was freed with free(stream=stream 3){at} while stream 2 still had tasks using it"
            in out), out
    assert ("free it on stream 2, or make stream 3 wait for stream 2's work first "
            "(record_stream(buf, stream 2) before the free") in out, out


def test_a_stuck_event_wait_names_where_its_record_was_queued():
    out = run_program("""
        import ascentrt as art
        dev = art.set_device(0)
        a, b = dev.create_stream(), dev.create_stream()
        n = dev.create_notify()
        ev = art.Event()
        n.wait_and_reset(a)                  # line 7: a waits for b's record of n ...
        ev.record(a)                         # line 8
        b.wait(ev)                           # line 9: ... and b for a's record of ev, before it
        n.record(b)
        try:
            dev.synchronize(timeout=30)
        except art.DeadlockError as exc:
            print(exc)
    """, env={"ASCENTRT_CALL_SITES": "1"})
    assert "(queued at <string>:9) for an event recorded on stream" in out, out
    assert "(its record queued at <string>:8)" in out, out
    assert "(queued at <string>:7) for notify" in out, out


def test_a_bad_call_sites_setting_is_refused_with_its_code_before_anything_runs():
    out = run_program("""
        import ascentrt as art
        try:
            art.Stream()
        except art.InvalidArgumentError as exc:
            print(exc.code, exc)
    """, env={"ASCENTRT_CALL_SITES": "banana"})
    assert out.startswith("100000") and "ASCENTRT_CALL_SITES='banana'" in out, out


def test_an_internal_error_in_an_executor_fails_its_batch_and_frees_the_lock():
    """A bug of the runtime's own in an executor's loop (here: its bookkeeping of a batch that
    ran) must not leave the engine lock held by a dead thread, which hangs every later call."""
    out = run_program("""
        import logging, numpy as np, ascentrt as art
        from ascentrt.engine import scheduler
        from ascentrt.engine.scheduler import ENGINE
        logging.disable(logging.CRITICAL)
        real = scheduler.batch_succeeded
        def broken(*args):
            scheduler.batch_succeeded = real
            raise IndexError("pop from an empty deque")
        scheduler.batch_succeeded = broken
        dev = art.set_device(0); s = dev.create_stream()
        b = art.malloc(64)
        art.launch(lambda x: x.fill(1), b, stream=s)
        try:
            s.synchronize(timeout=5)
            print("no error")
        except art.AscentError as e:
            print(int(e.code), "internal error" in str(e.info.cause))
        assert ENGINE.lock.acquire(timeout=5); ENGINE.lock.release()
        art.launch(lambda x: x.fill(2), b, stream=s)
        s.synchronize(timeout=5)
        print(b.numpy()[0], ENGINE.executor_faults)
    """, env={"ASCENTRT_BACKEND": "cpu"}, timeout=60)
    assert out.split() == ["507000", "True", "2", "1"]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_child_forked_by_a_host_function_names_that_task_as_running_at_the_fork():
    out = run_program("""
        import os, ascentrt as art
        dev = art.set_device(0); s = dev.create_stream()
        r, w = os.pipe()
        def forks():
            pid = os.fork()
            if pid == 0:
                try:
                    s.synchronize(timeout=5); text = "no error"
                except art.AscentError as e:
                    text = str(e)
                os.write(w, text.encode()); os._exit(0)
            os.waitpid(pid, 0)
        art.launch_host_func(forks, stream=s)
        s.synchronize(timeout=20); os.close(w)
        print(os.read(r, 4096).decode())
    """, env={"ASCENTRT_BACKEND": "cpu"}, timeout=60)
    assert "task 1 (forks) was running when the process forked" in out
    assert "queued before the process forked" not in out
