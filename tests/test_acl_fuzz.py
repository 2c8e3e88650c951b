"""Random sequences of acl calls with random ints never crash, raise only TypeError, and leave
the runtime usable: a well-formed pyACL program afterwards succeeds. Calls come from acl.rt,
acl.util and the top-level acl namespace; util's converters may also raise what pyACL's do
(ValueError for an object of the wrong kind, RuntimeError from stop_thread for a thread that
raised)."""

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ascentrt.acl as acl
from ascentrt import context
from ascentrt.acl import constants as C
from ascentrt.acl._api import AclValueError

FUZZED = [n for n in acl.rt.__all__ if hasattr(getattr(acl.rt, n), "__acl_fmt__")]
INT_RANGES = {"i": (-(1 << 31), (1 << 31) - 1), "I": (-(1 << 31), (1 << 32) - 1)}
TOP = ["init", "finalize", "finalize_reference", "get_version", "get_cann_version", "app_log",
       "get_soc_name", "get_recent_err_msg"]
UTIL = ["ptr_to_bytes", "ptr_to_numpy", "bytes_to_ptr", "numpy_to_ptr", "numpy_contiguous_to_ptr",
        "start_thread", "stop_thread"]
assert set(TOP) | {"rt", "util", "constants", *acl._UNSUPPORTED_MODULES} == set(acl.__all__) \
    and set(UTIL) == set(acl.util.__all__)  # (_UNSUPPORTED_MODULES: names that say they are not provided)


def _shape_ok(s):
    return isinstance(s, tuple) and all(isinstance(d, int) for d in s)


# The functions without a pyACL format string: their arity, what well-typed arguments look
# like (they then raise nothing but stop_thread's RuntimeError), and what they return.
PLAIN = {
    "app_log": (2, lambda a: type(a[0]) is int and isinstance(a[1], str), lambda r: r is None),
    "get_soc_name": (0, lambda a: True, lambda r: isinstance(r, str)),
    "get_recent_err_msg": (0, lambda a: True, lambda r: r is None or isinstance(r, str)),
    "ptr_to_bytes": (2, lambda a: all(isinstance(x, int) for x in a),
                     lambda r: r is None or isinstance(r, bytes)),
    "ptr_to_numpy": (3, lambda a: isinstance(a[0], int) and _shape_ok(a[1]) and isinstance(a[2], int),
                     lambda r: r is None or isinstance(r, np.ndarray)),
    "bytes_to_ptr": (1, lambda a: isinstance(a[0], bytes), lambda r: isinstance(r, int)),
    "numpy_to_ptr": (1, lambda a: isinstance(a[0], np.ndarray), lambda r: isinstance(r, int)),
    "numpy_contiguous_to_ptr": (1, lambda a: isinstance(a[0], np.ndarray),
                                lambda r: isinstance(r[0], int) and isinstance(r[1], np.ndarray)),
    "start_thread": (2, lambda a: callable(a[0]), lambda r: r[1] == 0 and r[0] > 0),
    "stop_thread": (1, lambda a: isinstance(a[0], int), lambda r: isinstance(r, int)),
}
RAISED_BY_PYACL = {"bytes_to_ptr": ValueError, "numpy_to_ptr": ValueError,
                   "numpy_contiguous_to_ptr": ValueError, "stop_thread": RuntimeError,
                   "ptr_to_numpy": ValueError}  # (a shape that is no tuple: 'shape is empty')


def function(name):
    """The acl function a fuzzed name stands for."""
    return getattr(acl, name) if name in TOP else getattr(acl.util, name) if name in UTIL else \
        getattr(acl.rt, name)


@pytest.fixture(scope="module")
def report_thread():
    """A thread serving callbacks for whatever streams the fuzzer subscribes it to."""
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            acl.rt.process_report(10)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    yield t.ident
    stop.set()
    t.join(10)


# An argument: a live value from earlier results, an interesting int, a random int or a wrong type.
LIVE = st.tuples(st.just("live"), st.integers(0, 50), st.sampled_from([0, 0, 0, 8, 64, -1]))
INTERESTING = st.sampled_from([0, 1, -1, 2, 3, 4, 5, 7, 64, 4096, 1 << 20, (1 << 31) - 1, 1 << 40,
                               -(1 << 63)])
SHAPE = st.lists(st.sampled_from([0, 1, 2, 3, 16, -1, 1 << 40, 1 << 62, 1 << 63]), max_size=4).map(tuple)
# Python objects util converts (fresh ones: copies may write into them): bytes, arrays
# (contiguous or not, read-only or not), and the callables start_thread runs.
OBJECT = st.one_of(st.integers(0, 80).map(bytes), st.integers(0, 80).map(lambda n: np.zeros(n, np.uint8)),
                   st.just(0).map(lambda _: np.arange(32, dtype=np.float32)[::2]),
                   st.just(0).map(lambda _: np.frombuffer(b"abcdefgh", np.uint8)),
                   st.sampled_from([lambda *a: None, lambda *a: 1 / 0]))
ARG = st.one_of(LIVE, LIVE, LIVE, INTERESTING, INTERESTING, st.integers(-(1 << 70), 1 << 70),
                st.sampled_from([None, "x", 1.5, b"\x00", [1]]), SHAPE, OBJECT)
CALL = st.tuples(st.sampled_from(FUZZED + TOP + UTIL),
                 st.lists(ARG, min_size=0, max_size=8), st.integers(0, 9).map(bool))


def well_typed(fmt, args):
    if len(args) != len(fmt):
        return False
    for letter, a in zip(fmt, args):
        if letter in "ikIKl" and (not isinstance(a, int)):
            return False
        if letter in INT_RANGES and not INT_RANGES[letter][0] <= a <= INT_RANGES[letter][1]:
            return False
        if letter == "s" and not isinstance(a, str):
            return False
    return True


def resolve(args, live, fmt, name, report_tid):
    out = []
    for i, a in enumerate(args):
        if isinstance(a, tuple) and a and a[0] == "live":
            pool = live + [report_tid]
            a = pool[a[1] % len(pool)] + a[2] if pool else a[1]
        out.append(a)
    if name.startswith("malloc") and out and isinstance(out[0], int) and 1 << 22 < out[0] < 1 << 45:
        out[0] %= 1 << 22                 # big enough to reach the checks, small enough for 2 cores
    if name == "wait_and_reset_notify" and len(out) == 3 and isinstance(out[2], int) and out[2] >= 0:
        out[2] = 1 + out[2] % 20          # bounded device-side waits: 0 would wait forever
    if name == "start_thread" and out and isinstance(out[0], int):
        out[0] = [lambda *a: None, lambda *a: 1 / 0][out[0] % 2]
    if name in ("launch_callback",) and out and isinstance(out[0], int):
        out[0] = (lambda d: None) if out[0] % 2 else out[0]
    if name == "launch_kernel" and len(out) >= 2:
        out[0] = ["noop", "fill", "copy", lambda *a: None][hash(str(out[0])) % 4]
        out[1] = tuple(out[1:3]) if len(out) > 1 else ()
        out = out[:2] + [out[2] if len(out) > 2 else 0] + out[3:4]
    return out


def record_values(result, live):
    if type(result) is int and result > 0:
        live.append(result)               # a pointer from a converter
    elif isinstance(result, tuple) and result and type(result[-1]) is int and result[-1] == 0:
        live.extend(v for v in result[:-1] if isinstance(v, int) and not isinstance(v, bool) and v > 0)
    elif isinstance(result, tuple) and result and type(result[0]) is int:
        live.append(result[0])            # (pointer, array) from numpy_contiguous_to_ptr


def call_plain(name, fn, args):
    """Call a function without a format string; check what it raised or returned."""
    arity, typed, returns = PLAIN[name]
    well_typed = len(args) == arity and typed(args)
    try:
        result = fn(*args)
    except TypeError:
        assert not well_typed, f"{name}{tuple(args)} raised TypeError for well-typed arguments"
        return None
    except (ValueError, RuntimeError) as exc:
        assert isinstance(exc, RAISED_BY_PYACL.get(name, ())), f"{name}{tuple(args)} raised {exc!r}"
        assert not well_typed or isinstance(exc, RuntimeError), f"{name}{tuple(args)} raised {exc!r}"
        return None
    assert returns(result), f"{name} returned {result!r}"
    return result


def well_formed_program():
    """The quick-start flow: it must work whatever the fuzzer did before."""
    assert acl.rt.set_device(0) == 0
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    n = 256
    dev, ret = acl.rt.malloc(n * 4, C.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    src = np.arange(n, dtype=np.float32).tobytes()
    out = bytes(n * 4)
    assert acl.rt.memcpy(dev, n * 4, acl.util.bytes_to_ptr(src), n * 4, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert acl.rt.launch_kernel("scale", ((dev, np.float32, (n,)), (dev, np.float32, (n,)), 2.0), stream) == 0
    assert acl.rt.memcpy_async(acl.util.bytes_to_ptr(out), n * 4, dev, n * 4,
                               C.ACL_MEMCPY_DEVICE_TO_HOST, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert np.array_equal(np.frombuffer(out, np.float32), 2 * np.arange(n, dtype=np.float32))
    assert acl.rt.free(dev) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.reset_device(0) == 0


def cleanup():
    for tid in list(acl.util._threads):
        try:
            acl.util.stop_thread(tid)
        except RuntimeError:
            pass                          # its fn raised: reported, joined
    acl.rt.set_exception_info_callback()
    acl.rt.set_op_wait_timeout(0)
    acl.rt.set_op_execute_timeout_v2(0)   # (process-wide settings a random call may have made)
    acl.rt.reset_device_res_limit(0)
    acl._teardown()
    acl._init_count[0] = 0
    context.set_current_context(None)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(calls=st.lists(CALL, min_size=1, max_size=25), start_with_device=st.booleans())
def test_random_call_sequences_never_break_the_runtime(report_thread, calls, start_with_device):
    live: list[int] = []
    try:
        if start_with_device:
            assert acl.rt.set_device(0) == 0
            live.extend(v for v in (acl.rt.create_stream()[0], acl.rt.malloc(256, 0)[0],
                                    acl.rt.malloc_host(256)[0], acl.rt.create_event()[0],
                                    acl.rt.create_notify(0)[0]) if v)
        for name, args, correct_arity in calls:
            fn = function(name)
            fmt = getattr(fn, "__acl_fmt__", None)
            if correct_arity:
                arity = PLAIN[name][0] if fmt is None else len(fmt)
                args = (args + [0] * arity)[:arity]
            args = resolve(args, live, fmt, name, report_thread)
            if fmt is None:
                record_values(call_plain(name, fn, args), live)
                continue
            typed = well_typed(fmt, args) and "O" not in fmt and name != "wait_and_reset_notify"
            try:
                result = fn(*args)
            except TypeError:
                assert not typed, f"{name}{tuple(args)} raised TypeError for well-typed arguments"
                continue
            except AclValueError:  # (pyACL's own for a value it refuses: a key too long, no list)
                continue
            assert isinstance(result, int) or (isinstance(result, tuple) and isinstance(result[-1], int)), \
                f"{name} returned {result!r}"
            record_values(result, live)
        cleanup()
        well_formed_program()
    finally:
        cleanup()
