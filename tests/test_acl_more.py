"""ascentrt.acl's device-info, resource-count, attribute, timeout and system-parameter calls
against CANN's semantics: normal use, bad handles and ints, and the sim backend's values."""

import json
import threading
import time
import warnings

import numpy as np
import pytest

import ascentrt as art
import ascentrt.acl as acl
from ascentrt import context
from ascentrt.acl import constants as C
from ascentrt.device import Device
from ascentrt.errors import MemcpyKindWarning

from subprocess_util import run_program
from test_acl_conformance import released_without_device, rt, stream  # noqa: F401  (fixtures: device 0 set, a stream)


# ---- get_device_info / device_get_uuid / get_primary_ctx_state --------------------------------

def test_device_info_answers_from_the_device_properties(rt):
    props = Device(0).properties
    assert rt.get_device_info(0, C.ACL_DEV_ATTR_AICORE_CORE_NUM) == (props.compute_units, 0)
    assert rt.get_device_info(0, C.ACL_DEV_ATTR_CUBE_CORE_NUM) == (props.compute_units, 0)
    assert rt.get_device_info(0, C.ACL_DEV_ATTR_VECTOR_CORE_NUM) == (props.compute_units, 0)
    assert rt.get_device_info(0, C.ACL_DEV_ATTR_AICPU_CORE_NUM) == (0, 0)  # the cpu backend has none
    assert rt.get_device_info(0, C.ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE) == (Device(0).mem_info()[1], 0)
    assert rt.get_device_info(0, C.ACL_DEV_ATTR_PHY_CHIP_ID) == (0, 0)
    assert rt.get_device_info(0, C.ACL_DEV_ATTR_IS_VIRTUAL) == (0, 0)


def test_device_info_refuses_unknown_and_unmodelled_attributes_and_bad_devices(rt):
    assert rt.get_device_info(0, 999) == (0, C.ACL_ERROR_RT_PARAM_INVALID)
    assert rt.get_device_info(0, 0) == (0, C.ACL_ERROR_RT_PARAM_INVALID)
    for attr in (C.ACL_DEV_ATTR_WARP_SIZE, C.ACL_DEV_ATTR_L2_CACHE_SIZE, C.ACL_DEV_ATTR_SUPER_POD_ID,
                 C.ACL_DEV_ATTR_NPU_ARCH):
        assert rt.get_device_info(0, attr) == (0, C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
    assert rt.get_device_info(64, C.ACL_DEV_ATTR_AICORE_CORE_NUM) == (0, C.ACL_ERROR_RT_PARAM_INVALID)
    assert rt.get_device_info(-1, C.ACL_DEV_ATTR_AICORE_CORE_NUM)[1] == C.ACL_ERROR_RT_PARAM_INVALID
    with pytest.raises(TypeError, match="acl.rt.get_device_info args parse failed"):
        rt.get_device_info(0, None)


def test_device_info_needs_no_context():
    released_without_device()
    assert acl.rt.get_device_info(0, C.ACL_DEV_ATTR_AICORE_CORE_NUM)[1] == 0


def test_uuid_is_16_bytes_stable_and_per_device(rt):
    first, ret = rt.device_get_uuid(0)
    assert ret == 0 and set(first) == {"bytes"}
    assert len(first["bytes"]) == 16 and all(type(b) is int and 0 <= b < 256 for b in first["bytes"])
    assert rt.device_get_uuid(0) == (first, 0)
    assert rt.device_get_uuid(-1) == (None, C.ACL_ERROR_RT_INVALID_DEVICEID)
    assert rt.device_get_uuid(64) == (None, C.ACL_ERROR_RT_INVALID_DEVICEID)


def test_uuid_is_the_same_in_another_run_and_differs_by_device():
    code = """
        import json
        import ascentrt.acl as acl
        print(json.dumps([acl.rt.device_get_uuid(i)[0]["bytes"] for i in range(2)]))
    """
    a = json.loads(run_program(code, {"ASCENTRT_DEVICES": "2"}))
    b = json.loads(run_program(code, {"ASCENTRT_DEVICES": "2"}))
    assert a == b and a[0] != a[1]
    assert acl.rt.device_get_uuid(0)[0]["bytes"] == a[0]  # (this process: cpu backend too)


def test_primary_context_state_follows_set_and_reset():
    released_without_device()
    assert acl.rt.get_primary_ctx_state(0) == (0, 0, 0)
    assert acl.rt.set_device(0) == 0
    try:
        assert acl.rt.get_primary_ctx_state(0) == (1, 0, 0)
    finally:
        assert acl.rt.reset_device(0) == 0
        context.set_current_context(None)
    assert acl.rt.get_primary_ctx_state(0) == (0, 0, 0)
    assert acl.rt.get_primary_ctx_state(64) == (0, 0, C.ACL_ERROR_RT_INVALID_DEVICEID)


# ---- resource counts -------------------------------------------------------------------------

def test_stream_and_event_counts_fall_with_each_one_made(rt):
    streams, ret = rt.get_stream_available_num()
    assert ret == 0 and streams > 1000
    events, ret = rt.get_event_avail_num()
    assert ret == 0 and events > 1000
    s, _ = rt.create_stream()
    e, _ = rt.create_event_with_flag(C.ACL_EVENT_SYNC)     # takes its device event at creation
    assert rt.get_stream_available_num() == (streams - 1, 0)
    assert rt.get_event_avail_num() == (events - 1, 0)
    assert rt.destroy_stream(s) == 0 and rt.destroy_event(e) == 0
    assert rt.get_stream_available_num() == (streams, 0)
    assert rt.get_event_avail_num() == (events, 0)


@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_plain_events_take_their_device_event_at_record_on_every_backend(backend):
    # (reference §8: create_event takes its resources at record time; sim counted it never,
    # cpu from its creation)
    out = run_program("""
        import ascentrt.acl as acl
        from ascentrt.acl import constants as C
        rt = acl.rt
        assert rt.set_device(0) == 0
        s, _ = rt.create_stream()
        n0, _ = rt.get_event_avail_num()
        plain = [rt.create_event()[0] for _ in range(7)]
        ex, _ = rt.create_event_ex_with_flag(C.ACL_EVENT_SYNC)
        n1, _ = rt.get_event_avail_num()
        for e in plain + [ex]:
            assert rt.record_event(e, s) == 0
        assert rt.record_event(plain[0], s) == 0          # (a second record takes no other)
        assert rt.synchronize_stream(s) == 0
        n2, _ = rt.get_event_avail_num()
        assert rt.destroy_event(plain[0]) == 0
        n3, _ = rt.get_event_avail_num()
        print(n0 - n1, n0 - n2, n0 - n3)
    """, {"ASCENTRT_BACKEND": backend})
    assert out.split() == ["0", "7", "6"]


def test_sim_a_plain_event_recorded_past_the_device_events_is_refused():
    out = run_program("""
        import ascentrt.acl as acl
        from ascentrt.acl import constants as C
        rt = acl.rt
        assert rt.set_device(0) == 0
        s, _ = rt.create_stream()
        plain = [rt.create_event()[0] for _ in range(3)]
        print([rt.record_event(e, s) for e in plain], rt.get_event_avail_num()[0])
        assert rt.destroy_event(plain[0]) == 0
        print(rt.record_event(plain[2], s), rt.synchronize_stream(s))
    """, {"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_VARY": '{"max_events": 2}'})
    assert out.splitlines() == ["[0, 0, 207007] 0", "0 0"]


def test_sim_notifies_beyond_the_preset_maximum_are_refused_with_207009():
    out = run_program("""
        import ascentrt.acl as acl
        from ascentrt.backends.presets import load
        rt = acl.rt
        assert rt.set_device(0) == 0
        made = [rt.create_notify(0) for _ in range(4)]
        print([ret for _, ret in made])
        assert rt.destroy_notify(made[0][0]) == 0
        print(rt.create_notify(0)[1], load("ascend910b").max_notifies, load("ascend310p").max_notifies)
    """, {"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_VARY": '{"max_notifies": 3}'})
    assert out.splitlines() == ["[0, 0, 0, 207009]", "0 8192 1024"]  # (CANN aclrtCreateNotify)


def test_counts_on_the_cpu_backend_are_the_no_limit_value(rt):
    from ascentrt.acl._event import NO_LIMIT
    assert NO_LIMIT == 1 << 30
    assert rt.get_stream_available_num()[0] <= NO_LIMIT


def test_counts_need_a_context():
    released_without_device()
    assert acl.rt.get_stream_available_num() == (0, C.ACL_ERROR_RT_CONTEXT_NULL)
    assert acl.rt.get_event_avail_num() == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


# ---- get_thread_last_task_id -----------------------------------------------------------------

def test_last_task_id_is_this_threads_last_task_on_a_created_stream(rt, stream):
    n = 256
    dev, _ = rt.malloc(n, 0)
    host, _ = rt.malloc_host(n)
    assert rt.memcpy_async(dev, n, host, n, C.ACL_MEMCPY_HOST_TO_DEVICE, stream) == 0
    first, ret = rt.get_thread_last_task_id()
    assert ret == 0 and first > 0
    assert rt.memset_async(dev, n, 1, n, stream) == 0
    assert rt.get_thread_last_task_id() == (first + 1, 0)
    assert rt.launch_kernel("noop", (), stream) == 0
    assert rt.get_thread_last_task_id() == (first + 2, 0)
    # The default stream is not one the program created: CANN does not count its tasks.
    assert rt.memset_async(dev, n, 2, n, 0) == 0
    assert rt.get_thread_last_task_id() == (first + 2, 0)
    seen = []
    t = threading.Thread(target=lambda: seen.append(acl.rt.get_thread_last_task_id()))
    t.start()
    t.join()
    assert seen == [(0, 0)]  # another thread has submitted nothing
    assert rt.synchronize_stream(stream) == 0
    assert rt.free(dev) == 0 and rt.free_host(host) == 0


def test_last_task_id_matches_the_exception_infos_task_id(rt, stream):
    infos = []
    assert rt.set_exception_info_callback(lambda info: infos.append(
        acl.rt.get_task_id_from_exception_info(info))) == 0

    def boom():
        raise RuntimeError("kernel failed")
    assert rt.launch_kernel(boom, (), stream) == 0
    task_id, _ = rt.get_thread_last_task_id()
    assert rt.synchronize_stream(stream) != 0
    assert infos == [task_id]


# ---- operator execution timeouts -------------------------------------------------------------

@pytest.fixture
def op_timeout(rt):
    rt.set_op_execute_timeout_v2(0)  # (from the default, whatever an earlier test set)
    yield rt
    rt.set_op_execute_timeout_v2(0)  # back to the default (the most)


def test_op_timeout_rounds_to_whole_intervals_and_reads_back(op_timeout):
    rt = op_timeout
    interval, ret = rt.get_op_timeout_interval()
    assert ret == 0 and interval == (1 << 32) // 1000
    assert rt.get_op_execute_timeout() == (254 * interval // 1000, 0)  # default: the most (1091 s)
    assert rt.set_op_execute_timeout_v2(1) == (interval, 0)            # up to one interval
    assert rt.get_op_execute_timeout() == (interval // 1000, 0)
    assert rt.set_op_execute_timeout_v2(3 * interval - 5) == (3 * interval, 0)
    assert rt.set_op_execute_timeout_v2(1 << 40) == (254 * interval, 0)  # clamped
    assert rt.set_op_execute_timeout_v2(0) == (254 * interval, 0)        # 0: the most
    assert rt.set_op_execute_time_out(10) == 0                           # seconds
    assert rt.get_op_execute_timeout() == (3 * interval // 1000, 0)
    assert rt.set_op_execute_time_out(0) == 0
    assert rt.get_op_execute_timeout() == (254 * interval // 1000, 0)


def test_op_timeout_argument_parsing(op_timeout):
    rt = op_timeout
    with pytest.raises(TypeError, match="acl.rt.set_op_execute_timeout_v2 args parse failed"):
        rt.set_op_execute_timeout_v2(1.5)
    with pytest.raises(TypeError):
        rt.set_op_execute_time_out("10")
    with pytest.raises(TypeError):  # (a k argument: a Python int only, as CPython parses it)
        rt.set_op_execute_timeout_v2(np.uint64(2))
    assert rt.set_op_execute_timeout_v2(2) == (rt.get_op_timeout_interval()[0], 0)


# ---- memory: malloc_with_cfg, malloc_host_with_cfg, pointer_get_attributes --------------------

def test_malloc_with_cfg_allocates_like_malloc(rt):
    ptr, ret = rt.malloc_with_cfg(1000, C.ACL_MEM_MALLOC_HUGE_FIRST, {})
    assert ret == 0 and ptr
    cfg = {"numAttrs": 2, "attrs": [{"attr": C.ACL_RT_MEM_ATTR_MODULE_ID, "value": {"moduleId": 7}},
                                    {"attr": C.ACL_RT_MEM_ATTR_DEVICE_ID, "value": {"deviceId": 0}}]}
    other, ret = rt.malloc_with_cfg(64, 0, cfg)
    assert ret == 0
    assert rt.memset(ptr, 1000, 3, 1000) == 0
    assert rt.free(ptr) == 0 and rt.free(other) == 0


def test_malloc_with_cfg_checks_its_config(rt):
    bad_attr = {"numAttrs": 1, "attrs": [{"attr": C.ACL_RT_MEM_ATTR_VA_FLAG, "value": {"rsv": [1]}}]}
    assert rt.malloc_with_cfg(64, 0, bad_attr) == (0, C.ACL_ERROR_RT_PARAM_INVALID)
    bad_dev = {"numAttrs": 1, "attrs": [{"attr": C.ACL_RT_MEM_ATTR_DEVICE_ID, "value": {"deviceId": 64}}]}
    assert rt.malloc_with_cfg(64, 0, bad_dev) == (0, C.ACL_ERROR_RT_INVALID_DEVICEID)
    assert rt.malloc_with_cfg(0, 0, {}) == (0, C.ACL_ERROR_INVALID_PARAM)
    for cfg in (None, [], {"numAttrs": 2, "attrs": []}, {"numAttrs": 1, "attrs": [{"attr": 1}]},
                {"numAttrs": 1, "attrs": [{"attr": 1, "value": {"other": 1}}]}, {"attrs": 3}):
        with pytest.raises(TypeError):
            rt.malloc_with_cfg(64, 0, cfg)


def test_malloc_with_cfg_on_another_device():
    out = run_program("""
        import ascentrt.acl as acl
        assert acl.rt.set_device(0) == 0
        cfg = {"numAttrs": 1, "attrs": [{"attr": 2, "value": {"deviceId": 1}}]}
        ptr, ret = acl.rt.malloc_with_cfg(4096, 0, cfg)
        attrs, ret2 = acl.rt.pointer_get_attributes(ptr)
        print(ret, ret2, attrs["location"]["type"], attrs["location"]["id"], acl.rt.free(ptr))
    """, {"ASCENTRT_DEVICES": "2"})
    assert out.split() == ["0", "0", "1", "1", "0"]


def test_malloc_follows_the_current_context_across_devices_threads_and_destroys():
    # (the compiled malloc keeps the last context's device memory: a switch of context, another
    # thread's context, or a destroyed context must never get memory of the wrong device)
    out = run_program("""
        import threading
        import ascentrt.acl as acl
        def where(ptr):
            attrs, ret = acl.rt.pointer_get_attributes(ptr)
            return attrs["location"]["id"]
        ctxs = [acl.rt.create_context(d)[0] for d in (0, 1)]
        seen = []
        for i in range(6):
            assert acl.rt.set_context(ctxs[i % 2]) == 0
            ptr, ret = acl.rt.malloc(4096, 0)
            seen.append(where(ptr))
            assert acl.rt.free(ptr) == 0
        def other():
            acl.rt.set_context(ctxs[1])
            ptr, _ = acl.rt.malloc(64, 0)
            seen.append(where(ptr))
            acl.rt.free(ptr)
        acl.rt.set_context(ctxs[0])
        ptr, _ = acl.rt.malloc(64, 0)
        t = threading.Thread(target=other); t.start(); t.join()
        seen.append(where(ptr))
        acl.rt.free(ptr)
        ready, gone, res = threading.Event(), threading.Event(), []
        def late():  # (its context is the last one seen, then destroyed under it)
            acl.rt.set_context(ctxs[1])
            ptr, _ = acl.rt.malloc(64, 0)
            acl.rt.free(ptr)
            ready.set()
            gone.wait()
            res.append(acl.rt.malloc(64, 0))
        t = threading.Thread(target=late); t.start()
        ready.wait()
        assert acl.rt.destroy_context(ctxs[1]) == 0
        gone.set(); t.join()
        print(*seen, res[0][0], res[0][1] != 0)
    """, {"ASCENTRT_DEVICES": "2"})
    assert out.split() == ["0", "1", "0", "1", "0", "1", "1", "0", "0", "True"]


def test_malloc_with_cfg_needs_a_context():
    released_without_device()
    assert acl.rt.malloc_with_cfg(64, 0, {}) == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


def test_malloc_host_with_cfg(rt):
    ptr, ret = rt.malloc_host_with_cfg(100, {})
    assert ret == 0 and ptr
    cfg = {"numAttrs": 2, "attrs": [{"attr": C.ACL_RT_MEM_ATTR_MODULE_ID, "value": {"moduleId": 3}},
                                    {"attr": C.ACL_RT_MEM_ATTR_VA_FLAG, "value": {"rsv": [1]}}]}
    other, ret = rt.malloc_host_with_cfg(100, cfg)
    assert ret == 0
    dev_attr = {"numAttrs": 1, "attrs": [{"attr": C.ACL_RT_MEM_ATTR_DEVICE_ID, "value": {"deviceId": 0}}]}
    assert rt.malloc_host_with_cfg(100, dev_attr) == (0, C.ACL_ERROR_RT_PARAM_INVALID)
    assert rt.malloc_host_with_cfg(0, {}) == (0, C.ACL_ERROR_INVALID_PARAM)
    with pytest.raises(TypeError, match="pyCfg is not dict"):
        rt.malloc_host_with_cfg(100, None)
    assert rt.free_host(ptr) == 0 and rt.free_host(other) == 0


def test_pointer_attributes_of_device_host_and_unknown_memory(rt):
    dev, _ = rt.malloc(1000, 0)
    host, _ = rt.malloc_host(1000)
    attrs, ret = rt.pointer_get_attributes(dev + 100)  # inside the allocation
    assert ret == 0
    assert attrs["location"] == {"id": 0, "type": C.ACL_MEM_LOCATION_TYPE_DEVICE}
    assert attrs["page_size"] > 0 and attrs["rsv"] == [0, 0, 0, 0]
    attrs, ret = rt.pointer_get_attributes(host)
    assert ret == 0 and attrs["location"]["type"] == C.ACL_MEM_LOCATION_TYPE_HOST
    data = bytes(64)
    attrs, ret = rt.pointer_get_attributes(acl.util.bytes_to_ptr(data))  # registered pageable
    assert ret == 0 and attrs["location"]["type"] == C.ACL_MEM_LOCATION_TYPE_UNREGISTERED
    assert rt.free(dev) == 0 and rt.free_host(host) == 0
    attrs, ret = rt.pointer_get_attributes(dev)  # freed: no longer the runtime's memory
    assert ret == 0 and attrs["location"]["type"] == C.ACL_MEM_LOCATION_TYPE_UNREGISTERED
    assert rt.pointer_get_attributes(0) == (None, C.ACL_ERROR_INVALID_PARAM)
    with pytest.raises(TypeError, match="acl.rt.pointer_get_attributes args parse failed"):
        rt.pointer_get_attributes(None)


# ---- stream attributes -----------------------------------------------------------------------

def test_stream_failure_mode_attribute_reads_and_sets_the_streams_mode(rt, stream):
    assert rt.get_stream_attribute(stream, C.ACL_STREAM_ATTR_FAILURE_MODE) == ({"failureMode": 0}, 0)
    assert rt.set_stream_attribute(stream, C.ACL_STREAM_ATTR_FAILURE_MODE, {"failureMode": 1}) == 0
    assert rt.get_stream_attribute(stream, C.ACL_STREAM_ATTR_FAILURE_MODE) == ({"failureMode": 1}, 0)
    from ascentrt.acl._api import STREAMS
    from ascentrt.stream import FailureMode
    assert STREAMS.get(stream).failure_mode == FailureMode.STOP


def test_stream_priority_attribute_reads_the_priority(rt):
    s, _ = rt.create_stream_with_config(5, 0)
    assert rt.get_stream_attribute(s, C.ACL_STREAM_ATTR_PRIORITY) == ({"reserved": [5, 0, 0, 0]}, 0)
    assert rt.set_stream_attribute(s, C.ACL_STREAM_ATTR_PRIORITY, {"reserved": [1, 0, 0, 0]}) == \
        C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert rt.destroy_stream(s) == 0


def test_stream_attributes_bad_input(rt, stream):
    assert rt.get_stream_attribute(stream, 0) == (None, C.ACL_ERROR_RT_PARAM_INVALID)
    assert rt.get_stream_attribute(stream, 9) == (None, C.ACL_ERROR_RT_PARAM_INVALID)
    assert rt.get_stream_attribute(stream, C.ACL_STREAM_ATTR_USER_CUSTOM_TAG) == \
        (None, C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
    assert rt.set_stream_attribute(stream, 1, {"failureMode": 2}) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.get_stream_attribute(0xDEAD0, 1) == (None, C.ACL_ERROR_RT_INVALID_HANDLE)
    assert rt.set_stream_attribute(0xDEAD0, 1, {"failureMode": 1}) == C.ACL_ERROR_RT_INVALID_HANDLE
    assert rt.get_stream_attribute(0, 1) == ({"failureMode": 0}, 0)  # 0: the default stream
    with pytest.raises(TypeError, match="the aclrtStreamAttrValue argument is not dict"):
        rt.set_stream_attribute(stream, 1, 1)
    with pytest.raises(TypeError):
        rt.set_stream_attribute(stream, 1, {"failureMode": "1"})


# ---- system parameters -----------------------------------------------------------------------

@pytest.fixture
def process_opts():
    from ascentrt.acl import _device
    saved = dict(_device._process_opts)
    yield
    _device._process_opts.update(saved)


def test_context_system_parameters_are_per_context_and_unset_until_set(rt, process_opts):
    assert rt.ctx_get_sys_param_opt(C.ACL_OPT_DETERMINISTIC) == (0, C.ACL_ERROR_RT_SYSPARAMOPT_NOT_SET)
    assert rt.ctx_set_sys_param_opt(C.ACL_OPT_DETERMINISTIC, 1) == 0
    assert rt.ctx_set_sys_param_opt(C.ACL_OPT_DETERMINISTIC, 3) == 0  # last call wins
    assert rt.ctx_get_sys_param_opt(C.ACL_OPT_DETERMINISTIC) == (3, 0)
    assert rt.get_sys_param_opt(C.ACL_OPT_DETERMINISTIC) == (3, 0)  # CANN stores it process-wide too
    primary, _ = rt.get_context()
    other, ret = rt.create_context(0)  # (now current)
    assert ret == 0
    assert rt.ctx_get_sys_param_opt(C.ACL_OPT_DETERMINISTIC) == (0, C.ACL_ERROR_RT_SYSPARAMOPT_NOT_SET)
    assert rt.set_context(primary) == 0
    assert rt.ctx_get_sys_param_opt(C.ACL_OPT_DETERMINISTIC) == (3, 0)
    assert rt.destroy_context(other) == 0


def test_context_system_parameters_bad_input(rt, process_opts):
    assert rt.ctx_set_sys_param_opt(C.ACL_OPT_ENABLE_KERNEL_EARLY_START, 1) == C.ACL_ERROR_INVALID_PARAM
    assert rt.ctx_set_sys_param_opt(-1, 0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.ctx_get_sys_param_opt(7) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.ctx_set_sys_param_opt(C.ACL_OPT_DETERMINISTIC, 4) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.ctx_set_sys_param_opt(C.ACL_OPT_ENABLE_DEBUG_KERNEL, 2) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.ctx_set_sys_param_opt(C.ACL_OPT_ENABLE_DEBUG_KERNEL, -1) == C.ACL_ERROR_RT_PARAM_INVALID
    with pytest.raises(TypeError, match="acl.rt.ctx_set_sys_param_opt args parse failed"):
        rt.ctx_set_sys_param_opt(0, 1 << 64)
    released_without_device()
    assert acl.rt.ctx_set_sys_param_opt(C.ACL_OPT_DETERMINISTIC, 1) == C.ACL_ERROR_RT_CONTEXT_NULL
    assert acl.rt.ctx_get_sys_param_opt(C.ACL_OPT_DETERMINISTIC) == (0, C.ACL_ERROR_RT_CONTEXT_NULL)


def test_process_system_parameters_default_to_0_and_need_no_context(process_opts):
    released_without_device()
    rt = acl.rt
    assert rt.get_sys_param_opt(C.ACL_OPT_ENABLE_KERNEL_EARLY_START)[1] == 0
    assert rt.set_sys_param_opt(C.ACL_OPT_ENABLE_KERNEL_EARLY_START, 1) == 0
    assert rt.get_sys_param_opt(C.ACL_OPT_ENABLE_KERNEL_EARLY_START) == (1, 0)
    assert rt.set_sys_param_opt(4, 0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.get_sys_param_opt(4) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.set_sys_param_opt(C.ACL_OPT_ENABLE_KERNEL_EARLY_START, 2) == C.ACL_ERROR_RT_PARAM_INVALID
    assert acl.get_recent_err_msg()  # the refusal says why


def test_a_fresh_process_reads_0_for_every_process_parameter():
    out = run_program("""
        import ascentrt.acl as acl
        print(*[acl.rt.get_sys_param_opt(o)[0] for o in range(4)])
    """)
    assert out.split() == ["0", "0", "0", "0"]


# ---- the sim backend: the preset's numbers ---------------------------------------------------

def test_sim_backend_answers_with_the_presets_numbers():
    out = run_program("""
        import json
        import ascentrt.acl as acl
        from ascentrt.acl import constants as C
        rt = acl.rt
        assert rt.set_device(0) == 0
        info = {a: rt.get_device_info(0, a) for a in (C.ACL_DEV_ATTR_AICPU_CORE_NUM,
                C.ACL_DEV_ATTR_AICORE_CORE_NUM, C.ACL_DEV_ATTR_VECTOR_CORE_NUM,
                C.ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE)}
        streams0, events0 = rt.get_stream_available_num()[0], rt.get_event_avail_num()[0]
        s, _ = rt.create_stream()
        e, _ = rt.create_event()  # (takes its device event only as it records: not counted)
        e2, _ = rt.create_event_with_flag(C.ACL_EVENT_SYNC)  # (takes one at creation)
        counts = [streams0, rt.get_stream_available_num()[0], events0, rt.get_event_avail_num()[0]]
        print(json.dumps({"info": info, "counts": counts, "uuid": rt.device_get_uuid(0)[0]["bytes"]}))
    """, {"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend910b"})
    got = json.loads(out)
    info = {int(k): v for k, v in got["info"].items()}
    assert info[C.ACL_DEV_ATTR_AICPU_CORE_NUM] == [6, 0]      # CANN ini Ascend910B2: ai_cpu_cnt
    assert info[C.ACL_DEV_ATTR_AICORE_CORE_NUM] == [24, 0]    # ai_core_cnt
    assert info[C.ACL_DEV_ATTR_VECTOR_CORE_NUM] == [24, 0]
    assert info[C.ACL_DEV_ATTR_TOTAL_GLOBAL_MEM_SIZE][1] == 0
    streams0, streams1, events0, events1 = got["counts"]
    assert streams0 <= 1984 and streams1 == streams0 - 1     # the preset's max_streams
    assert events0 <= 65536 and events1 == events0 - 1       # and max_events
    assert got["uuid"] != acl.rt.device_get_uuid(0)[0]["bytes"]  # another backend, another device


def test_sim_plain_and_ex_events_take_no_device_event_at_creation():
    # (on ascend310p, 1024 device events, the 1024th create_event was refused with 207007: a
    # program making an event per frame failed; CANN takes a plain event's resource at record)
    out = run_program("""
        import ascentrt.acl as acl
        from ascentrt.acl import constants as C
        rt = acl.rt
        assert rt.set_device(0) == 0
        plain = [rt.create_event()[1] for _ in range(1100)]
        ex = [rt.create_event_ex_with_flag(C.ACL_EVENT_SYNC)[1] for _ in range(1100)]
        left, _ = rt.get_event_avail_num()
        sync = [rt.create_event_with_flag(C.ACL_EVENT_SYNC)[1] for _ in range(left + 1)]
        print(set(plain), set(ex), sync[-1], set(sync[:-1]))
    """, {"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend310p"})
    assert out.split() == ["{0}", "{0}", "207007", "{0}"]  # (SYNC events are capped)


def test_sim_stream_count_reaches_0_at_the_limit():
    out = run_program("""
        import ascentrt.acl as acl
        rt = acl.rt
        assert rt.set_device(0) == 0
        left, _ = rt.get_stream_available_num()
        made = [rt.create_stream() for _ in range(left)]
        assert all(ret == 0 for _, ret in made)
        print(rt.get_stream_available_num()[0], rt.create_stream()[1])
    """, {"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend310p"})
    assert out.split() == ["0", "207008"]  # ACL_ERROR_RT_NO_STREAM_RESOURCE


def test_stream_abort_and_device_task_abort(rt=None):
    import ascentrt.acl as acl
    assert acl.rt.set_device(0) == 0
    try:
        s, _ = acl.rt.create_stream()
        d, _ = acl.rt.malloc(64, 0)
        for _ in range(3):
            assert acl.rt.memset_async(d, 64, 7, 64, s) == 0
        assert acl.rt.stream_abort(s) == 0 and acl.rt.synchronize_stream(s) == 0
        assert acl.rt.memset_async(d, 64, 1, 64, s) == 0 and acl.rt.synchronize_stream(s) == 0
        assert acl.rt.device_task_abort(0, 1000) == 0
        assert acl.rt.stream_abort(0x7fff) != 0 and acl.rt.device_task_abort(0, -5) != 0
        assert acl.rt.free(d) == 0 and acl.rt.destroy_stream(s) == 0
    finally:
        acl.rt.reset_device_force(0)


# ---- overflow mode, schedulers, capabilities, core limits, topology, id mapping ------------------

def test_device_settings_read_back_and_refuse_what_ascentrt_does_not_do(rt):
    assert rt.get_device_sat_mode() == (C.ACL_RT_OVERFLOW_MODE_INFNAN, 0)
    assert rt.set_device_sat_mode(C.ACL_RT_OVERFLOW_MODE_INFNAN) == 0
    assert rt.set_device_sat_mode(C.ACL_RT_OVERFLOW_MODE_SATURATION) == C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert rt.set_device_sat_mode(C.ACL_RT_OVERFLOW_MODE_UNDEF) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.set_ts_device(C.ACL_TS_ID_AIVECTOR) == 0
    assert rt.set_ts_device(C.ACL_TS_ID_RESERVED) == C.ACL_ERROR_INVALID_PARAM
    assert rt.get_device_capability(0, C.ACL_FEATURE_TSCPU_TASK_UPDATE_SUPPORT_AIC_AIV) == (1, 0)
    assert rt.get_device_capability(0, C.ACL_FEATURE_SYSTEM_MEMQ_EVENT_CROSS_DEV) == (0, 0)
    assert rt.get_device_capability(0, 99)[1] == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.get_device_capability(7, 1)[1] == C.ACL_ERROR_RT_INVALID_DEVICEID
    for mapping in (rt.get_logic_dev_id_by_user_dev_id, rt.get_user_dev_id_by_logic_dev_id,
                    rt.get_logic_dev_id_by_phy_dev_id, rt.get_phy_dev_id_by_logic_dev_id):
        assert mapping(0) == (0, 0) and mapping(99)[1] == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert rt.get_logic_dev_id_by_user_dev_id(-1)[1] == C.ACL_ERROR_RT_INVALID_DEVICEID
    assert rt.get_phy_dev_id_by_logic_dev_id(-1)[1] == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.get_devices_topo(0, 0)[1] == C.ACL_ERROR_RT_PARAM_INVALID
    with pytest.raises(TypeError, match="acl.rt.get_devices_topo args parse failed"):
        rt.get_devices_topo(0, "1")


def test_a_core_limit_caps_the_units_later_kernels_occupy(rt, stream):
    units = Device(0).properties.compute_units
    assert rt.get_device_res_limit(0, C.ACL_RT_DEV_RES_CUBE_CORE) == (units, 0)
    assert rt.set_device_res_limit(0, C.ACL_RT_DEV_RES_VECTOR_CORE, units + 1) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.set_device_res_limit(0, 2, 1) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.set_device_res_limit(0, C.ACL_RT_DEV_RES_CUBE_CORE, 1) == 0
    try:
        assert rt.get_device_res_limit(0, C.ACL_RT_DEV_RES_CUBE_CORE) == (1, 0)
        seen = []
        with art.profile() as prof:
            assert rt.launch_kernel(lambda: seen.append(1), (), stream) == 0
            assert rt.synchronize_stream(stream) == 0
        assert seen == [1] and [t.units for t in prof.stop().tasks if t.kind == "kernel"] == [1]
    finally:
        assert rt.reset_device_res_limit(0) == 0
    assert rt.get_device_res_limit(0, C.ACL_RT_DEV_RES_CUBE_CORE) == (units, 0)


def test_stream_overflow_detection_is_off_and_cannot_be_turned_on(rt, stream):
    assert rt.get_stream_overflow_switch(stream) == (0, 0)
    assert rt.set_stream_overflow_switch(stream, 0) == 0
    assert rt.set_stream_overflow_switch(stream, 1) == C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert rt.set_stream_overflow_switch(stream, 2) == C.ACL_ERROR_INVALID_PARAM


# ---- reduce, cache maintenance, value write / wait, and the refused memory features ----------------

def _device_array(rt, values):
    ptr, ret = rt.malloc(values.nbytes, 0)
    assert ret == 0
    art.memcpy(ptr, np.ascontiguousarray(values), values.nbytes)
    return ptr


def _read(ptr, dtype, n):
    out = np.zeros(n, dtype)
    art.memcpy(out, ptr, out.nbytes)
    return out


@pytest.mark.parametrize("kind, expect", [(C.ACL_RT_MEMCPY_SDMA_AUTOMATIC_SUM, [5, 5, 5, 5]),
                                          (C.ACL_RT_MEMCPY_SDMA_AUTOMATIC_MAX, [4, 3, 3, 4]),
                                          (C.ACL_RT_MEMCPY_SDMA_AUTOMATIC_MIN, [1, 2, 2, 1])])
def test_reduce_async_combines_in_place_after_the_stream_s_earlier_work(rt, stream, kind, expect):
    dst = _device_array(rt, np.array([1, 2, 3, 4], np.int32))
    src = _device_array(rt, np.array([4, 3, 2, 1], np.int32))
    assert rt.reduce_async(dst, src, 16, kind, C.ACL_INT32, stream, 0) == 0
    assert rt.synchronize_stream(stream) == 0
    assert list(_read(dst, np.int32, 4)) == expect
    assert rt.reduce_async(dst, src, 0, kind, C.ACL_INT32, stream, 0) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.reduce_async(dst, src, 16, 9, C.ACL_INT32, stream, 0) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.reduce_async(dst, src, 16, kind, C.ACL_INT64, stream, 0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.reduce_async(dst, src, 16, kind, C.ACL_INT32, stream, 1) == C.ACL_ERROR_INVALID_PARAM
    assert rt.reduce_async(dst, src, 4096, kind, C.ACL_INT32, stream, 0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.free(dst) == 0 and rt.free(src) == 0


def test_cmo_async_takes_its_place_in_the_stream_and_checks_its_memory(rt, stream):
    dev, _ = rt.malloc(4096, 0)
    host, _ = rt.malloc_host(4096)
    for op in range(4):
        assert rt.cmo_async(dev, 4096, op, stream) == 0
    assert rt.synchronize_stream(stream) == 0
    assert rt.cmo_async(dev, 4096, 4, stream) == C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert rt.cmo_async(host, 4096, 0, stream) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.cmo_async(dev, 0, 0, stream) == C.ACL_ERROR_INVALID_PARAM
    with pytest.raises(TypeError):
        rt.cmo_async(dev, 4096, 0)
    assert rt.free(dev) == 0 and rt.free_host(host) == 0


def test_value_wait_holds_a_stream_until_another_stream_writes_the_word(rt, stream):
    other, _ = rt.create_stream()
    word, _ = rt.malloc(8, 0)
    art.memset(word, 0, 8)
    out, _ = rt.malloc(8, 0)
    art.memset(out, 0, 8)
    assert rt.value_wait(word, 3, C.ACL_STREAM_WAIT_VALUE_GEQ, other) == 0
    assert rt.memset_async(out, 8, 9, 8, other) == 0           # held behind the wait
    assert rt.stream_query(other) == (C.ACL_STREAM_STATUS_NOT_READY, 0)
    assert rt.value_write(word, 3, 0, stream) == 0
    assert rt.synchronize_stream(other) == 0
    assert list(_read(out, np.uint8, 8)) == [9] * 8 and _read(word, np.uint64, 1)[0] == 3
    assert rt.value_write(word + 4, 1, 0, stream) == C.ACL_ERROR_RT_PARAM_INVALID  # unaligned
    assert rt.value_write(word, 1, 1, stream) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.value_wait(word, 1, 4, stream) == C.ACL_ERROR_RT_PARAM_INVALID
    assert rt.set_op_wait_timeout(1) == 0                      # a word nobody writes: 107019
    assert rt.value_wait(word, 99, C.ACL_STREAM_WAIT_VALUE_EQ, other) == 0
    assert rt.synchronize_stream(other) == C.ACL_ERROR_RT_WAIT_TIMEOUT
    assert rt.free(word) == 0 and rt.free(out) == 0 and rt.destroy_stream(other) == 0


VALUE_WAITS_PROGRAM = """
import threading, time
import numpy as np
import ascentrt as art
import ascentrt.acl as acl
from ascentrt.acl import constants as C
EQ = C.ACL_STREAM_WAIT_VALUE_EQ
acl.init(); acl.rt.set_device(0)
a, _ = acl.rt.create_stream(); b, _ = acl.rt.create_stream(); c, _ = acl.rt.create_stream()
x, _ = acl.rt.malloc(8, 0); y, _ = acl.rt.malloc(8, 0)
acl.rt.memset(x, 8, 0, 8); acl.rt.memset(y, 8, 0, 8)
# a waits for x, b for y then writes x, c writes y: each wait is the device's, holding no
# host-function thread (with one such thread, a's wait once held it and b's never ran)
assert [acl.rt.value_wait(x, 1, EQ, a), acl.rt.value_wait(y, 1, EQ, b), acl.rt.value_write(x, 1, 0, b),
        acl.rt.value_write(y, 1, 0, c)] == [0, 0, 0, 0]
started = time.monotonic()
print("chain", acl.rt.synchronize_stream(a), time.monotonic() - started < 5)
# a word nothing queued will write, and no other thread: a deadlock, said at once (it waited
# out the operator timeout, 18 minutes, silently)
acl.rt.memset(x, 8, 0, 8)
acl.rt.value_wait(x, 1, EQ, a)
started = time.monotonic()
print("alone", acl.rt.synchronize_stream(a), time.monotonic() - started < 5)
# the host writes the word itself: the wait lets go
art.memcpy(x, np.array([1], np.uint64), 8)
print("host write", acl.rt.synchronize_stream(a))
# another thread may still write it: the wait times out instead, on sim in virtual time
gate = threading.Event()
other = threading.Thread(target=gate.wait); other.start()
acl.rt.set_op_wait_timeout(3)
acl.rt.value_wait(x, 99, EQ, a)
started = time.monotonic()
print("timed", acl.rt.synchronize_stream(a), time.monotonic() - started)
gate.set(); other.join()
acl.rt.free(x); acl.rt.free(y)
for s in (a, b, c):
    acl.rt.destroy_stream(s)
acl.rt.reset_device(0); acl.finalize()
"""


@pytest.mark.cpu_only
@pytest.mark.serial  # (bounds on wall time: alone, after the rest)
@pytest.mark.parametrize("backend", ["cpu", "sim"])
def test_value_waits_are_device_side_waits_deadlocks_are_said_and_timeouts_are_the_devices(backend):
    out = run_program(VALUE_WAITS_PROGRAM, env={"ASCENTRT_BACKEND": backend}, timeout=60).splitlines()
    assert out[:3] == ["chain 0 True", f"alone {C.ACL_ERROR_RT_DEADLOCK} True", "host write 0"]
    # (3 s of wall time on cpu; on sim the 3 s pass in virtual time, after the simulator's
    # patience with a thread that may still act; it waited out 3 real seconds before)
    what, code, wall = out[3].split()
    assert (what, int(code)) == ("timed", C.ACL_ERROR_RT_WAIT_TIMEOUT)
    assert 2.9 < float(wall) < 10 if backend == "cpu" else float(wall) < 2.9


def test_a_value_wait_cannot_be_captured(rt, stream):
    from ascentrt.acl._api import STREAMS
    word, _ = rt.malloc(8, 0)
    s = STREAMS.get(stream)
    s.begin_capture(art.CaptureMode.GLOBAL)
    assert rt.value_wait(word, 1, C.ACL_STREAM_WAIT_VALUE_EQ, stream) == C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    with pytest.raises(art.AscentError):
        s.end_capture()
    assert rt.free(word) == 0


def test_virtual_memory_ipc_and_descriptor_copies_are_refused_after_the_argument_checks(rt, stream):
    dev, _ = rt.malloc(64, 0)
    assert rt.reserve_mem_address(1 << 21, 0, 0, 0) == (0, C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
    assert rt.reserve_mem_address(0, 0, 0, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.malloc_physical(1 << 21, {}, 0) == (0, C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
    with pytest.raises(TypeError, match="not dict"):
        rt.malloc_physical(1 << 21, [], 0)
    assert rt.map_mem(0, 1, 0, 1, 0) == C.ACL_ERROR_INVALID_PARAM
    assert rt.ipc_mem_get_export_key(dev, 64, 65, 0) == ("", C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
    with pytest.raises(ValueError):
        rt.ipc_mem_get_export_key(dev, 64, 2048, 0)
    with pytest.raises(ValueError):
        rt.ipc_mem_set_import_pid("key", 5)
    assert rt.memcpy_async_with_desc(dev, C.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, 0) == C.ACL_ERROR_INVALID_PARAM
    other, _ = rt.malloc(64, 0)
    assert rt.memcpy_async_with_condition(other, 64, dev, 64, C.ACL_MEMCPY_DEVICE_TO_DEVICE, stream) == 0
    assert rt.memcpy_async_with_condition(other, 64, dev, 0, 9, stream) == 0   # (count 0 first)
    assert rt.memcpy_async_with_condition(other, 64, dev, 64, 5, stream) == C.ACL_ERROR_INVALID_PARAM
    assert rt.synchronize_stream(stream) == 0
    assert rt.free(dev) == 0 and rt.free(other) == 0


def test_an_abort_stops_a_value_wait_at_once(rt, stream):
    # (the wait went on polling for the operator timeout, 18 minutes, holding the stream)
    word, _ = rt.malloc(8, 0)
    art.memcpy(word, np.array([5], np.int64), 8)
    assert rt.value_wait(word, (1 << 64) - 1, C.ACL_STREAM_WAIT_VALUE_GEQ, stream) == 0  # 5 - -1 >= 0
    assert rt.synchronize_stream(stream) == 0
    art.memcpy(word, np.array([0], np.int64), 8)
    assert rt.value_wait(word, 1, C.ACL_STREAM_WAIT_VALUE_GEQ, stream) == 0     # 0 - 1 < 0: waits
    time.sleep(0.1)                                   # (its watch has begun)
    started = time.monotonic()
    assert rt.stream_abort(stream) == 0
    # (the running watch stops and fails with 107023; one not started yet is dropped)
    assert rt.synchronize_stream(stream) in (0, C.ACL_ERROR_RT_STREAM_ABORT)
    assert time.monotonic() - started < 10
    assert rt.free(word) == 0


def test_an_asynchronous_host_to_host_copy_is_refused_as_on_an_ep_server(rt, stream):
    a, _ = rt.malloc_host(64)
    b, _ = rt.malloc_host(64)
    assert rt.get_run_mode() == (C.ACL_HOST, 0)
    assert rt.memcpy_async(b, 64, a, 64, C.ACL_MEMCPY_HOST_TO_HOST, stream) == C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert rt.memcpy_async(b, 64, a, 64, C.ACL_MEMCPY_DEFAULT, stream) == C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert rt.memcpy(b, 64, a, 64, C.ACL_MEMCPY_HOST_TO_HOST) == 0   # (the synchronous one is fine)
    # The addresses decide, not the kind (a wrong kind copied once, with a warning)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MemcpyKindWarning)
        for kind in (C.ACL_MEMCPY_HOST_TO_DEVICE, C.ACL_MEMCPY_DEVICE_TO_HOST,
                     C.ACL_MEMCPY_DEVICE_TO_DEVICE, C.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE):
            assert rt.memcpy_async(b, 64, a, 64, kind, stream) == C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
            assert rt.memcpy_async_with_condition(b, 64, a, 64, min(kind, 3), stream) == \
                C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
        assert rt.memcpy2d_async(b, 8, a, 8, 8, 8, C.ACL_MEMCPY_HOST_TO_DEVICE, stream) == \
            C.ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert rt.synchronize_stream(stream) == 0
    assert rt.free_host(a) == 0 and rt.free_host(b) == 0


# ---- acl.init's config: err_msg_mode ----------------------------------------------------------

def test_err_msg_mode_1_makes_the_recent_error_message_the_processs(tmp_path):
    """With "err_msg_mode": "1" the main thread reads a worker's error text (pyACL's
    per-process mode); per thread again after finalize; any other value is refused."""
    out = run_program(f'''
        import json, threading, ascentrt.acl as acl
        def config(mode):
            path = "{tmp_path}/acl_" + str(mode) + ".json"
            json.dump({{"err_msg_mode": mode}}, open(path, "w"))
            return path
        def worker_fails():
            t = threading.Thread(target=lambda: acl.rt.malloc(0, 0)); t.start(); t.join()
        print(acl.init(config("1")), acl.rt.set_device(0))
        worker_fails()
        print("process:", "size must be > 0" in (acl.get_recent_err_msg() or ""), acl.get_recent_err_msg())
        acl.rt.reset_device(0); acl.finalize()
        print(acl.init(config("0")), acl.rt.set_device(0))
        worker_fails()
        print("thread:", acl.get_recent_err_msg())
        acl.rt.reset_device(0); acl.finalize()
        print(acl.init(config("2")), acl.init(config(1)))
        acl.finalize()
    ''', env={}, timeout=60)
    assert out.splitlines()[:5] == ["0 0", "process: True None", "0 0", "thread: None", "100000 0"]


def test_every_unsigned_int_argument_that_overflows_32_bits_fails_to_parse(rt):
    # (the reference: an int overflow of an i/I format fails to parse; I arguments once wrapped
    # silently, a flag of 2**32 + 1 read as 1, except two timeouts that checked on their own)
    names = [n for n in acl.rt.__all__ if "I" in getattr(getattr(acl.rt, n), "__acl_fmt__", "")]
    assert len(names) >= 10
    for name in names:
        fmt = getattr(acl.rt, name).__acl_fmt__
        for slot in (i for i, c in enumerate(fmt) if c == "I"):
            for huge in (1 << 32, -(1 << 31) - 1, 1 << 64):
                args = [huge if i == slot else 0 for i in range(len(fmt))]
                with pytest.raises(TypeError, match=f"acl.rt.{name} args parse failed"):
                    getattr(acl.rt, name)(*args)
                with pytest.raises(TypeError, match=f"acl.rt.{name} args parse failed"):
                    getattr(acl.rt, name)(*args[:slot], np.int64(huge) if huge < 1 << 63 else huge,
                                          *args[slot + 1:])
            # (a negative one is the unsigned int it stands for, as C reads it: -1 was taken as
            # -1, so create_stream_with_config(-1, 0) made the highest priority, not the lowest)
            rets = [getattr(acl.rt, name)(*[v if i == slot else 0 for i in range(len(fmt))])
                    for v in (-1, 0xFFFFFFFF, np.int32(-1))]
            codes = [r[-1] if isinstance(r, tuple) else r for r in rets]
            assert codes[0] == codes[1] == codes[2], (name, slot, rets)
    stream, ret = rt.create_stream_with_config(-1, 0)
    from ascentrt.acl._api import STREAMS
    assert ret == 0 and STREAMS.get(stream).priority == 7   # the lowest, as 0xFFFFFFFF clamps
    assert rt.destroy_stream(stream) == 0


def test_timeout_arguments_parse_as_c_ints_a_bool_is_1_and_an_overflow_fails_to_parse(rt, stream):
    # (set_op_wait_timeout(True) was 107000 while synchronize_*_with_timeout(.., True) took 1;
    # 2**64 wrapped to 0, "never time out", where the other timeouts refuse what overflows them)
    assert rt.set_op_wait_timeout(True) == 0
    assert rt.synchronize_stream_with_timeout(stream, True) == 0
    assert rt.set_op_execute_time_out(True) == 0
    for huge in (1 << 32, 1 << 64, 10 ** 30):
        with pytest.raises(TypeError, match="acl.rt.set_op_wait_timeout args parse failed"):
            rt.set_op_wait_timeout(huge)
        with pytest.raises(TypeError, match="acl.rt.set_op_execute_time_out args parse failed"):
            rt.set_op_execute_time_out(huge)
        with pytest.raises(TypeError, match="args parse failed"):
            rt.synchronize_stream_with_timeout(stream, huge)
    assert rt.set_op_wait_timeout((1 << 32) - 1) == 0  # the most a uint32 holds
    assert rt.set_op_wait_timeout(0) == 0 and rt.set_op_execute_time_out(0) == 0


def test_value_write_and_value_wait_order_two_streams_for_the_race_sanitizer(rt):
    # A memset on s1, value_write, value_wait on s2, then a copy of the memset's bytes on s2:
    # ordered through the word, as on the device; the sanitizer reported a race, knowing no
    # edge between the two calls.
    s1, _ = rt.create_stream()
    s2, _ = rt.create_stream()
    word, _ = rt.malloc(8, 0)
    buf, _ = rt.malloc(4096, 0)
    out, _ = rt.malloc(4096, 0)
    assert rt.memset(word, 8, 0, 8) == 0
    with art.sanitize("log") as found:
        assert rt.memset_async(buf, 4096, 1, 4096, s1) == 0
        assert rt.value_write(word, 2, 0, s1) == 0
        assert rt.value_wait(word, 2, C.ACL_STREAM_WAIT_VALUE_GEQ, s2) == 0
        assert rt.memcpy_async(out, 4096, buf, 4096, C.ACL_MEMCPY_DEVICE_TO_DEVICE, s2) == 0
        assert rt.synchronize_stream(s2) == 0
        assert rt.synchronize_stream(s1) == 0
    assert found == []
    for p in (word, buf, out):
        rt.free(p)
    for s in (s1, s2):
        rt.destroy_stream(s)


def test_a_value_wait_whose_timeout_lets_its_stream_go_on_is_no_deadlock(rt):
    # b's wait on y times out (set_op_wait_timeout), b goes on (continue mode) and writes x,
    # which releases a: synchronizing a is no deadlock (it was reported as one, 507950, at once:
    # a wait with its own timeout error was taken for a collective's, whose timeout is a last
    # resort).
    a, _ = rt.create_stream()
    b, _ = rt.create_stream()
    x, _ = rt.malloc(8, 0)
    y, _ = rt.malloc(8, 0)
    rt.memset(x, 8, 0, 8)
    rt.memset(y, 8, 0, 8)
    rt.set_op_wait_timeout(1)
    eq = C.ACL_STREAM_WAIT_VALUE_EQ
    assert rt.value_wait(y, 1, eq, b) == 0
    assert rt.value_write(x, 1, 0, b) == 0
    rt.set_op_wait_timeout(10)  # (a's own wait outlasts b's)
    assert rt.value_wait(x, 1, eq, a) == 0
    assert rt.synchronize_stream(a) == 0
    assert rt.synchronize_stream(b) == 107019
    for p in (x, y):
        rt.free(p)
    for s in (a, b):
        rt.destroy_stream(s)


def test_acl_util_on_a_device_pointer_warns_that_an_npu_host_cannot_reach_it(rt):
    # (it read device memory silently: a program relying on that fails on an NPU in ACL_HOST
    # run mode, which get_run_mode reports)
    from ascentrt.errors import HostAccessWarning
    d, _ = rt.malloc(64, 0)
    h, _ = rt.malloc_host(64)
    rt.memset(d, 64, 7, 64)
    rt.memset(h, 64, 0, 64)  # (pooled host memory holds what its last owner left)
    with pytest.warns(HostAccessWarning, match="ptr_to_bytes reads device memory"):
        assert acl.util.ptr_to_bytes(d, 4) == b"\x07" * 4
    with warnings.catch_warnings():
        warnings.simplefilter("error", HostAccessWarning)
        assert acl.util.ptr_to_bytes(h, 4) == bytes(4)
    rt.free(d)
    rt.free_host(h)


def test_on_sim_query_event_wait_status_sees_a_value_wait_the_host_let_go():
    # (it read the streams' state without catching the simulated device up or looking at the
    # words: ~230 polls, until the device moved on by itself, virtual time then the machine's)
    out = run_program("""
        import numpy as np, ascentrt.acl as acl
        from ascentrt.acl import constants as C
        rt = acl.rt
        rt.set_device(0)
        s1, _ = rt.create_stream(); s2, _ = rt.create_stream()
        word, _ = rt.malloc(8, 0)
        rt.memset(word, 8, 0, 8)
        ev, _ = rt.create_event()
        rt.record_event(ev, s1)
        rt.synchronize_stream(s1)
        rt.value_wait(word, 1, C.ACL_STREAM_WAIT_VALUE_EQ, s2)
        rt.stream_wait_event(s2, ev)
        one = np.ones(1, np.uint64).tobytes()
        assert rt.memcpy(word, 8, acl.util.bytes_to_ptr(one), 8, C.ACL_MEMCPY_HOST_TO_DEVICE) == 0
        polls = 1
        while rt.query_event_wait_status(ev)[0] != C.ACL_EVENT_WAIT_STATUS_COMPLETE and polls < 100:
            polls += 1
        print(polls)
    """, env={"ASCENTRT_BACKEND": "sim"})
    assert int(out.split()[-1]) < 5


# ---- host_register / host_unregister ----------------------------------------------------------

def test_host_register_lets_the_device_reach_mapped_host_memory_until_unregistered(rt, stream):
    import mmap
    region = mmap.mmap(-1, 8192)
    ptr = np.frombuffer(region, np.uint8).ctypes.data
    dev_ptr, ret = rt.host_register(ptr, 8192, C.ACL_HOST_REGISTER_MAPPED)
    assert ret == 0 and dev_ptr == ptr
    src, _ = rt.malloc(4096, 0)
    rt.memset(src, 4096, 9, 4096)
    assert rt.memcpy_async(dev_ptr + 4096, 4096, src, 4096, C.ACL_MEMCPY_DEVICE_TO_HOST, stream) == 0
    assert rt.synchronize_stream(stream) == 0
    assert region[4096] == 9 and region[8191] == 9 and region[0] == 0
    assert rt.host_register(ptr, 8192, 0) == (0, C.ACL_ERROR_INVALID_PARAM)      # registered already
    assert rt.host_unregister(ptr) == 0
    assert rt.host_unregister(ptr) == C.ACL_ERROR_INVALID_PARAM                  # not any more
    assert rt.memcpy(dev_ptr, 4096, src, 4096, C.ACL_MEMCPY_DEVICE_TO_HOST) != 0  # unreachable again
    rt.free(src)
    del ptr
    region.close()


def test_host_register_refuses_device_memory_live_or_not(rt):
    buf, _ = rt.malloc(1 << 21, 0)
    rt.memset(buf, 1 << 21, 0x11, 1 << 21)
    page = buf + 4096 - buf % 4096
    assert rt.host_register(page, 4096, 0) == (0, C.ACL_ERROR_INVALID_PARAM)        # a live buffer's
    from ascentrt.context import current_context
    memory = current_context().device._memory
    untouched = memory.base + memory.capacity - (64 << 20)                         # no buffer's yet
    assert rt.host_register(untouched, 4096, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.host_unregister(page) == C.ACL_ERROR_INVALID_PARAM                    # nothing taken
    assert rt.free(buf) == 0


def test_host_register_takes_each_page_once(rt, stream):
    import mmap
    region = mmap.mmap(-1, 1 << 16)
    base = np.frombuffer(region, np.uint8).ctypes.data
    assert rt.host_register(base, 32768, 0) == (base, 0)
    assert rt.host_register(base + 16384, 32768, 0)[1] == C.ACL_ERROR_INVALID_PARAM  # overlaps
    assert rt.host_register(base + 4096, 4096, 0)[1] == C.ACL_ERROR_INVALID_PARAM    # inside
    assert rt.host_register(base + 32768, 32768, 0) == (base + 32768, 0)            # beside it
    assert rt.host_unregister(base) == 0
    dev, _ = rt.malloc(4096, 0)
    # the first registration's pages are unreachable again, the second's still reachable
    assert rt.memcpy_async(dev, 4096, base + 4096, 4096, C.ACL_MEMCPY_HOST_TO_DEVICE, stream) != 0
    assert rt.memcpy_async(dev, 4096, base + 40960, 4096, C.ACL_MEMCPY_HOST_TO_DEVICE, stream) == 0
    assert rt.synchronize_stream(stream) == 0
    assert rt.host_unregister(base + 4096) == C.ACL_ERROR_INVALID_PARAM
    assert rt.host_unregister(base + 32768) == 0
    rt.free(dev)
    del base
    region.close()


def test_kernels_take_pointers_into_host_registered_memory(rt, stream):
    import mmap
    region = mmap.mmap(-1, 8192)
    ptr = np.frombuffer(region, np.uint8).ctypes.data
    assert rt.host_register(ptr, 8192, 0) == (ptr, 0)
    seen = []

    def fill(raw, typed):
        seen.append((type(raw).__name__, raw.nbytes, typed.dtype.name, typed.shape))
        typed[:] = 2.5

    assert rt.launch_kernel(fill, (ptr + 4096, (ptr, np.float32, (4, 8))), stream) == 0
    assert rt.synchronize_stream(stream) == 0
    assert seen == [("ndarray", 4096, "float32", (4, 8))]
    assert (np.frombuffer(region, np.float32, 32) == 2.5).all()
    assert rt.launch_kernel(fill, (ptr, (ptr, np.float32, (4096,))), stream) != 0   # past its end
    other = np.zeros(4096, np.uint8)                                                # not registered
    assert rt.launch_kernel(fill, (ptr, (acl.util.numpy_to_ptr(other), np.uint8, 16)), stream) != 0
    assert rt.host_unregister(ptr) == 0
    del ptr
    region.close()


def test_host_register_refuses_unaligned_unmapped_read_only_memory_and_other_types(rt):
    import mmap
    region = mmap.mmap(-1, 8192)
    ptr = np.frombuffer(region, np.uint8).ctypes.data
    assert rt.host_register(ptr + 64, 4096, 0) == (0, C.ACL_ERROR_INVALID_PARAM)   # not 4 KiB aligned
    assert rt.host_register(ptr, 4096, 1) == (0, C.ACL_ERROR_INVALID_PARAM)        # no such type
    assert rt.host_register(ptr, 0, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.host_register(ptr, 1 << 40, 0) == (0, C.ACL_ERROR_INVALID_PARAM)     # past its mapping
    read_only = mmap.mmap(-1, 4096, prot=mmap.PROT_READ)
    ro_ptr = np.frombuffer(read_only, np.uint8).ctypes.data
    assert rt.host_register(ro_ptr, 4096, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    closed = mmap.mmap(-1, 4096)
    gone = np.frombuffer(closed, np.uint8).ctypes.data
    closed.close()
    assert rt.host_register(gone, 4096, 0) == (0, C.ACL_ERROR_INVALID_PARAM)       # unmapped
    assert rt.host_unregister(ptr) == C.ACL_ERROR_INVALID_PARAM                    # never registered
    read_only.close()
    region.close()
    # Memory the runtime's pools hold: page-locked already inside a live allocation (as
    # CUDA's cudaErrorHostMemoryAlreadyRegistered); anything else there (a freed block, past
    # an allocation's end) goes to another owner
    pinned, _ = rt.malloc_host(1 << 20)
    assert rt.host_register(pinned, 4096, 0) == (0, C.ACL_ERROR_INVALID_PARAM)
    assert rt.host_unregister(pinned) == C.ACL_ERROR_INVALID_PARAM
    assert rt.host_register(pinned, 2 << 20, 0)[1] == C.ACL_ERROR_INVALID_PARAM    # past its end
    assert rt.free_host(pinned) == 0
    assert rt.host_register(pinned, 4096, 0)[1] == C.ACL_ERROR_INVALID_PARAM       # freed


class _Index:
    def __init__(self, value):
        self.value = value

    def __index__(self):
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value


def test_int_arguments_take_what_has_index_as_cpythons_converter_does(rt):  # noqa: F811
    assert rt.set_device(np.array(0)) == 0
    assert rt.set_device(_Index(0)) == 0
    assert rt.get_device() == (0, 0)
    with pytest.raises(RuntimeError, match="boom"):       # (its own error, passed through)
        rt.set_device(_Index(RuntimeError("boom")))
    with pytest.raises(TypeError, match="acl.rt.set_device args parse failed"):
        rt.set_device(_Index(1 << 70))                     # (out of an int's range)
    with pytest.raises(TypeError, match="only integer scalar arrays"):
        rt.set_device(np.array(0.0))                       # (numpy's __index__ refuses a float)


def test_a_profile_records_acl_mallocs_and_frees_whichever_build_runs(rt):
    # (the compiled acl.rt.free called the buffer's free directly, past the attribute the
    # profiler wraps: its frees vanished from the host API calls of the compiled build only;
    # acl.rt.malloc called the device's allocator, which no wrapper sees, in both builds)
    import ascentrt as art
    ptr, _ = rt.malloc(4096, 0)
    with art.profile() as prof:
        assert rt.free(ptr) == 0
        again, _ = rt.malloc(4096, 0)
        aligned, _ = rt.malloc_align32(100, 0)
        assert rt.free(again) == 0 and rt.free(aligned) == 0
    assert [c.name for c in prof.profile.api_calls] == \
        ["DeviceBuffer.free", "Device.malloc", "Device.malloc", "DeviceBuffer.free", "DeviceBuffer.free"]
    fast, _ = rt.malloc(4096, 0)
    assert not rt.malloc.recording and not rt.free.recording  # (after it: the fast paths again)
    assert rt.free(fast) == 0
