"""The program's own signal handlers (any signal, SIGINT included) never cut a runtime call."""

from __future__ import annotations

import os
import subprocess
import sys
from textwrap import dedent

import pytest

from subprocess_util import run_program

# The start of a program whose SIGALRM handler raises Alarm (the program's own exception class).
ALARM_RAISES = """import signal
class Alarm(Exception):
    pass
def handler(signum, frame):
    raise Alarm
signal.signal(signal.SIGALRM, handler)
"""

# What lands a program's installed handler of signal SIG (the runtime's shim, as Python calls
# it when the signal comes) at chosen lines the runtime runs: at_lines(ks, fn) calls it at the
# k-th runtime line of fn() for each k in ks; settle() then lets any signal the runtime held
# back and sent again land (inside the caller's try).
LANDING = """
installed = signal._signal.getsignal(SIG)
def at_lines(ks, fn):
    seen = [0]
    def tracer(frame, event, arg):
        if event == "line" and "ascentrt" in frame.f_code.co_filename:
            seen[0] += 1
            if seen[0] in ks:
                installed(SIG, frame)
        return tracer
    sys.settrace(tracer)
    try:
        return fn()
    finally:
        sys.settrace(None)
def settle():
    until = time.monotonic() + 5
    while interrupts._resend_due[0] and time.monotonic() < until:
        time.sleep(0.001)
    time.sleep(0.005)
"""

# The start of a program whose raising SIGALRM handler LANDING lands.
AT_A_LINE_PRELUDE = """import signal, sys, time
from ascentrt import interrupts
SIG = signal.SIGALRM
class Cut(Exception):
    pass
def handler(signum, frame):
    raise Cut
signal.signal(SIG, handler)
""" + LANDING

# A handler that raises lands at the k-th line the runtime runs in malloc or free; a held one
# comes as the call ends, or a moment later. After each, the pool is whole.
AT_EVERY_LINE_START = '''
    import os, signal, sys, time
    BEFORE = {before}
    SIG = getattr(signal, {signame!r})
    class Cut(Exception):
        pass
    def handler(signum, frame):
        raise Cut
    if BEFORE:
        signal.signal(SIG, handler)
    import ascentrt as art
    from ascentrt import interrupts
    if not BEFORE:
        signal.signal(SIG, handler)
'''
AT_EVERY_LINE = '''
    dev = art.set_device(0)
    s = dev.create_stream()
    pool = dev._memory.pool
    kept, cuts = [], 0
    sizes = [100000, 1 << 20, 3 << 20, 4096]
    for k in range(1, 120):
        got = []
        try:
            try:
                got.append(at_lines({k}, lambda: art.malloc(sizes[k % 4], stream=s if k % 2 else None)))
            finally:
                settle()
        except Cut:
            cuts += 1
        kept += got
        if len(kept) > 6:
            b = kept.pop(0)
            try:
                try:
                    at_lines({k}, lambda: b.free(stream=s if k % 3 else None))
                finally:
                    settle()
            except Cut:
                cuts += 1
                try:
                    b.free()  # (a cut free either freed it or left it whole)
                except art.InvalidHandleError:
                    pass
    for b in kept:
        b.free()
    dev.synchronize(timeout=10)
    bins_whole = sorted(pool._sizes) == sorted(pool._bins) and all(pool._bins.values())
    big = art.malloc(dev.mem_info()[1] - (8 << 20))  # (the pool holds no block lost)
    big.free()
    print(cuts > 0, pool.allocated, bins_whole)
'''


@pytest.mark.parametrize("signame, before", [("SIGALRM", False), ("SIGALRM", True),
                                             ("SIGINT", False)])
def test_a_raising_handler_at_any_line_of_malloc_or_free_leaves_the_pool_whole(signame, before):
    # (only a Ctrl-C reaching ascentrt's own handler was held back: a timeout's SIGALRM
    # handler, or the program's own SIGINT one, cut the pool's bookkeeping: bare KeyErrors
    # from its bins later, megabytes allocated for good)
    out = run_program(dedent(AT_EVERY_LINE_START.format(signame=signame, before=before)) + LANDING
                      + dedent(AT_EVERY_LINE),
                      env={"ASCENTRT_PURE_PYTHON": "1", "ASCENTRT_DEVICE_MEMORY": "64M",
                           "ASCENTRT_LEAK_CHECK": "off"}, timeout=120)
    assert out.split() == ["True", "0", "True"]


def test_a_signal_in_a_simulated_step_is_handled_once_the_step_is_whole():
    # (the handler ran inside the kernel the step ran: the kernel failed with its exception)
    out = run_program('''
        import signal, ascentrt as art
        ran = []
        class Cut(Exception):
            pass
        def handler(signum, frame):
            ran.append("handler")
            raise Cut
        signal.signal(signal.SIGALRM, handler)
        dev = art.set_device(0)
        s = dev.create_stream()
        def kernel():
            signal.raise_signal(signal.SIGALRM)
            ran.append("kernel ended")
        art.launch(kernel, stream=s)
        try:
            s.synchronize(timeout=10)
        except Cut:
            ran.append("cut")
        s.synchronize(timeout=10)
        print(ran)
    ''', env={"ASCENTRT_BACKEND": "sim"}, timeout=60)
    assert out.strip() == "['kernel ended', 'handler', 'cut']"


STORM = '''
    import random, signal, threading, time
    import numpy as np
    import ascentrt as art
    armed = [False]
    def on_alarm(signum, frame):
        if armed[0]:
            armed[0] = False
            raise TimeoutError("too long")
    signal.signal(signal.SIGALRM, on_alarm)
    dev = art.set_device(0)
    s1, s2 = dev.create_stream(), dev.create_stream()
    cnt = np.zeros(1, np.int64)
    lock = threading.Lock()
    def inc(c):
        with lock:
            c[0] += 1
    rnd = random.Random(3)
    ok, cut, other = 0, 0, []
    ev = art.Event(dev)
    signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        op = rnd.choice(["launch", "launch", "record_wait", "sync"])
        try:
            armed[0] = True
            if op == "launch":
                art.launch_host_func(inc, cnt, stream=rnd.choice([s1, s2]))
                armed[0] = False
                ok += 1
            elif op == "record_wait":
                ev.record(s1)
                s2.wait(ev)
            else:
                s1.synchronize(timeout=10)
            armed[0] = False
        except TimeoutError:
            cut += op == "launch"
        except Exception as exc:
            armed[0] = False
            other.append(f"{op}: {type(exc).__name__}: {exc}"[:200])
    signal.setitimer(signal.ITIMER_REAL, 0)
    armed[0] = False
    dev.synchronize(timeout=20)
    print(other, ok <= int(cnt[0]) <= ok + cut)
'''


@pytest.mark.parametrize("backend, pure", [("cpu", "1"), ("cpu", "0"), ("sim", "1")])
def test_a_timeout_handler_storm_over_launches_records_and_waits_leaves_every_stream_whole(
        backend, pure):
    # (a SIGALRM handler's TimeoutError cut submissions: launches that returned never ran and
    # the final synchronize timed out; one that landed inside a wait's threading.Condition
    # released its lock twice, or left it held, hanging the next set())
    out = run_program(STORM, env={"ASCENTRT_BACKEND": backend, "ASCENTRT_PURE_PYTHON": pure,
                                  "ASCENTRT_LEAK_CHECK": "off"}, timeout=120)
    assert out.split("\n")[-2] == "[] True"


def test_the_program_sees_its_own_handlers_and_those_from_before_import_are_held_too():
    # (the runtime's shim stands in for each Python handler; programs compare handlers)
    out = run_program('''
        import signal
        def mine(signum, frame):
            pass
        signal.signal(signal.SIGUSR1, mine)
        import ascentrt
        other = lambda signum, frame: None
        print(signal.getsignal(signal.SIGUSR1) is mine,
              signal._signal.getsignal(signal.SIGUSR1) is not mine,  # (a shim stands in)
              signal.signal(signal.SIGUSR1, other) is mine,
              signal.getsignal(signal.SIGUSR1) is other,
              signal.getsignal(signal.SIGINT) is signal.default_int_handler,
              signal.signal(signal.SIGUSR1, signal.SIG_IGN) is other,
              signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN)
    ''', env={}, timeout=60)
    assert out.split() == ["True"] * 7


def test_a_handler_from_a_signal_signal_taken_before_import_is_the_one_limit():
    # (README: such a handler runs wherever its signal lands; one installed later through
    # signal.signal has the shim)
    out = run_program('''
        import signal
        from signal import signal as early_signal
        import ascentrt
        def mine(signum, frame):
            pass
        early_signal(signal.SIGUSR2, mine)
        signal.signal(signal.SIGUSR1, mine)
        print(signal._signal.getsignal(signal.SIGUSR2) is mine,
              signal._signal.getsignal(signal.SIGUSR1) is not mine)
    ''', env={}, timeout=60)
    assert out.split() == ["True", "True"]


def test_what_a_handler_raises_in_a_pyacl_call_comes_out_and_is_no_error_code():
    # (the facade turned every exception inside a call into a code: a SIGALRM handler's
    # exception that ended acl.rt.synchronize_stream's wait came back as ret 507000, lost)
    out = run_program('''
        import signal
        import ascentrt.acl as acl
        class Alarm(Exception):
            pass
        raised = [Alarm, TimeoutError]  # (a class of the program's, and a builtin one)
        def handler(signum, frame):
            raise raised[0]("deadline")
        signal.signal(signal.SIGALRM, handler)
        acl.init(); acl.rt.set_device(0)
        stream, _ = acl.rt.create_stream()
        n = 64 << 20
        a, _ = acl.rt.malloc(n, 0)
        b, _ = acl.rt.malloc(n, 0)
        for kind in list(raised):
            raised[0] = kind
            for _ in range(4):  # (the copies take ~20 ms: the alarm lands in the wait)
                acl.rt.memcpy_async(b, n, a, n, 3, stream)
            signal.setitimer(signal.ITIMER_REAL, 0.002)
            try:
                print("ret", acl.rt.synchronize_stream(stream))
            except kind:
                print("raised", kind.__name__)
            assert acl.rt.synchronize_stream(stream) == 0
        acl.rt.free(a); acl.rt.free(b); acl.rt.destroy_stream(stream)
        acl.rt.reset_device(0); acl.finalize()
    ''')
    assert out.splitlines() == ["raised Alarm", "raised TimeoutError"], out


def test_what_a_handler_raises_in_a_teardown_wait_or_a_callback_comes_out_as_a_ctrl_c_does():
    # (a context destroy, a device's last release and process_reports each turned the
    # program's exception into nothing: the waits of a teardown swallowed any Exception, and a
    # callback on the main thread logged it as the callback's own failure)
    out = run_program(ALARM_RAISES + dedent('''
        import signal, threading
        import ascentrt as art
        from ascentrt import callback, context
        def blocking_work():  # (queued work that ends a while after the alarm, 50 ms)
            gate = threading.Event()
            threading.Timer(0.5, gate.set).start()
            return gate.wait, 10
        def alarmed(what, now=True):
            if now:
                signal.setitimer(signal.ITIMER_REAL, 0.05)
            try:
                what()
                print("no-alarm")
            except Alarm:
                print("alarm")
        ctx = context.create_context(0)
        art.launch_host_func(*blocking_work(), stream=ctx.default_stream)
        alarmed(ctx.destroy)
        print(ctx.destroyed)
        context.retain_primary(0)
        art.launch_host_func(*blocking_work(), stream=art.set_device(0).create_stream())
        alarmed(lambda: context.release_primary(0))
        s = art.set_device(0).create_stream()
        callback.subscribe(threading.get_ident(), s)
        def in_callback(_):  # (run by process_reports on this thread: the alarm lands here)
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            wait, seconds = blocking_work()
            wait(seconds)
        callback.launch_callback(in_callback, None, stream=s)
        alarmed(lambda: callback.process_reports(5), now=False)
        callback.unsubscribe(threading.get_ident(), s)
    '''))
    assert out.split() == ["alarm", "True", "alarm", "alarm"], out


def test_a_cut_wait_leaves_no_call_half_done_and_the_handlers_exception_as_it_is():
    # (a pageable copy's call raised while the copy still wrote into the program's array; a
    # device's last release, and acl.finalize, cut in their grace left the device counted free
    # with its context and memory alive; a handler's own AscentTimeoutError or TaskError in a
    # destroy's wait became a code or nothing; from_dlpack made it a 100000; a cut hccl join
    # left the rank in the group, which then formed without it)
    out = run_program('''
        import os
        os.environ["ASCENTRT_DEVICES"] = "2"
        import signal, threading, time
        import numpy as np
        import ascentrt as art
        import ascentrt.acl as acl
        from ascentrt import context, hccl
        from ascentrt.acl._api import stream_of
        from ascentrt.errors import AscentTimeoutError
        raising = [None]
        def handler(signum, frame):
            raise raising[0]
        signal.signal(signal.SIGALRM, handler)
        def alarmed(exc, call, every=0.0):
            raising[0] = exc
            signal.setitimer(signal.ITIMER_REAL, 0.005, every)
            try:
                call()
                return "returned"
            except type(exc) as e:
                return "raised " + type(e).__name__ if e is exc else "another"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                for _ in range(50):  # (a repeating alarm's signals that the runtime held back
                    try:             # come a moment after the call: let them come here)
                        time.sleep(0.01)
                        break
                    except type(exc):
                        pass
        dev = art.set_device(0)
        s = dev.create_stream()
        n = 256 << 20
        src = art.malloc(n)
        art.memset(src, 1, n)
        dst = np.zeros(n, np.uint8)
        # a repeating alarm cuts the pageable copy's wait, and its second wait: at the raise the
        # copy is whole, or withdrawn (cut before it began: no byte moved), and no byte after
        print(alarmed(TimeoutError("t"), lambda: art.memcpy_async(dst, src, n, stream=s), 0.003))
        at_raise = int(np.count_nonzero(dst[::4096]))
        time.sleep(0.3)
        print(at_raise in (0, n // 4096) and int(np.count_nonzero(dst[::4096])) == at_raise)
        s.synchronize()
        src.free()
        # a handler's own AscentTimeoutError in a destroy's wait comes out as it is
        art.launch_host_func(time.sleep, 0.3, stream=s)
        print(alarmed(AscentTimeoutError("mine"), s.destroy))
        # a device's last release cut in its grace is whole: context and memory gone
        acl.init(); acl.rt.set_device(1)
        free0 = acl.rt.get_mem_info(0)[0]
        h, _ = acl.rt.create_stream()
        acl.rt.malloc(64 << 20, 0)
        art.launch_host_func(time.sleep, 0.3, stream=stream_of(h))
        print(alarmed(TimeoutError("t"), lambda: acl.rt.reset_device(1)))
        print(context.primary_uses(1), acl.rt.reset_device(1) != 0)
        acl.rt.set_device(1)
        print(acl.rt.get_mem_info(0)[0] == free0)
        acl.rt.reset_device(1)
        acl.finalize()
        # an exporter's handler exception is no InvalidArgumentError
        class Slow:
            def __dlpack__(self, **kw):
                time.sleep(0.1)
                return np.zeros(4).__dlpack__(**kw)
            def __dlpack_device__(self):
                return (1, 0)
        print(alarmed(TimeoutError("t"), lambda: art.from_dlpack(Slow())))
        # a join cut before its group formed is taken back: the group forms with the rank again
        root = hccl.get_root_info()
        comms, cut = {}, threading.Event()
        def rank1():  # (joins once rank 0's first join was cut)
            cut.wait(10)
            art.set_device(1)
            comms[1] = hccl.comm_init_root_info(2, root, 1)
        joiner = threading.Thread(target=rank1)
        joiner.start()
        art.set_device(0)
        print(alarmed(TimeoutError("t"), lambda: hccl.comm_init_root_info(2, root, 0)))
        cut.set()
        comms[0] = hccl.comm_init_root_info(2, root, 0)
        joiner.join(10)
        print(sorted(comms))
    ''', env={"ASCENTRT_LEAK_CHECK": "off", "HCCL_CONNECT_TIMEOUT": "10"})
    assert out.splitlines() == [
        "raised TimeoutError", "True", "raised AscentTimeoutError", "raised TimeoutError",
        "0 True", "True", "raised TimeoutError", "raised TimeoutError", "[0, 1]"], out


def test_a_launch_the_sanitizer_took_in_is_queued_whole_before_a_handler_raises():
    # (a handler's exception cut a launch's wait for the engine lock after the race sanitizer
    # had recorded its kernel: the launch raised, nothing was queued, and a later kernel on
    # another stream was reported racing a kernel that never ran)
    out = run_program(ALARM_RAISES + dedent('''
        import signal, threading, time, warnings
        import ascentrt as art
        from ascentrt.engine import ENGINE
        dev = art.set_device(0)
        a, b = dev.create_stream(), dev.create_stream()
        x = art.malloc(1024)
        ran = []
        held = threading.Event()
        def hold_lock():  # (contention for the engine lock, long enough for the alarm)
            with ENGINE.lock:
                held.set()
                time.sleep(0.3)
        threading.Thread(target=hold_lock).start()
        held.wait()
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        try:
            art.launch(lambda buf: ran.append("a"), x, stream=a)
            time.sleep(1)  # (the alarm comes a moment after the launch, here)
            print("no alarm")
        except Alarm:
            print("alarm")
        with warnings.catch_warnings(record=True) as w:  # (b's kernel, unordered with a's)
            warnings.simplefilter("always")
            art.launch(lambda buf: ran.append("b"), x, stream=b)
            b.synchronize()
        a.synchronize()
        raced = any("race" in str(m.message).lower() for m in w)
        print(sorted(ran), raced)  # (a race reported is one with a kernel that ran)
    '''), env={"ASCENTRT_SANITIZE": "warn", "ASCENTRT_LEAK_CHECK": "off"})
    assert out.splitlines() == ["alarm", "['a', 'b'] True"], out


def test_a_handler_that_lands_in_a_value_waits_condition_is_given_back_as_a_ctrl_c_is():
    # (the program's condition runs inside a runtime step: what the handler raised there became
    # the wait's failure and was lost; a Ctrl-C there was already sent again)
    out = run_program(ALARM_RAISES + dedent('''
        import time
        import ascentrt as art
        hits = []
        def handler(signum, frame):
            hits.append(signum)
            raise Alarm
        signal.signal(signal.SIGALRM, handler)
        s = art.set_device(0).create_stream()
        word = art.malloc(8)
        art.memset(word, 0, 8)
        def met(value):  # (the alarm lands in the condition's own code)
            if not hits:
                signal.setitimer(signal.ITIMER_REAL, 0.01)
                end = time.monotonic() + 0.2
                while not hits and time.monotonic() < end:
                    pass
            return value == 0
        got = []
        try:
            try:
                s.wait_value(word, met, "word == 0")
                s.synchronize(timeout=5)
            except art.AscentError as e:  # (the condition failed: its wait did)
                got.append(int(e.code))
            time.sleep(1)  # (the signal comes again a moment later: here, or in the synchronize)
        except Alarm:
            got.append("Alarm")
        try:
            s.synchronize(timeout=5)  # (the wait's failure, where the Alarm came first)
        except art.AscentError as e:
            got.append(int(e.code))
        print(sorted(map(str, got)), len(hits))
    '''), env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.strip() == "['507018', 'Alarm'] 2", out


def test_a_last_release_cut_at_any_line_once_or_twice_is_whole_or_untouched():
    # (release_primary counted the device free before its teardown: a cut between the count
    # and the try, or a second cut inside the finally that ends the release, left the device
    # counted free with its contexts and memory alive, and nothing could release it again)
    out = run_program(AT_A_LINE_PRELUDE + dedent('''
        import ascentrt.acl as acl
        from ascentrt import context
        from ascentrt.device import Device
        acl.init()
        dev, bad = Device(0), []
        for k in range(1, 40):
            for ks in ({k}, {k, k + 3}):
                acl.rt.set_device(0)
                acl.rt.create_context(0)
                s, _ = acl.rt.create_stream()
                p, _ = acl.rt.malloc(1 << 20, 0)
                acl.rt.memset_async(p, 1 << 20, 1, 1 << 20, s)
                try:
                    try:
                        at_lines(ks, lambda: acl.rt.reset_device_force(0))
                    finally:
                        settle()
                except Cut:
                    pass
                uses = context.primary_uses(0)
                alive = [c for c in context._contexts.get(0, []) if not c.destroyed]
                live = len(dev._memory.live_buffers())
                untouched = uses == 1 and len(alive) == 2 and live == 1
                whole = not (uses or alive or live or dev._memory.used_bytes())
                if not (untouched or whole):
                    bad.append((sorted(ks), uses, len(alive), live))
                if uses:
                    acl.rt.reset_device_force(0)
        acl.finalize()
        print(bad)
    '''), env={"ASCENTRT_LEAK_CHECK": "off"}, timeout=120)
    assert out.strip() == "[]", out
