"""The interpreter's exit: runtime threads end before finalization, and calls made during it
(a teardown in a __del__) end at once, with or without work still queued, on every run."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap

import pytest

once = pytest.mark.skipif(os.environ.get("ASCENTRT_BACKEND") == "sim",
                          reason="runs once, in the cpu session: it picks each backend itself")


def _run(code: str, backend: str = "cpu") -> subprocess.CompletedProcess:
    env = dict(os.environ, ASCENTRT_BACKEND=backend, ASCENTRT_USAGE_PUBLISH="0")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env=env)


THREADS_AT_EXIT = """
    import atexit

    def after_the_runtime():  # (registered first: runs after the runtime's own exit handlers)
        from ascentrt.engine.scheduler import ENGINE
        print(ENGINE.lock.acquire(False), ENGINE._watching,
              sum(len(q) for dq in ENGINE.devices for q in dq.queues))

    atexit.register(after_the_runtime)
    import time
    import ascentrt as art
    dev = art.set_device(0)
    s, waiting = dev.create_stream(), dev.create_stream()
    art.Notify(dev).wait_and_reset(waiting, timeout=60)  # (a device-side wait: the watchdog watches it)
    buf = art.malloc(1 << 20)
    for i in range(50):
        art.memset_async(buf, i, stream=s)  # still queued, some of it, as the program ends
"""


@once
def test_every_executor_and_the_watchdog_end_before_finalization():
    # (finalization froze an executor or the watchdog where it next needed the interpreter, at
    # times holding the engine lock: a teardown in a __del__ then hung, 30-70% of runs)
    out = _run(THREADS_AT_EXIT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "0"], out.stdout + out.stderr


TEARDOWN_IN_DEL = """
    import time
    import ascentrt.acl as acl

    class Resource:  # (acllite's AclLiteResource shape, with work still queued at exit)
        def __init__(self):
            acl.init(); acl.rt.set_device(0)
            self.context, _ = acl.rt.create_context(0)
            self.stream, _ = acl.rt.create_stream()
            self.buf, _ = acl.rt.malloc(1 << 20, 0)
            for i in range(200):
                acl.rt.memset_async(self.buf, 1 << 20, i, 1 << 20, self.stream)

        def __del__(self):
            rets = [acl.rt.synchronize_stream(self.stream), acl.rt.free(self.buf),
                    acl.rt.destroy_stream(self.stream), acl.rt.destroy_context(self.context),
                    acl.rt.reset_device(0), acl.finalize()]
            print(rets)

    res = Resource()
"""


@once
@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_a_teardown_in_a_del_with_work_still_queued_ends_on_every_run(backend):
    # Work still queued when finalization begins can no longer run: the synchronize says so
    # (107023) or finds it done; never a hang. (Four at once: the hang needed a thread switch.)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: _run(TEARDOWN_IN_DEL, backend), range(4)))
    for out in outs:
        assert out.returncode == 0, out.stderr
        first, *rest = out.stdout.strip().strip("[]").split(", ")
        assert first in ("0", "107023") and rest == ["0"] * 5, out.stdout + out.stderr


SYNC_IN_A_LATE_EXIT_HANDLER = """
    import atexit, time
    import ascentrt as art
    dev = art.set_device(0)
    s = dev.create_stream()
    ran = []

    def late():  # (registered before the runtime's handlers exist: runs after they stopped it)
        s.synchronize()
        print(len(ran))

    atexit.register(late)
    art.launch_host_func(time.sleep, 0.2, stream=s)
    for i in range(20):
        art.launch_host_func(ran.append, i, stream=s)
"""


@once
def test_an_exit_handler_after_the_runtimes_still_gets_its_work_run():
    # (the exit stops the executors; a wait before finalization starts them again)
    out = _run(SYNC_IN_A_LATE_EXIT_HANDLER)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "20", out.stdout + out.stderr


HOST_FUNCTION_AT_FINALIZATION = """
    import time
    import ascentrt as art
    dev = art.set_device(0)

    class Resource:
        def __init__(self):
            self.s = dev.create_stream()
            art.launch_host_func(time.sleep, 0.01, stream=self.s)  # not yet run at exit

        def __del__(self):
            self.s.synchronize(timeout=1)
            print("synchronized")

    res = Resource()
"""


@once
def test_on_sim_a_host_function_stepped_to_during_finalization_runs_on_the_last_thread():
    # (stepping to it started its thread, and Thread.start waited for ever for a thread that
    # could not begin: every run hung, its timeout ignored)
    out = _run(HOST_FUNCTION_AT_FINALIZATION, "sim")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "synchronized", out.stdout + out.stderr


@pytest.mark.parametrize("backend", ["cpu", "sim"])
@once
def test_a_task_that_ran_is_not_kept_by_the_thread_that_ran_it(backend):
    # (a parked executor, and sim's host-function thread, kept the last task in a local: its
    # function and that function's module globals lived on, and their __del__ never ran)
    out = _run("""
        import gc, weakref
        import ascentrt as art
        dev = art.set_device(0)
        s = dev.create_stream()
        class Payload: pass
        payload = Payload()
        def host_function(kept=payload):
            pass
        art.launch_host_func(host_function, stream=s)
        art.launch(lambda x: None, Payload(), stream=s)
        s.synchronize()
        alive = weakref.ref(payload)
        del host_function, payload
        gc.collect()
        print(alive() is None)
    """, backend)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True", out.stdout + out.stderr
