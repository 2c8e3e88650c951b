"""ascentrt.acl against pyACL's conventions: every call with valid and invalid arguments, return codes
as in the misuse matrix of the pyACL reference (§14)."""

import inspect
import json
import threading
import time

import numpy as np
import pytest

import ascentrt
import ascentrt.acl as acl
from ascentrt import context
from ascentrt.device import Device
from ascentrt.acl import constants as C
from ascentrt.acl._api import STREAMS
from ascentrt.errors import MemcpyKindWarning

RT_FUNCTIONS = [getattr(acl.rt, n) for n in acl.rt.__all__]


@pytest.fixture
def rt():
    """acl.rt with device 0 set on this thread; the device is fully released afterwards."""
    assert acl.rt.set_device(0) == 0
    yield acl.rt
    acl.rt.set_exception_info_callback()
    acl.rt.set_op_wait_timeout(0)
    if context.primary_uses(0):
        acl.rt.reset_device_force(0)
    context.set_current_context(None)


@pytest.fixture
def stream(rt):
    s, ret = rt.create_stream()
    assert ret == 0
    return s


@pytest.fixture
def gate():
    """A kernel body that blocks its stream until the test opens the gate (at the latest on teardown)."""
    ev = threading.Event()
    yield ev
    ev.set()


def blocker(gate):
    return lambda: gate.wait(10)


def released_without_device():
    """Make sure no context is current on this thread (no set_device)."""
    context.set_current_context(None)


# ---- conventions -----------------------------------------------------------------------------

@pytest.mark.parametrize("fn", RT_FUNCTIONS, ids=acl.rt.__all__)
def test_wrong_argument_count_raises_pyacl_type_error(fn):
    if getattr(fn, "__acl_fmt__", None) == "":
        return  # (pyACL's calls without parameters ignore what they are given: see test_acl_dropin)
    with pytest.raises(TypeError):
        fn(*([0] * 12))


@pytest.mark.parametrize("fn", RT_FUNCTIONS, ids=acl.rt.__all__)
def test_every_function_documents_its_pyacl_counterpart(fn):
    assert fn.__doc__ and "acl" in fn.__doc__


def test_parse_failure_message_names_the_function(rt):
    with pytest.raises(TypeError, match=r"^acl\.rt\.synchronize_stream args parse failed$"):
        rt.synchronize_stream(None)
    with pytest.raises(TypeError, match="acl.rt.malloc args parse failed"):
        rt.malloc("10", 0)
    with pytest.raises(TypeError):
        rt.set_device(1 << 40)  # int32 overflow is a parse failure


def test_keywords_are_not_accepted(rt):
    with pytest.raises(TypeError):
        rt.malloc(size=64, policy=0)
    with pytest.raises(TypeError):
        rt.malloc(a0=64, a1=0)  # (the generated call's own parameter names are not keywords either)


@pytest.mark.parametrize("fn", RT_FUNCTIONS, ids=acl.rt.__all__)
def test_too_few_arguments_is_the_parse_failure(fn):
    if not hasattr(fn, "__acl_fmt__"):
        return  # not a generated call
    least = len(fn.__acl_fmt__) - sum(p.default is not inspect.Parameter.empty
                                      for p in fn.__signature__.parameters.values())
    if least == 0:
        return
    with pytest.raises(TypeError, match="args parse failed"):
        fn(*([0] * (least - 1)))


def test_numpy_ints_parse_as_cpythons_converters_take_them(rt):
    # i / I / l take what has __index__ (a numpy integer too); k / K (sizes, pointers, handles)
    # take a Python int only (PyLong_Check), as pyACL's own parsing does: a program keeping
    # pointers in a numpy array fails there, so it must here.
    ptr, ret = rt.malloc(256, np.int32(0))
    assert ret == 0 and type(ptr) is int
    with pytest.raises(TypeError, match="args parse failed"):
        rt.malloc(np.int64(256), 0)
    for bad in (np.uint64(ptr), np.int64(ptr)):
        with pytest.raises(TypeError, match="args parse failed"):
            rt.free(bad)
    with pytest.raises(TypeError, match="args parse failed"):
        acl.util.ptr_to_bytes(np.uint64(ptr), 4)
    assert rt.free(ptr) == 0


def test_no_constants_are_exported_by_the_pyacl_namespaces():
    assert not [n for n in dir(acl) if n.startswith("ACL_")]
    assert not [n for n in dir(acl.rt) if n.startswith("ACL_")]
    assert C.ACL_MEMCPY_DEVICE_TO_HOST == 2 and C.ACL_ERROR_RT_CONTEXT_NULL == 107002


def test_util_has_exactly_pyacls_seven_functions():
    assert sorted(acl.util.__all__) == sorted(["bytes_to_ptr", "ptr_to_bytes", "numpy_to_ptr",
                                               "numpy_contiguous_to_ptr", "ptr_to_numpy",
                                               "start_thread", "stop_thread"])


def test_the_pyacl_namespaces_hold_no_name_pyacl_lacks():
    # What dir() shows besides dunder and private names: pyACL's functions (reference §4, §13;
    # acl.rt's are its __all__, each an API function of the facade), the submodules, and
    # what the README documents (app_log, the unsupported modules and their error). A name
    # that leaks in (`from __future__ import annotations` binds `annotations`) is none of these.
    def public(module):
        return {n for n in dir(module) if not n.startswith("_")}
    top = {"init", "finalize", "finalize_reference", "get_version", "get_soc_name",
           "get_recent_err_msg", "get_cann_version", "rt", "util", "constants", "app_log",
           "mdl", "op", "media", "blas", "himpi", "fv", "prof", "UnsupportedModuleError"}
    assert public(acl) - top == set()
    assert public(acl.util) == {"bytes_to_ptr", "ptr_to_bytes", "numpy_to_ptr",
                                "numpy_contiguous_to_ptr", "ptr_to_numpy", "start_thread",
                                "stop_thread"}
    assert public(acl.rt) == set(acl.rt.__all__)
    assert [n for n in acl.rt.__all__ if not getattr(getattr(acl.rt, n), "__module__", "")
            .startswith("ascentrt.acl._")] == []


# ---- init / finalize -------------------------------------------------------------------------

def test_init_twice_is_100002_and_finalize_twice_100037():
    assert acl.init() == 0
    assert acl.init() == C.ACL_ERROR_REPEAT_INITIALIZE
    assert acl.finalize() == 0
    assert acl.finalize() == C.ACL_ERROR_REPEAT_FINALIZE
    assert acl.init() == 0 and acl.finalize() == 0  # init -> finalize -> init is allowed


def test_init_config_path(tmp_path):
    with pytest.raises(TypeError):
        acl.init(None)
    assert acl.init("/no/such.json") == C.ACL_ERROR_INVALID_FILE
    cfg = tmp_path / "acl.json"
    cfg.write_text(json.dumps({"err_msg_mode": "1"}))
    assert acl.init(str(cfg)) == 0
    assert acl.finalize() == 0


def test_finalize_reference_counts_down():
    assert acl.init() == 0 and acl.init() == C.ACL_ERROR_REPEAT_INITIALIZE
    assert acl.finalize_reference() == (1, 0)
    assert acl.finalize_reference() == (0, 0)
    assert acl.finalize_reference() == (0, C.ACL_ERROR_REPEAT_FINALIZE)


def test_finalize_releases_devices_and_handles():
    acl.init()
    acl.rt.set_device(0)
    s, _ = acl.rt.create_stream()
    assert acl.finalize() == 0
    assert acl.rt.get_device() == (0, C.ACL_ERROR_RT_CONTEXT_NULL)
    assert acl.rt.synchronize_stream(s) == C.ACL_ERROR_RT_INVALID_HANDLE


def test_version_soc_and_messages():
    major, minor, patch, ret = acl.get_version()
    assert ret == 0 and (major, minor) == (1, 17)
    props = Device(0).properties  # (the preset's name on sim: programs pick files by it)
    assert acl.get_soc_name() == ("ascentrt-cpu" if props.backend == "cpu"
                                  else f"ascentrt-sim-{props.preset}")
    released_without_device()
    acl.rt.create_stream()
    assert "context" in acl.get_recent_err_msg()
    assert acl.get_recent_err_msg() is None  # read once
    info, ret = acl.get_cann_version("runtime")
    assert ret == 0 and "version" in info


# ---- device ----------------------------------------------------------------------------------

def test_set_device_rejects_bad_ids():
    count, ret = acl.rt.get_device_count()
    assert ret == 0 and count >= 1
    assert acl.rt.set_device(-1) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.set_device(count) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.reset_device(count) == C.ACL_ERROR_RT_INVALID_DEVICEID


def test_get_device_needs_a_context():
    released_without_device()
    assert acl.rt.get_device() == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


def test_set_device_is_counted_and_reset_releases_at_zero(rt):
    s, _ = rt.create_stream()
    assert rt.set_device(0) == 0
    assert rt.reset_device(0) == 0
    assert rt.synchronize_stream(s) == 0          # still set once: the stream lives
    assert rt.get_device() == (0, 0)
    assert rt.reset_device(0) == 0                # zero: streams and contexts released
    assert rt.synchronize_stream(s) == C.ACL_ERROR_RT_INVALID_HANDLE
    assert rt.reset_device(0) == C.ACL_ERROR_RT_CONTEXT_RELEASE_ERROR
    assert rt.reset_device_force(0) == C.ACL_ERROR_RT_CONTEXT_RELEASE_ERROR


def test_reset_device_force_releases_whatever_the_count(rt):
    rt.set_device(0)
    rt.set_device(0)
    assert rt.reset_device_force(0) == 0
    assert rt.get_device() == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


def test_reset_device_frees_device_memory(rt):
    ptr, _ = rt.malloc(4096, 0)
    assert rt.reset_device(0) == 0
    assert acl.util.ptr_to_bytes(ptr, 16) is None


def test_device_misc(rt):
    assert rt.get_run_mode() == (C.ACL_HOST, 0)
    assert rt.synchronize_device() == 0
    assert rt.synchronize_device_with_timeout(5) == 0
    assert rt.synchronize_device_with_timeout(-1) == 0
    assert rt.synchronize_device_with_timeout(-2) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.query_device_status(0) == (C.ACL_RT_DEVICE_STATUS_NORMAL, 0)
    assert rt.query_device_status(99)[1] == C.ACL_ERROR_RT_INVALID_DEVICEID
    rates, ret = rt.get_device_utilization_rate(0)
    assert ret == 0 and set(rates) == {"cube_utilization", "vector_utilization", "aicpu_utilization",
                                       "memory_utilization", "utilization_extend"}
    assert rt.device_get_stream_priority_range() == (7, 0, 0)


@pytest.mark.cpu_only
def test_synchronize_device_with_timeout_expires(rt, stream, gate):
    rt.launch_kernel(blocker(gate), (), stream)
    assert rt.synchronize_device_with_timeout(30) == C.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    gate.set()
    assert rt.synchronize_device() == 0


def test_peer_access_checks(rt):
    assert rt.device_can_access_peer(0, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.device_enable_peer_access(0, 1) == C.ACL_ERROR_FEATURE_UNSUPPORTED
    assert rt.device_enable_peer_access(0, 0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.device_disable_peer_access(0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.device_peer_access_status(0, 99)[1] == C.ACL_ERROR_RT_INVALID_DEVICEID


def test_new_threads_have_no_context(rt):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", acl.rt.create_stream()))
    t.start()
    t.join(10)
    assert out["r"] == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


# ---- context ---------------------------------------------------------------------------------

def test_explicit_context_lifecycle(rt):
    primary, _ = rt.get_context()
    ctx, ret = rt.create_context(0)
    assert ret == 0 and rt.get_context() == (ctx, 0)
    own_default, _ = rt.ctx_get_current_default_stream()
    assert rt.destroy_stream(own_default) == C.ACL_ERROR_INVALID_PARAM
    s, _ = rt.create_stream()
    assert rt.launch_kernel("noop", (), s) == 0
    assert rt.set_context(primary) == 0 and rt.get_context() == (primary, 0)
    assert rt.destroy_context(ctx) == 0
    assert rt.synchronize_stream(s) == C.ACL_ERROR_RT_INVALID_HANDLE  # died with its context
    assert rt.set_context(ctx) == C.ACL_ERROR_RT_INVALID_HANDLE
    assert rt.destroy_context(ctx) == C.ACL_ERROR_RT_INVALID_HANDLE
    assert rt.destroy_context(primary) == C.ACL_ERROR_INVALID_PARAM
    assert rt.set_context(0) == C.ACL_ERROR_INVALID_PARAM


def test_create_context_works_without_set_device():
    released_without_device()
    ctx, ret = acl.rt.create_context(0)
    assert ret == 0 and acl.rt.get_device() == (0, 0)
    assert acl.rt.destroy_context(ctx) == 0
    assert acl.rt.get_context()[1] == C.ACL_ERROR_RT_CONTEXT_NULL
    assert acl.rt.create_context(-1)[1] == C.ACL_ERROR_RT_INVALID_DEVICEID


def test_context_shared_with_another_thread(rt, stream):
    ctx, _ = rt.get_context()
    out = {}

    def worker():
        out["set"] = acl.rt.set_context(ctx)
        out["launch"] = acl.rt.launch_kernel("noop", (), stream)
        out["sync"] = acl.rt.synchronize_stream(0)

    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert out == {"set": 0, "launch": 0, "sync": 0}


# ---- stream ----------------------------------------------------------------------------------

def test_stream_needs_a_context():
    released_without_device()
    assert acl.rt.create_stream() == (0, C.ACL_ERROR_RT_CONTEXT_NULL)
    assert acl.rt.create_stream_with_config(0, 0) == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


def test_destroy_stream_bad_handles(rt, stream):
    assert rt.destroy_stream(0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.destroy_stream_force(0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.destroy_stream(12345) == C.ACL_ERROR_RT_INVALID_HANDLE
    assert rt.destroy_stream(stream) == 0
    assert rt.destroy_stream(stream) == C.ACL_ERROR_RT_INVALID_HANDLE
    default, _ = rt.ctx_get_current_default_stream()
    assert rt.destroy_stream(default) == C.ACL_ERROR_INVALID_PARAM


def test_stream_with_config_clamps_priority(rt):
    s, ret = rt.create_stream_with_config(99, C.ACL_STREAM_FAST_LAUNCH)
    assert ret == 0 and STREAMS.get(s).priority == 7
    s, ret = rt.create_stream_with_config(3, 0)
    assert ret == 0 and STREAMS.get(s).priority == 3


@pytest.mark.cpu_only
def test_synchronize_stream_with_timeout(rt, stream, gate):
    assert rt.synchronize_stream_with_timeout(stream, -2) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.synchronize_stream_with_timeout(stream, 0) == C.ACL_ERROR_RT_PARAM_INVALID
    rt.launch_kernel(blocker(gate), (), stream)
    assert rt.stream_query(stream) == (C.ACL_STREAM_STATUS_NOT_READY, 0)
    assert rt.synchronize_stream_with_timeout(stream, 30) == C.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    gate.set()
    assert rt.synchronize_stream_with_timeout(stream, -1) == 0
    assert rt.stream_query(stream) == (C.ACL_STREAM_STATUS_COMPLETE, 0)


@pytest.mark.cpu_only
def test_destroy_stream_force_discards_pending_work(rt, stream, gate):
    ran = []
    rt.launch_kernel(blocker(gate), (), stream)
    rt.launch_kernel(ran.append, (1,), stream)
    assert rt.destroy_stream_force(stream) == 0
    gate.set()
    assert rt.synchronize_device() == 0
    assert ran == []


def test_destroy_stream_waits_for_its_work(rt, stream):
    ran = []
    rt.launch_kernel(ran.append, (1,), stream)
    assert rt.destroy_stream(stream) == 0
    assert ran == [1]


def test_failure_modes(rt, stream):
    assert rt.set_stream_failure_mode(stream, 2) == C.ACL_ERROR_INVALID_PARAM
    assert rt.set_stream_failure_mode(stream, C.ACL_STOP_ON_FAILURE) == 0
    rt.launch_kernel(lambda: 1 / 0, (), stream)
    assert rt.synchronize_stream(stream) == C.ACL_ERROR_RT_AICORE_EXCEPTION
    assert rt.launch_kernel("noop", (), stream) == C.ACL_ERROR_RT_STREAM_ABORT


def test_stream_get_id(rt, stream):
    sid, ret = rt.stream_get_id(stream)
    assert ret == 0 and sid == STREAMS.get(stream).id


# ---- event -----------------------------------------------------------------------------------

def test_event_null_handles(rt, stream):
    assert rt.destroy_event(0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.record_event(0, stream) == C.ACL_ERROR_INVALID_PARAM
    assert rt.synchronize_event(0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.query_event_status(0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.create_event_with_flag(0x10000) == (0, C.ACL_ERROR_INVALID_PARAM)


def test_event_needs_a_context():
    released_without_device()
    assert acl.rt.create_event() == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


@pytest.mark.cpu_only
def test_event_statuses(rt, stream, gate):
    ev, _ = rt.create_event()
    ex, _ = rt.create_event_ex_with_flag(C.ACL_EVENT_SYNC)
    assert rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, 0)  # never recorded
    assert rt.query_event_status(ex) == (C.ACL_EVENT_RECORDED_STATUS_COMPLETE, 0)   # ex: complete
    rt.launch_kernel(blocker(gate), (), stream)
    assert rt.record_event(ev, stream) == 0
    assert rt.query_event(ev) == (C.ACL_EVENT_STATUS_NOT_READY, 0)
    assert rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, 0)
    assert rt.synchronize_event_with_timeout(ev, 30) == C.ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
    gate.set()
    assert rt.synchronize_event(ev) == 0
    assert rt.query_event(ev) == (C.ACL_EVENT_STATUS_COMPLETE, 0)   # 0 = complete for query_event
    assert rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_COMPLETE, 0)  # 1 = complete
    assert rt.query_event(ex)[1] == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.destroy_event(ev) == 0 and rt.destroy_event(ev) == C.ACL_ERROR_RT_INVALID_HANDLE


def test_a_wait_on_an_ex_event_never_recorded_passes(rt, stream):
    # (CANN queues no wait task for a new-mode event with no record: complete before it)
    ex, _ = rt.create_event_ex_with_flag(C.ACL_EVENT_SYNC)
    plain, _ = rt.create_event_with_flag(C.ACL_EVENT_SYNC)
    assert rt.stream_wait_event(stream, ex) == 0
    assert rt.stream_wait_event(stream, plain) == C.ACL_ERROR_RT_PARAM_INVALID  # (never recorded)
    assert rt.synchronize_stream(stream) == 0
    assert rt.destroy_event(ex) == 0 and rt.destroy_event(plain) == 0


def test_synchronize_event_timeout_arguments(rt):
    ev, _ = rt.create_event()
    assert rt.synchronize_event_with_timeout(ev, -2) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.synchronize_event_with_timeout(ev, 0) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.synchronize_event_with_timeout(ev, -1) == 0


@pytest.mark.cpu_only
def test_stream_wait_event_and_wait_status(rt, gate):
    producer, _ = rt.create_stream()
    consumer, _ = rt.create_stream()
    ev, _ = rt.create_event_with_flag(C.ACL_EVENT_SYNC)
    assert rt.stream_wait_event(consumer, ev) == C.ACL_ERROR_RT_PARAM_INVALID  # never recorded
    order = []
    rt.launch_kernel(blocker(gate), (), producer)
    rt.launch_kernel(order.append, ("producer",), producer)
    rt.record_event(ev, producer)
    assert rt.stream_wait_event(consumer, ev) == 0
    rt.launch_kernel(order.append, ("consumer",), consumer)
    assert rt.query_event_wait_status(ev) == (C.ACL_EVENT_WAIT_STATUS_NOT_READY, 0)
    gate.set()
    assert rt.synchronize_stream(consumer) == 0
    assert order == ["producer", "consumer"]
    assert rt.query_event_wait_status(ev) == (C.ACL_EVENT_WAIT_STATUS_COMPLETE, 0)
    assert rt.reset_event(ev, producer) == 0
    assert rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, 0)


def test_reset_event_is_a_task_of_its_stream_and_the_record_stands_until_it_runs(rt):
    held, _ = rt.create_stream()
    waiting, _ = rt.create_stream()
    releaser, _ = rt.create_stream()
    n, _ = rt.create_notify(0)
    ev, _ = rt.create_event_with_flag(C.ACL_EVENT_SYNC)
    assert rt.wait_and_reset_notify(n, held, 0) == 0      # the recorded work waits for the notify
    assert rt.record_event(ev, held) == 0
    assert rt.stream_wait_event(waiting, ev) == 0
    assert rt.reset_event(ev, waiting) == 0               # queued behind the wait
    assert rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, 0)
    assert rt.query_event(ev) == (C.ACL_EVENT_STATUS_NOT_READY, 0)   # not "complete": it stands
    assert rt.synchronize_event_with_timeout(ev, 50) == C.ACL_ERROR_RT_EVENT_SYNC_TIMEOUT
    assert rt.event_get_timestamp(ev)[1] == C.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
    assert rt.record_notify(n, releaser) == 0
    assert rt.synchronize_event(ev) == 0
    assert rt.synchronize_stream(waiting) == 0
    assert rt.query_event_status(ev) == (C.ACL_EVENT_RECORDED_STATUS_NOT_READY, 0)  # reset ran
    assert rt.query_event(ev) == (C.ACL_EVENT_STATUS_COMPLETE, 0)
    assert rt.stream_wait_event(waiting, ev) == C.ACL_ERROR_RT_PARAM_INVALID        # never recorded
    for s in (held, waiting, releaser):
        assert rt.destroy_stream(s) == 0
    assert rt.destroy_notify(n) == 0


def test_events_without_sync_flag_cannot_be_waited_on(rt, stream):
    ev, _ = rt.create_event_with_flag(C.ACL_EVENT_TIME_LINE)
    rt.record_event(ev, stream)
    assert rt.stream_wait_event(stream, ev) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.reset_event(ev, stream) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.query_event_wait_status(ev)[1] == C.ACL_ERROR_RT_PARAM_INVALID


def test_elapsed_time_and_timestamps(rt, stream):
    a, _ = rt.create_event()
    b, _ = rt.create_event()
    assert rt.event_elapsed_time(a, b) == (0.0, C.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID)
    rt.record_event(a, stream)
    rt.launch_kernel("noop", (), stream)
    rt.record_event(b, stream)
    rt.synchronize_stream(stream)
    ms, ret = rt.event_elapsed_time(a, b)
    assert ret == 0 and ms >= 0
    (ta, r1), (tb, r2) = rt.event_get_timestamp(a), rt.event_get_timestamp(b)
    assert r1 == r2 == 0 and tb >= ta > 0
    eid, ret = rt.get_event_id(a)
    assert ret == 0 and eid > 0


@pytest.mark.cpu_only
def test_op_wait_timeout_fails_a_device_side_wait(rt, gate):
    producer, _ = rt.create_stream()
    consumer, _ = rt.create_stream()
    ev, _ = rt.create_event()
    rt.launch_kernel(blocker(gate), (), producer)
    rt.record_event(ev, producer)
    assert rt.set_op_wait_timeout(1) == 0
    rt.stream_wait_event(consumer, ev)
    assert rt.synchronize_stream(consumer) == C.ACL_ERROR_RT_WAIT_TIMEOUT
    assert rt.set_op_wait_timeout(0) == 0


# ---- notify ----------------------------------------------------------------------------------

def test_notify_signals_between_streams(rt):
    s1, _ = rt.create_stream()
    s2, _ = rt.create_stream()
    n, ret = rt.create_notify(0)
    assert ret == 0 and rt.create_notify(7) == (0, C.ACL_ERROR_INVALID_PARAM)
    order = []
    assert rt.wait_and_reset_notify(n, s2, 0) == 0
    rt.launch_kernel(order.append, ("after wait",), s2)
    rt.launch_kernel(order.append, ("before record",), s1)
    assert rt.record_notify(n, s1) == 0
    assert rt.synchronize_stream(s2) == 0 and rt.synchronize_stream(s1) == 0
    assert order == ["before record", "after wait"]
    nid, ret = rt.get_notify_id(n)
    assert ret == 0 and nid > 0
    assert rt.destroy_notify(n) == 0 and rt.destroy_notify(n) == C.ACL_ERROR_RT_INVALID_HANDLE


def test_notify_wait_timeouts(rt, stream):
    n, _ = rt.create_notify(0)
    with pytest.raises(TypeError, match="negative"):
        rt.wait_and_reset_notify(n, stream, -1)
    with pytest.raises(TypeError, match="2\\*\\*32"):
        rt.wait_and_reset_notify(n, stream, 1 << 32)
    assert rt.wait_and_reset_notify(n, stream, 20) == 0
    assert rt.synchronize_stream(stream) == C.ACL_ERROR_RT_WAIT_TIMEOUT


def test_notify_batch_reset(rt, stream):
    n, _ = rt.create_notify(0)
    with pytest.raises(ValueError):
        rt.notify_batch_reset(n)
    with pytest.raises(TypeError):
        rt.notify_batch_reset(["x"])
    assert rt.notify_batch_reset([n, 999]) == C.ACL_ERROR_RT_INVALID_HANDLE
    rt.record_notify(n, stream)
    rt.synchronize_stream(stream)
    assert rt.notify_batch_reset([n]) == 0
    rt.wait_and_reset_notify(n, stream, 20)  # the record was cleared: the wait times out
    assert rt.synchronize_stream(stream) == C.ACL_ERROR_RT_WAIT_TIMEOUT


# ---- callbacks -------------------------------------------------------------------------------

class ReportThread:
    """A report thread looping on process_report until stopped."""

    def __init__(self, ctx):
        self.stop = threading.Event()
        self.codes = []
        self.tid, ret = acl.util.start_thread(self.loop, ctx)
        assert ret == 0

    def loop(self, ctx):
        acl.rt.set_context(ctx)
        while not self.stop.is_set():
            self.codes.append(acl.rt.process_report(50))

    def close(self):
        self.stop.set()
        return acl.util.stop_thread(self.tid)


@pytest.fixture
def reporter(rt):
    ctx, _ = rt.get_context()
    r = ReportThread(ctx)
    yield r
    r.close()


def test_process_report_arguments_and_states(rt, stream):
    assert rt.process_report(0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.process_report(-2) == C.ACL_ERROR_INVALID_PARAM
    assert rt.process_report(10) == C.ACL_ERROR_RT_THREAD_SUBSCRIBE   # not subscribed
    me = threading.get_ident()
    assert rt.subscribe_report(me, stream) == 0
    assert rt.process_report(10) == C.ACL_ERROR_RT_REPORT_TIMEOUT     # subscribed, idle
    assert rt.unsubscribe_report(me, stream) == 0


def test_launch_callback_argument_checks(rt, stream, reporter):
    assert rt.launch_callback(print, None, 0, stream) == C.ACL_ERROR_RT_STREAM_NO_CB_REG
    assert rt.subscribe_report(reporter.tid, stream) == 0
    assert rt.subscribe_report(reporter.tid, stream) == C.ACL_ERROR_REPEAT_SUBSCRIBE
    assert rt.launch_callback(print, None, 2, stream) == C.ACL_ERROR_INVALID_PARAM
    with pytest.raises(TypeError, match="parameter must be callable"):
        rt.launch_callback(42, None, 0, stream)
    assert rt.unsubscribe_report(reporter.tid, stream) == 0
    assert rt.launch_callback(print, None, 0, stream) == C.ACL_ERROR_RT_STREAM_NO_CB_REG
    assert rt.subscribe_report(123456789, stream) == C.ACL_ERROR_INVALID_PARAM  # no such thread


def test_blocking_callback_holds_the_stream(rt, stream, reporter):
    rt.subscribe_report(reporter.tid, stream)
    order = []
    rt.launch_kernel(order.append, ("kernel before",), stream)
    rt.launch_callback(lambda d: order.append((d, threading.get_ident() == reporter.tid)), "cb",
                       C.ACL_CALLBACK_BLOCK, stream)
    rt.launch_kernel(order.append, ("kernel after",), stream)
    assert rt.synchronize_stream(stream) == 0
    assert order == ["kernel before", ("cb", True), "kernel after"]
    rt.unsubscribe_report(reporter.tid, stream)


def test_a_raising_callback_does_not_stop_the_report_thread(rt, stream, reporter):
    rt.subscribe_report(reporter.tid, stream)
    seen = []
    rt.launch_callback(lambda d: 1 / 0, None, C.ACL_CALLBACK_BLOCK, stream)
    rt.launch_callback(seen.append, [1, 2], C.ACL_CALLBACK_BLOCK, stream)
    assert rt.synchronize_stream(stream) == 0
    assert seen == [[1, 2]]
    rt.unsubscribe_report(reporter.tid, stream)


def test_default_stream_callbacks(rt, reporter):
    assert rt.subscribe_report(reporter.tid, 0) == 0
    seen = []
    assert rt.launch_callback(seen.append, "x", C.ACL_CALLBACK_BLOCK, 0) == 0
    assert rt.synchronize_stream(0) == 0 and seen == ["x"]
    assert rt.unsubscribe_report(reporter.tid, 0) == 0


# ---- memory ----------------------------------------------------------------------------------

def test_malloc_and_free_checks(rt):
    assert rt.malloc(0, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.malloc(1 << 50, 0) == (0, C.ACL_ERROR_RT_MEMORY_ALLOCATION)
    assert rt.malloc_host(0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.free(0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.free_host(0) == C.ACL_ERROR_INVALID_PARAM
    ptr, ret = rt.malloc(100, C.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0 and ptr % 64 == 0
    host, _ = rt.malloc_host(100)
    assert rt.free(host) == C.ACL_ERROR_RT_MEMORY_FREE        # wrong kind
    from ascentrt.acl import _memory
    assert host in _memory._handed["host"]                            # still handed out: finalize frees it
    assert rt.free_host(ptr) == C.ACL_ERROR_RT_MEMORY_FREE
    assert rt.free(ptr + 64) == C.ACL_ERROR_RT_MEMORY_FREE    # not an allocation's start
    assert rt.free(ptr) == 0 and rt.free(ptr) == C.ACL_ERROR_RT_MEMORY_FREE
    assert rt.free_host(host) == 0
    for alloc in (rt.malloc_cached, rt.malloc_align32):
        p, ret = alloc(64, 0)
        assert ret == 0 and rt.free(p) == 0


def test_free_of_a_pointer_freed_and_reallocated_through_the_core(rt):
    from ascentrt.acl import _memory
    ptr, _ = rt.malloc(4096, 0)
    ascentrt.free(ptr)                       # freed behind acl's back
    again = ascentrt.malloc(4096 + 32)       # the pool hands the same block out again (acl's
                                             # malloc adds 32 bytes of padding)
    assert again.addr == ptr
    assert rt.free(ptr) == 0 and not again.alive  # found in the registry, not acl's stale record
    assert ptr not in _memory._handed["device"]
    assert rt.free(ptr) == C.ACL_ERROR_RT_MEMORY_FREE


def test_the_common_malloc_and_free_report_as_the_checked_calls(rt):
    # (acl.rt.malloc / free run their common case in one frame: its errors must be the same)
    from ascentrt.acl import _memory
    capacity = ascentrt.Device(0).properties.total_memory
    held, ret = rt.malloc(capacity * 3 // 4, 0)                # (never touched: no memory used)
    assert ret == 0
    before = ascentrt.memory_stats(0)["num_ooms"]
    assert rt.malloc(capacity // 2, 0) == (0, C.ACL_ERROR_RT_MEMORY_ALLOCATION)
    assert ascentrt.memory_stats(0)["num_ooms"] == before + 1       # counted once, not retried
    assert rt.get_last_error(C.ACL_RT_THREAD_LEVEL) == C.ACL_ERROR_RT_MEMORY_ALLOCATION
    assert rt.free(held) == 0
    ptr, _ = rt.malloc(4096, 0)
    export = np.from_dlpack(_memory._handed["device"][ptr])
    assert rt.free(ptr) == C.ACL_ERROR_RT_MEMORY_FREE           # refused: a live DLPack export
    assert ptr in _memory._handed["device"]                      # still handed out
    del export
    assert rt.free(ptr) == 0 and ptr not in _memory._handed["device"]
    with pytest.raises(TypeError, match="acl.rt.malloc args parse failed"):
        rt.malloc(64, 1 << 31)                                   # policy is an int32
    with pytest.raises(TypeError, match="acl.rt.free args parse failed"):
        rt.free(ptr, 0)


def test_malloc_on_a_context_destroyed_by_another_thread_is_refused(rt):
    ctx, _ = rt.create_context(0)
    made, destroyed, got = threading.Event(), threading.Event(), []

    def user():
        rt.set_context(ctx)
        made.set()
        destroyed.wait(10)
        got.append(rt.malloc(64, 0))

    t = threading.Thread(target=user)
    t.start()
    made.wait(10)
    assert rt.destroy_context(ctx) == 0
    destroyed.set()
    t.join(10)
    assert got == [(0, C.ACL_ERROR_RT_CONTEXT_NULL)]




def test_malloc_needs_a_context():
    released_without_device()
    assert acl.rt.malloc(64, 0) == (0, C.ACL_ERROR_RT_CONTEXT_NULL)
    for bad in (0, -1, False):  # a bad size is reported first, context or not
        assert acl.rt.malloc(bad, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
        assert acl.rt.malloc_cached(bad, 0) == (0, C.ACL_ERROR_INVALID_PARAM)


def test_racing_acl_frees_of_one_pointer_exactly_one_succeeds(rt):
    for _ in range(50):
        ptr, _ = rt.malloc(4096, 0)
        barrier = threading.Barrier(6)
        codes = []

        def free():
            barrier.wait()
            codes.append(rt.free(ptr))

        threads = [threading.Thread(target=free) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(codes) == [0] + [C.ACL_ERROR_RT_MEMORY_FREE] * 5
        from ascentrt.acl import _memory
        assert ptr not in _memory._handed["device"]


def test_memcpy_checks(rt):
    dev, _ = rt.malloc(256, 0)
    host, _ = rt.malloc_host(256)
    assert rt.memcpy(0xBAD, 0, 0xBAD, 0, 99) == 0        # count 0: nothing checked
    assert rt.memcpy(0, 256, host, 256, 1) == C.ACL_ERROR_INVALID_PARAM
    assert rt.memcpy(dev, 256, host, 256, 9) == C.ACL_ERROR_INVALID_PARAM
    assert rt.memcpy(dev, 128, host, 256, 1) == C.ACL_ERROR_INVALID_PARAM   # count > dest_max
    assert rt.memcpy(dev + 200, 256, host, 256, 1) == C.ACL_ERROR_INVALID_PARAM  # runs past
    with pytest.warns(MemcpyKindWarning):  # as on CANN the addresses decide, so it copies
        assert rt.memcpy(dev, 256, host, 256, C.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert rt.memcpy(dev, 256, host, 256, C.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE) == 0
    rt.free(dev)
    assert rt.memcpy(dev, 256, host, 256, 1) == C.ACL_ERROR_INVALID_PARAM   # freed
    rt.free_host(host)


def test_memcpy_every_kind_round_trip(rt):
    data = bytes(range(256)) * 4
    src = acl.util.bytes_to_ptr(data)
    pinned, _ = rt.malloc_host(1024)
    a, _ = rt.malloc(1024, 0)
    b, _ = rt.malloc(1024, 0)
    out = bytes(1024)
    dst = acl.util.bytes_to_ptr(out)
    assert rt.memcpy(pinned, 1024, src, 1024, C.ACL_MEMCPY_HOST_TO_HOST) == 0
    assert rt.memcpy(a, 1024, pinned, 1024, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert rt.memcpy(b, 1024, a, 1024, C.ACL_MEMCPY_DEVICE_TO_DEVICE) == 0
    assert rt.memcpy(dst, 1024, b, 1024, C.ACL_MEMCPY_DEFAULT) == 0
    assert out == data


@pytest.mark.cpu_only
def test_memcpy_async_from_pinned_memory_is_asynchronous(rt, stream, gate):
    dev, _ = rt.malloc(64, 0)
    host, _ = rt.malloc_host(64)
    rt.memset(dev, 64, 5, 64)
    rt.memset(host, 64, 0, 64)
    rt.launch_kernel(blocker(gate), (), stream)
    assert rt.memcpy_async(host, 64, dev, 64, C.ACL_MEMCPY_DEVICE_TO_HOST, stream) == 0
    assert acl.util.ptr_to_bytes(host, 64) == bytes(64)    # not yet: the stream is held
    gate.set()
    assert rt.synchronize_stream(stream) == 0
    assert acl.util.ptr_to_bytes(host, 64) == b"\x05" * 64
    assert rt.memcpy_async(host, 64, dev, 64, 42, stream) == C.ACL_ERROR_INVALID_PARAM


def test_memset_checks(rt, stream):
    dev, _ = rt.malloc(64, 0)
    assert rt.memset(dev, 64, 0x1FF, 0) == 0
    assert rt.memset(0, 64, 1, 64) == C.ACL_ERROR_INVALID_PARAM
    assert rt.memset(dev, 32, 1, 64) == C.ACL_ERROR_INVALID_PARAM
    assert rt.memset(dev, 64, 0x1FF, 64) == 0              # the low byte, as C memset
    assert acl.util.ptr_to_bytes(dev, 64) == b"\xff" * 64
    assert rt.memset_async(dev, 64, 3, 32, stream) == 0
    rt.synchronize_stream(stream)
    assert acl.util.ptr_to_bytes(dev, 64) == b"\x03" * 32 + b"\xff" * 32
    assert rt.memset(dev + 64 * 1024, 64, 1, 64) == C.ACL_ERROR_INVALID_PARAM


def test_memcpy2d(rt, stream):
    rows, width, pitch = 4, 8, 16
    image = bytes(range(rows * pitch))
    src = acl.util.bytes_to_ptr(image)
    dev, _ = rt.malloc(rows * width, 0)
    assert rt.memcpy2d(dev, width, src, pitch, width, rows, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    got = acl.util.ptr_to_bytes(dev, rows * width)
    assert got == b"".join(image[r * pitch:r * pitch + width] for r in range(rows))
    assert rt.memcpy2d(dev, width, src, pitch, width, rows, C.ACL_MEMCPY_DEVICE_TO_DEVICE) == \
        C.ACL_ERROR_INVALID_PARAM
    assert rt.memcpy2d(dev, width, src, pitch, pitch + 1, rows, 1) == C.ACL_ERROR_INVALID_PARAM
    out = bytes(rows * pitch)
    assert rt.memcpy2d_async(acl.util.bytes_to_ptr(out), pitch, dev, width, width, rows,
                             C.ACL_MEMCPY_DEVICE_TO_HOST, stream) == 0
    assert rt.synchronize_stream(stream) == 0
    assert all(out[r * pitch:r * pitch + width] == got[r * width:(r + 1) * width] for r in range(rows))


def test_get_mem_info_and_cache_calls(rt):
    free, total, ret = rt.get_mem_info(C.ACL_HBM_MEM)
    assert ret == 0 and 0 < free <= total
    ptr, _ = rt.malloc(1 << 20, 0)
    assert rt.get_mem_info(C.ACL_DDR_MEM)[0] <= free - (1 << 20)
    assert rt.get_mem_info(99) == (0, 0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.mem_flush(ptr, 64) == 0 and rt.mem_invalidate(ptr, 64) == 0
    assert rt.mem_flush(ptr, 0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.mem_flush(ptr, 2 << 20) == C.ACL_ERROR_INVALID_PARAM


# ---- kernels ---------------------------------------------------------------------------------

def test_launch_kernel_with_pointers_and_event(rt, stream):
    n = 64
    a, _ = rt.malloc(n * 4, 0)
    ev, _ = rt.create_event()
    assert rt.launch_kernel("fill", ((a, np.float32, (n,)), 2.5), stream, ev) == 0
    assert rt.synchronize_event(ev) == 0
    assert np.all(acl.util.ptr_to_numpy(a, (n,), C.NPY_FLOAT) == 2.5)
    raw = []
    assert rt.launch_kernel(lambda buf: raw.append(buf.nbytes), (a + 64,), stream) == 0
    rt.synchronize_stream(stream)
    assert raw == [n * 4 + 32 - 64]   # a bare pointer: bytes up to its allocation's end
                                      # (malloc's 32 bytes of padding included)


def test_launch_kernel_rejects_bad_pointers(rt, stream):
    a, _ = rt.malloc(64, 0)
    host, _ = rt.malloc_host(64)
    assert rt.launch_kernel("noop", ((host, np.uint8, (64,)),), stream) == C.ACL_ERROR_RT_INVALID_MEMORY_TYPE
    assert rt.launch_kernel("fill", ((a, np.float64, (100,)), 1), stream) == C.ACL_ERROR_INVALID_PARAM
    assert rt.launch_kernel("no_such_kernel", (), stream) == C.ACL_ERROR_INVALID_PARAM
    rt.free(a)
    assert rt.launch_kernel("fill", (a, 1), stream) == C.ACL_ERROR_INVALID_PARAM   # freed
    with pytest.raises(TypeError):
        rt.launch_kernel("noop", 5, stream)


# ---- errors and exception info ---------------------------------------------------------------

def test_last_error_get_clears_peek_does_not():
    acl.rt.get_last_error(0)
    assert acl.rt.set_device(-1) != 0
    assert acl.rt.peek_at_last_error(0) != 0
    assert acl.rt.peek_at_last_error(0) != 0
    assert acl.rt.get_last_error(0) == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert acl.rt.get_last_error(0) == 0
    assert acl.rt.get_last_error(1) == C.ACL_ERROR_INVALID_PARAM


def test_exception_info_callback(rt, stream):
    with pytest.raises(TypeError):
        rt.set_exception_info_callback(5)
    infos = []
    assert rt.set_exception_info_callback(infos.append) == 0
    rt.launch_kernel(lambda: 1 / 0, (), stream)
    assert rt.synchronize_stream(stream) == C.ACL_ERROR_RT_AICORE_EXCEPTION
    (info,) = infos
    assert rt.get_error_code_from_exception_info(info) == C.ACL_ERROR_RT_AICORE_EXCEPTION
    assert rt.get_stream_id_from_exception_info(info) == rt.stream_get_id(stream)[0]
    assert rt.get_device_id_from_exception_info(info) == 0
    assert rt.get_task_id_from_exception_info(info) == 1
    # (the OS thread id, a uint32 in CANN; Python's own ident can exceed 32 bits)
    assert rt.get_thread_id_from_exception_info(info) == threading.get_native_id() < 1 << 32
    assert rt.get_thread_id_from_exception_info(12345) == 0xFFFFFFFF
    assert rt.get_task_id_from_exception_info(12345) == 0xFFFFFFFF
    assert rt.set_exception_info_callback(None) == 0
    rt.launch_kernel(lambda: 1 / 0, (), stream)
    rt.synchronize_stream(stream)
    assert len(infos) == 1


def test_exception_info_callback_hears_of_a_device_side_wait_that_timed_out(rt, stream):
    # (a timed-out wait failed its stream without telling the callbacks: only tasks that ran did)
    infos = []
    assert rt.set_exception_info_callback(infos.append) == 0
    notify, ret = rt.create_notify(0)
    assert ret == 0
    assert rt.wait_and_reset_notify(notify, stream, 50) == 0  # never recorded: times out
    assert rt.synchronize_stream(stream) == C.ACL_ERROR_RT_WAIT_TIMEOUT
    deadline = time.monotonic() + 5  # (the watchdog thread calls it; the host may wake first)
    while not infos and time.monotonic() < deadline:
        time.sleep(0.01)
    (info,) = infos
    assert rt.get_error_code_from_exception_info(info) == C.ACL_ERROR_RT_WAIT_TIMEOUT
    assert rt.get_stream_id_from_exception_info(info) == rt.stream_get_id(stream)[0]
    assert rt.destroy_notify(notify) == 0


@pytest.mark.cpu_only  # (the cpu backend's watchdog fires timed waits in real time)
@pytest.mark.serial  # (bounds on wall time: alone, after the rest)
def test_a_blocking_exception_callback_holds_up_no_other_waits_timeout(rt):
    # (the callbacks ran on the watchdog thread: one that blocked for 1 s held every other
    # timed wait's timeout back until it returned)
    s1, _ = rt.create_stream()
    s2, _ = rt.create_stream()
    n1, _ = rt.create_notify(0)
    n2, _ = rt.create_notify(0)
    assert rt.set_exception_info_callback(lambda info: time.sleep(1.0)) == 0
    assert rt.wait_and_reset_notify(n1, s1, 50) == 0
    assert rt.wait_and_reset_notify(n2, s2, 300) == 0
    t0 = time.monotonic()
    assert rt.synchronize_stream(s2) == C.ACL_ERROR_RT_WAIT_TIMEOUT
    assert time.monotonic() - t0 < 0.9
    assert rt.synchronize_stream(s1) == C.ACL_ERROR_RT_WAIT_TIMEOUT
    rt.destroy_notify(n1), rt.destroy_notify(n2)


# ---- util ------------------------------------------------------------------------------------

def test_util_conversions(rt):
    with pytest.raises(ValueError):
        acl.util.bytes_to_ptr("text")
    with pytest.raises(TypeError):
        acl.util.ptr_to_bytes(None, 4)
    assert acl.util.ptr_to_bytes(0xBAD, 4) is None
    assert acl.util.ptr_to_numpy(0xBAD, (4,), C.NPY_FLOAT) is None
    dev, _ = rt.malloc(64, 0)
    assert acl.util.ptr_to_numpy(dev, (4,), 999) is None
    view = acl.util.ptr_to_numpy(dev, (2, 2), C.NPY_DOUBLE)
    view[:] = 7.0                                          # zero-copy: writes the device memory
    assert acl.util.ptr_to_numpy(dev, (4,), C.NPY_DOUBLE).tolist() == [7.0] * 4
    assert acl.util.ptr_to_numpy(dev, (100,), C.NPY_DOUBLE) is None   # past the allocation
    arr = np.arange(8, dtype=np.float64)
    with pytest.warns(Warning, match="will be deprecated"):
        ptr = acl.util.numpy_to_ptr(arr)
    assert rt.memcpy(dev, 64, ptr, 64, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert acl.util.ptr_to_numpy(dev, (8,), C.NPY_DOUBLE).tolist() == arr.tolist()
    with pytest.warns(Warning, match="will be deprecated"):
        ptr2, contiguous = acl.util.numpy_contiguous_to_ptr(arr[::2])
    assert contiguous.tolist() == [0, 2, 4, 6] and acl.util.ptr_to_bytes(ptr2, 32) == contiguous.tobytes()


def test_numpy_to_ptr_of_a_strided_array_gives_the_raw_pointer_into_its_memory(rt):
    # As pyACL: a warning, then the raw data pointer, through which a copy moves the raw bytes
    # of the memory the array lies in (its base array), and never past that memory.
    dev, _ = rt.malloc(4096, 0)
    base = np.arange(1024, dtype=np.float32)
    with pytest.warns(RuntimeWarning), pytest.warns(Warning, match="will be deprecated"):
        ptr = acl.util.numpy_to_ptr(base[::2])
    assert rt.memcpy(dev, 4096, ptr, 4096, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
    assert acl.util.ptr_to_numpy(dev, (1024,), C.NPY_FLOAT).tolist() == base.tolist()
    with pytest.warns(RuntimeWarning), pytest.warns(Warning, match="will be deprecated"):
        ptr = acl.util.numpy_to_ptr(base[::-1])  # points at the last element: 4 bytes are left
    assert rt.memcpy(dev, 4096, ptr, 8, C.ACL_MEMCPY_HOST_TO_DEVICE) == C.ACL_ERROR_INVALID_PARAM
    assert rt.memcpy(dev, 4096, ptr, 4, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0


def test_bytes_to_ptr_lets_copies_write_into_bytes(rt):
    dev, _ = rt.malloc(16, 0)
    rt.memset(dev, 16, 9, 16)
    out = bytes(16)
    assert rt.memcpy(acl.util.bytes_to_ptr(out), 16, dev, 16, C.ACL_MEMCPY_DEVICE_TO_HOST) == 0
    assert out == b"\x09" * 16


def test_threads_start_and_stop():
    got = []
    tid, ret = acl.util.start_thread(got.append, "arg")
    assert ret == 0 and acl.util.stop_thread(tid) == 0 and got == ["arg"]
    tid, _ = acl.util.start_thread(lambda: got.append("no arg"), None)
    assert acl.util.stop_thread(tid) == 0 and got[-1] == "no arg"
    tid, _ = acl.util.start_thread(lambda a: 1 / 0, 1)
    with pytest.raises(RuntimeError, match="exception=ZeroDivisionError"):
        acl.util.stop_thread(tid)
    assert acl.util.stop_thread(tid) != 0      # already joined
    with pytest.raises(TypeError):
        acl.util.start_thread(5, None)


@pytest.mark.parametrize("name, keywords", [
    ("bytes_to_ptr", {"data": b"x"}), ("ptr_to_bytes", {"ptr": 0, "size": 1}),
    ("numpy_to_ptr", {"ndarray": np.zeros(1)}), ("numpy_contiguous_to_ptr", {"ndarray": np.zeros(1)}),
    ("ptr_to_numpy", {"ptr": 0, "shape": (1,), "npy_type": 1}),
    ("start_thread", {"fn": print, "args": None}), ("stop_thread", {"thread_id": 1})], ids=str)
def test_util_functions_take_positional_arguments_only(name, keywords):
    # (pyACL's C functions are METH_VARARGS: start_thread once took fn=, args= keywords)
    assert sorted(acl.util.__all__) == sorted(["bytes_to_ptr", "ptr_to_bytes", "numpy_to_ptr",
                                               "numpy_contiguous_to_ptr", "ptr_to_numpy",
                                               "start_thread", "stop_thread"])  # (all 7 here)
    with pytest.raises(TypeError, match="unexpected keyword"):
        getattr(acl.util, name)(**keywords)


@pytest.mark.parametrize("args", [(), (print,), (print, None, 1)], ids=len)
def test_start_thread_with_a_wrong_count_keeps_cpythons_parse_message(args):
    # (it said "start_thread() missing 2 required positional arguments: 'fn' and 'args'")
    with pytest.raises(TypeError, match=rf"^function takes exactly 2 arguments \({len(args)} given\)$"):
        acl.util.start_thread(*args)


def test_synchronizing_a_stream_from_its_own_blocking_callback_is_107011(rt, stream, reporter):
    other, _ = rt.create_stream()
    rt.subscribe_report(reporter.tid, stream)
    codes = []
    rt.launch_callback(lambda d: codes.extend([rt.synchronize_stream(stream), rt.synchronize_stream(other)]),
                       None, C.ACL_CALLBACK_BLOCK, stream)
    assert rt.synchronize_stream(stream) == 0
    assert codes == [C.ACL_ERROR_RT_STREAM_SUBSCRIBE, 0]
    rt.unsubscribe_report(reporter.tid, stream)


def test_threads_share_the_device_and_the_last_reset_releases_it():
    errors = []
    start = threading.Barrier(4)

    def worker(k):
        try:
            assert acl.rt.set_device(0) == 0
            start.wait(10)
            s, ret = acl.rt.create_stream()
            assert ret == 0
            dev, ret = acl.rt.malloc(64, 0)
            assert ret == 0
            out = bytes(64)
            acl.rt.launch_kernel("fill", ((dev, np.uint8, (64,)), k), s)
            assert acl.rt.memcpy_async(acl.util.bytes_to_ptr(out), 64, dev, 64, 2, s) == 0
            assert acl.rt.synchronize_stream(s) == 0 and out == bytes([k]) * 64
            assert acl.rt.free(dev) == 0 and acl.rt.destroy_stream(s) == 0
            start.wait(10)
            assert acl.rt.reset_device(0) == 0
        except Exception as exc:  # reported below with the thread's number
            errors.append((k, exc))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert context.primary_uses(0) == 0


def test_destroy_stream_behind_an_unrecorded_notify_says_why_at_the_callers_line(rt, monkeypatch):
    # aclrtDestroyStream waits for the stream's tasks and takes no timeout: behind a notify that
    # only the host can still record it waits, and the stall warning names the wait and points
    # at the program's own call (not a line inside ascentrt).
    monkeypatch.setenv("ASCENTRT_DEADLOCK_CHECK_S", "0.05")
    monkeypatch.setenv("ASCENTRT_STALL_WARN_S", "0.2")
    stream, ret = rt.create_stream()
    assert ret == 0
    notify, ret = rt.create_notify(0)
    assert rt.wait_and_reset_notify(notify, stream, 0) == 0
    other, _ = rt.create_stream()
    ctx, _ = rt.get_context()

    def record_later():  # (a thread of its own needs the context, as on the device)
        rt.set_context(ctx)
        rt.record_notify(notify, other)
    threading.Timer(1.0, record_later).start()  # the host records it later
    with pytest.warns(RuntimeWarning, match="only the host can record it") as caught:
        assert rt.destroy_stream(stream) == 0
    assert {w.filename for w in caught} == {__file__}
    assert rt.destroy_stream(other) == 0
    assert rt.destroy_notify(notify) == 0


# ---- contexts: a thread needs one, and a stream belongs to one --------------------------------
# (a worker thread that forgot set_context, or used a stream of another context, was served:
# the classic porting bug passed here and failed on the device)

def test_a_thread_without_a_context_is_refused_107002_by_stream_and_copy_calls(rt, stream):
    d, _ = rt.malloc(64, 0)
    h, _ = rt.malloc_host(64)
    event, _ = rt.create_event()
    got = []

    def worker():
        got.extend([rt.get_context()[1], rt.memcpy_async(d, 64, h, 64, 1, stream),
                    rt.record_event(event, stream), rt.synchronize_stream(stream),
                    rt.memcpy(d, 64, h, 64, 1), rt.memset(d, 64, 0, 64), rt.destroy_stream(stream)])
    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert got == [C.ACL_ERROR_RT_CONTEXT_NULL] * 7
    ctx, _ = rt.get_context()
    done = []

    def with_context():
        rt.set_context(ctx)
        done.append(rt.memcpy_async(d, 64, h, 64, 1, stream))
        done.append(rt.synchronize_stream(stream))
    t = threading.Thread(target=with_context)
    t.start()
    t.join(10)
    assert done == [0, 0]
    assert rt.destroy_event(event) == 0 and rt.free(d) == 0 and rt.free_host(h) == 0


def test_a_stream_of_another_context_is_refused_107003_where_cann_checks(rt):
    first, _ = rt.create_context(0)
    theirs, _ = rt.create_stream()
    event, _ = rt.create_event_with_flag(C.ACL_EVENT_SYNC)
    d, _ = rt.malloc(64, 0)
    second, _ = rt.create_context(0)  # current now
    refused = [rt.record_event(event, theirs), rt.stream_wait_event(theirs, event),
               rt.reset_event(event, theirs), rt.memset_async(d, 64, 0, 64, theirs),
               rt.set_stream_failure_mode(theirs, 1), rt.destroy_stream(theirs)]
    assert refused == [C.ACL_ERROR_RT_STREAM_CONTEXT] * 6
    assert rt.synchronize_stream(theirs) == 0  # (a synchronize checks only for a context)
    assert rt.set_context(first) == 0
    assert rt.destroy_stream(theirs) == 0
    for call in (lambda: rt.destroy_context(second), lambda: rt.destroy_context(first)):
        assert call() == 0


def test_malloc_pads_each_allocation_by_32_bytes_as_cann_does(rt):
    # (a copy of round_up(size, 32) + 32 bytes into malloc(size) is in bounds on the device)
    d, _ = rt.malloc(1000, 0)
    h, _ = rt.malloc_host(2048)
    assert [rt.memcpy(d, 2048, h, n, 1) for n in (1000, 1024, 1056, 1057)] == \
        [0, 0, 0, C.ACL_ERROR_INVALID_PARAM]
    assert rt.free(d) == 0 and rt.free_host(h) == 0


def test_malloc_align32_only_rounds_to_32_bytes(rt):
    # (aclrtMallocAlign32 adds no 32 bytes of padding, unlike aclrtMalloc)
    d, _ = rt.malloc_align32(1000, 0)
    h, _ = rt.malloc_host(2048)
    assert [rt.memcpy(d, 2048, h, n, 1) for n in (1024, 1056)] == [0, C.ACL_ERROR_INVALID_PARAM]
    assert rt.free(d) == 0 and rt.free_host(h) == 0
