"""Bad input: each mistake raises the right error class and code, changes nothing, and the runtime goes on."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ascentrt as art
from ascentrt.backends.base import Cost
from subprocess_util import run_program

E = art.ErrorCode


def _stable_id(value) -> str:
    """A test id that is the same in every process (a plain object's repr holds its address)."""
    return type(value).__name__ if type(value) is object else repr(value)


@pytest.fixture
def buf():
    """A live 128-byte device buffer filled with 0x11."""
    b = art.malloc(128)
    art.memset(b, 0x11)
    yield b
    if b.alive:
        b.free()


def _still_usable(stream):
    """The runtime still works end to end: malloc, copy in, kernel, copy out."""
    x = np.arange(16, dtype=np.float32)
    b = art.malloc(x.nbytes)
    art.memcpy_async(b, x, stream=stream)
    art.launch(art.kernels.scale, b.view(np.float32), b.view(np.float32), 2.0, stream=stream)
    out = np.empty_like(x)
    art.memcpy_async(out, b, stream=stream)
    stream.synchronize(timeout=10)
    b.free()
    assert np.array_equal(out, 2 * x)


@pytest.mark.parametrize("nbytes,error,code", [
    (0, art.InvalidArgumentError, E.INVALID_PARAM),
    (-1, art.InvalidArgumentError, E.INVALID_PARAM),
    (-(1 << 40), art.InvalidArgumentError, E.INVALID_PARAM),
    (1 << 70, art.InvalidArgumentError, E.INVALID_PARAM),
    (1 << 40, art.OutOfMemoryError, E.RT_MEMORY_ALLOCATION),  # more than the whole device
    (1.5, art.InvalidArgumentError, E.INVALID_PARAM),
    ("64", art.InvalidArgumentError, E.INVALID_PARAM),
    (None, art.InvalidArgumentError, E.INVALID_PARAM),
    (True, art.InvalidArgumentError, E.INVALID_PARAM),
], ids=repr)
def test_bad_malloc_sizes_raise_and_allocate_nothing(dev, stream, nbytes, error, code):
    before = dev.mem_info()
    with pytest.raises(error) as err:
        art.malloc(nbytes)
    assert err.value.code == code and isinstance(err.value, art.AscentError)
    assert dev.mem_info() == before
    _still_usable(stream)


@pytest.mark.parametrize("nbytes", [0, -1, 1 << 70, 2.0])
def test_bad_malloc_host_sizes_raise(stream, nbytes):
    with pytest.raises(art.InvalidArgumentError) as err:
        art.malloc_host(nbytes)
    assert err.value.code == E.INVALID_PARAM
    _still_usable(stream)


def test_out_of_memory_raises_207001_with_the_figures_and_changes_nothing(dev, stream):
    free, total = dev.mem_info()
    big = art.malloc(int(total * 0.6))       # untouched pages: this costs no real memory
    try:
        used = dev.mem_info()
        with pytest.raises(art.OutOfMemoryError) as err:
            art.malloc(int(total * 0.6))     # fits the device, not what is left of it
        assert err.value.code == E.RT_MEMORY_ALLOCATION
        assert "capacity" in str(err.value) and isinstance(err.value, MemoryError)
        assert dev.mem_info() == used
    finally:
        big.free()
    assert dev.mem_info() == (free, total)
    _still_usable(stream)


def test_double_free_raises_207002(dev, stream):
    b = art.malloc(64)
    b.free()
    before = dev.mem_info()
    with pytest.raises(art.InvalidHandleError) as err:
        b.free()
    assert err.value.code == E.RT_MEMORY_FREE
    with pytest.raises(art.InvalidAddressError) as err:
        art.free(b.ptr)
    assert err.value.code == E.RT_MEMORY_FREE
    assert dev.mem_info() == before
    h = art.malloc_host(64)
    h.free()
    with pytest.raises(art.InvalidHandleError) as err:
        h.free()
    assert err.value.code == E.RT_MEMORY_FREE
    _still_usable(stream)


def test_a_free_after_the_device_reset_freed_the_buffer_says_the_reset_freed_it():
    # (it said "double free" of a buffer the program had freed once, or not at all)
    out = run_program("""
        import ascentrt as art
        dev = art.Device(0)
        b = art.malloc(64)
        dev.reset()
        try:
            b.free()
        except art.InvalidHandleError as exc:
            print(int(exc.code), "double" in str(exc), "reset of device 0" in str(exc))
    """, env={"ASCENTRT_LEAK_CHECK": "off"})
    assert out.split() == ["207002", "False", "True"]


def test_free_of_an_int_that_is_not_a_live_allocation_start_raises(buf, stream):
    for ptr in (0, 12345, buf.ptr + 32):
        with pytest.raises(art.InvalidAddressError) as err:
            art.free(ptr)
        assert err.value.code == E.RT_MEMORY_FREE
    assert buf.alive
    with pytest.raises(art.InvalidArgumentError):
        art.free("not a buffer")
    art.free(buf.ptr)                        # the start of a live allocation is fine
    assert not buf.alive
    _still_usable(stream)


@pytest.mark.parametrize("ptr_of", [lambda b: 0, lambda b: 12345, lambda b: (1 << 64) - 64,
                                    lambda b: b.ptr - 64 if b.ptr >= 64 else 1])
def test_an_int_that_is_not_a_live_pointer_is_never_dereferenced(buf, stream, ptr_of):
    ptr = ptr_of(buf)
    src = np.zeros(16, np.uint8)
    for call in (lambda: art.memcpy(ptr, src, 16), lambda: art.memcpy(src, ptr, 16),
                 lambda: art.memset(ptr, 0, 16), lambda: art.memcpy_async(ptr, src, 16, stream=stream)):
        with pytest.raises(art.InvalidAddressError) as err:
            call()
        assert err.value.code == E.INVALID_PARAM
    assert (buf.numpy() == 0x11).all()
    _still_usable(stream)


def test_a_freed_pointer_is_rejected(stream):
    b = art.malloc(4096)
    ptr = b.ptr
    b.free()
    with pytest.raises(art.InvalidAddressError):
        art.memcpy(ptr, np.zeros(4096, np.uint8), 4096)
    with pytest.raises(art.InvalidHandleError):
        art.memcpy(b, np.zeros(16, np.uint8))
    with pytest.raises(art.InvalidHandleError):
        b.numpy()
    _still_usable(stream)


@pytest.mark.parametrize("copy", [
    lambda b, s: art.memcpy(b, np.zeros(129, np.uint8)),
    lambda b, s: art.memcpy(np.zeros(200, np.uint8), b, 200),
    lambda b, s: art.memcpy(b.ptr + 64, np.zeros(100, np.uint8), 100),
    lambda b, s: art.memcpy(np.zeros(100, np.uint8), b.ptr + 64, 100),
    lambda b, s: art.memcpy(b.ptr, b.ptr + 1, 128),
    lambda b, s: art.memcpy(b[64:128], np.zeros(65, np.uint8)),
    lambda b, s: art.memcpy_async(b, np.zeros(129, np.uint8), stream=s),
    lambda b, s: art.memset(b, 0, 129),
    lambda b, s: art.memset(b.ptr + 120, 0, 16),
    lambda b, s: art.memset_async(b, 0, 129, stream=s),
    lambda b, s: art.memcpy2d(b, 64, np.zeros(256, np.uint8), 64, 64, 3),
], ids=["dst_small", "src_small", "ptr_dst_past_end", "ptr_src_past_end", "ptr_both",
        "slice", "async", "memset", "memset_ptr", "memset_async", "memcpy2d"])
def test_a_copy_past_the_end_of_an_allocation_raises_and_writes_nothing(buf, stream, copy):
    with pytest.raises((art.InvalidArgumentError, art.InvalidAddressError)) as err:
        copy(buf, stream)
    assert err.value.code == E.INVALID_PARAM
    assert stream.pending == 0
    assert (buf.numpy() == 0x11).all()
    _still_usable(stream)


@pytest.mark.parametrize("nbytes", [-1, 1 << 70, 1.0, "8"])
def test_bad_copy_sizes_raise(buf, stream, nbytes):
    with pytest.raises(art.InvalidArgumentError) as err:
        art.memcpy(buf, np.zeros(128, np.uint8), nbytes)
    assert err.value.code == E.INVALID_PARAM
    assert (buf.numpy() == 0x11).all()


@pytest.mark.parametrize("operand", [None, "abc", 1.5, [1, 2, 3], object()], ids=_stable_id)
def test_copy_operands_of_the_wrong_type_raise(buf, operand):
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(buf, operand, 16)
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(operand, buf, 16)


def test_copy_into_a_read_only_or_strided_array_raises(buf):
    ro = np.zeros(128, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(ro, buf)
    with pytest.raises(art.InvalidArgumentError):
        art.memcpy(buf, np.zeros(256, np.uint8)[::2])


def test_a_freed_buffer_as_kernel_argument_raises_at_launch(stream):
    b = art.malloc(64)
    view = b.view(np.float32)
    b.free()
    ran = []
    for arg in (b, view, b[0:32]):
        with pytest.raises(art.InvalidHandleError) as err:
            art.launch(lambda *a: ran.append(a), arg, stream=stream)
        assert err.value.code == E.RT_INVALID_HANDLE
    assert stream.pending == 0 and ran == []
    _still_usable(stream)


def test_host_memory_as_kernel_argument_raises(stream):
    h = art.malloc_host(64)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.launch(art.kernels.fill, h, 1, stream=stream)
    assert err.value.code == E.RT_INVALID_MEMORY_TYPE
    h.free()


@pytest.mark.parametrize("kernel", [5, None, "no_such_kernel"], ids=repr)
def test_a_kernel_that_is_not_callable_raises(stream, kernel):
    with pytest.raises(art.InvalidArgumentError):
        art.launch(kernel, stream=stream)
    assert stream.pending == 0


def test_reads_and_writes_must_be_buffers(stream, buf):
    with pytest.raises(art.InvalidArgumentError):
        art.launch(art.kernels.noop, stream=stream, reads=[1])
    assert stream.pending == 0


def test_stream_argument_must_be_a_stream(buf):
    for bad in ("stream", 3, object()):
        with pytest.raises(art.InvalidArgumentError):
            art.launch(art.kernels.noop, stream=bad)
        with pytest.raises(art.InvalidArgumentError):
            art.memcpy_async(buf, np.zeros(16, np.uint8), stream=bad)


def test_destroyed_stream_and_event_raise_invalid_handle(dev, buf):
    s = dev.create_stream()
    ev = s.record()
    s.destroy()
    ev.destroy()
    for call in (lambda: art.launch(art.kernels.noop, stream=s),
                 lambda: art.memcpy_async(buf, np.zeros(16, np.uint8), stream=s),
                 lambda: art.memset_async(buf, 0, stream=s),
                 lambda: s.wait(dev.default_stream.record()),
                 lambda: ev.synchronize(), lambda: ev.record(dev.default_stream),
                 lambda: dev.default_stream.wait(ev)):
        with pytest.raises(art.InvalidHandleError) as err:
            call()
        assert err.value.code == E.RT_INVALID_HANDLE
    assert (buf.numpy() == 0x11).all()


@pytest.mark.parametrize("device_id", [-1, 1, 99, "0", 0.0, None, True])
def test_bad_device_ids_raise_107001(device_id):
    before = art.current_device()
    for call in (lambda: art.set_device(device_id), lambda: art.Device(device_id),
                 lambda: art.malloc(64, device=device_id) if device_id is not None else art.Device(None)):
        with pytest.raises(art.InvalidDeviceError) as err:
            call()
        assert err.value.code == E.RT_INVALID_DEVICEID
        # (an id past the last device says how to have more)
        assert ("ASCENTRT_DEVICES" in str(err.value)) == (type(device_id) is int and device_id > 0)
    assert art.current_device() is before


@pytest.mark.parametrize("priority", [-1, 8, 100, 0.0, "1"])
def test_bad_priorities_raise(dev, priority):
    before = len(dev.streams())
    with pytest.raises(art.InvalidArgumentError) as err:
        art.Stream(dev, priority)
    assert err.value.code == E.INVALID_PARAM
    assert len(dev.streams()) == before


def test_bad_environment_settings_raise_a_clear_error():
    out = run_program("""
        import ascentrt as art
        try:
            art.device_count()
        except art.InvalidArgumentError as exc:
            print("error", int(exc.code), "ASCENTRT_DEVICES" in str(exc))
    """, env={"ASCENTRT_DEVICES": "zero"})
    assert out.split() == ["error", "100000", "True"]


@pytest.mark.parametrize("setting, value", [
    (s, v) for s in ("HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT", "ASCENTRT_DEADLOCK_CHECK_S",
                     "ASCENTRT_STALL_WARN_S") for v in ("inf", "1e300", "nan", "0", "-1")
    if (s, v) != ("HCCL_EXEC_TIMEOUT", "0")])  # (0: never time out, as CANN's on Atlas A2/A3)
def test_a_timeout_setting_must_be_a_finite_positive_number_of_seconds(monkeypatch, setting, value):
    # (HCCL_EXEC_TIMEOUT=inf once reached a wait's deadline arithmetic: a bare OverflowError)
    monkeypatch.setenv(setting, value)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.config.get(setting)
    assert err.value.code == E.INVALID_PARAM and setting in str(err.value)


@pytest.mark.parametrize("value", ["inf", "1e400", "-inf", "nan", "1e30", "9E", "-1", "0.5"])
@pytest.mark.parametrize("setting", ["ASCENTRT_DEVICE_MEMORY", "ASCENTRT_MEM_POOL_SIZE",
                                     "ASCENTRT_MEM_POOL_RELEASE_THRESHOLD", "ASCENTRT_MEM_POOL_SPLIT_LIMIT"])
def test_a_size_setting_must_be_a_finite_byte_count_a_64_bit_size_holds(monkeypatch, setting, value):
    # (inf once raised a bare OverflowError naming no variable; 1e30 got through as a Python int)
    monkeypatch.setenv(setting, value)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.config.get(setting)
    assert err.value.code == E.INVALID_PARAM and f"{setting}={value!r}" in str(err.value)


@pytest.mark.parametrize("value", ["0.5", "1e-320", "1.5", "0.3M"])
@pytest.mark.parametrize("setting", ["ASCENTRT_DEVICE_MEMORY", "ASCENTRT_MEM_POOL_SIZE",
                                     "ASCENTRT_MEM_POOL_RELEASE_THRESHOLD"])
def test_a_size_setting_that_is_no_whole_number_of_bytes_says_so(monkeypatch, setting, value):
    # (0.5 was refused as "size must be positive" / "0 or more": it is both; 1.5 became 1)
    monkeypatch.setenv(setting, value)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.config.get(setting)
    assert "whole number of bytes" in str(err.value)


@pytest.mark.parametrize("setting", ["ASCENTRT_MEM_POOL_SIZE", "ASCENTRT_MEM_POOL_RELEASE_THRESHOLD"])
@pytest.mark.parametrize("value", ["0", "-0", "0.0", "0K"])
def test_a_size_setting_that_allows_zero_takes_every_spelling_of_zero(monkeypatch, setting, value):
    monkeypatch.setenv(setting, value)
    assert art.config.get(setting) == 0


@pytest.mark.parametrize("setting, value", [("ASCENTRT_DEVICES", "99999999999999999999999"),
                                            ("ASCENTRT_COMPUTE_UNITS", str(1 << 40)),
                                            ("ASCENTRT_COPY_ENGINES", "1e3"),
                                            ("ASCENTRT_HOST_FUNC_THREADS", "-0")])
def test_a_count_setting_must_be_a_positive_integer_within_its_bound(monkeypatch, setting, value):
    monkeypatch.setenv(setting, value)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.config.get(setting)
    assert err.value.code == E.INVALID_PARAM and setting in str(err.value)


def test_a_split_limit_of_zero_is_refused_by_its_setting_and_the_least_values_all_work(monkeypatch):
    # (0 passed the setting's parser, then failed at the first malloc naming no variable)
    monkeypatch.setenv("ASCENTRT_MEM_POOL_SPLIT_LIMIT", "0")
    with pytest.raises(art.InvalidArgumentError) as err:
        art.config.get("ASCENTRT_MEM_POOL_SPLIT_LIMIT")
    assert "ASCENTRT_MEM_POOL_SPLIT_LIMIT='0'" in str(err.value)
    # every least value a pool setting's parser takes works at use too
    out = run_program("""
        import ascentrt as art
        b = art.malloc(4096); b.free(); art.empty_cache(); print("ok")
    """, env={"ASCENTRT_MEM_POOL_SPLIT_LIMIT": "1", "ASCENTRT_MEM_POOL_RELEASE_THRESHOLD": "0",
              "ASCENTRT_MEM_POOL_GC_THRESHOLD": "1", "ASCENTRT_MEM_POOL_SIZE": "1"})
    assert out.strip() == "ok"


def test_an_ascentrt_variable_no_setting_reads_is_named_with_the_nearest_setting():
    # (ASCENTRT_DEVICE=4 or ASCENTRT_BAKEND=sim were ignored without a word)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_")}
    proc = subprocess.run([sys.executable, "-c", "import ascentrt as art; print(art.device_count())"],
                          env={**env, "ASCENTRT_DEVICE": "4", "ASCENTRT_ZZZ": "1"}, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "1"
    lines = [line for line in proc.stderr.splitlines() if "is not a setting" in line]
    assert len(lines) == 2 and "ASCENTRT_DEVICE is not a setting" in lines[0] \
        and "did you mean ASCENTRT_DEVICES?" in lines[0] and "ASCENTRT_ZZZ" in lines[1]


def test_a_preset_name_is_read_in_any_case_as_the_backend_name_is():
    out = run_program("import ascentrt as art; print(art.Device(0).properties.preset)",
                      env={"ASCENTRT_BACKEND": "SIM", "ASCENTRT_SIM_PRESET": "H200"})
    assert out.strip() == "h200"


def test_a_freed_pointer_is_said_to_be_freed_not_host_memory_to_register():
    # (a freed device pointer got the advice to register host memory)
    for alloc in (art.malloc, art.malloc_host):
        b = alloc(4096)
        p = b.ptr
        b.free()
        with pytest.raises(art.InvalidAddressError) as err:
            art.memcpy(p, np.zeros(1024, np.float32), 4096)
        assert "its buffer was freed" in str(err.value) and "register" not in str(err.value)
    with pytest.raises(art.InvalidAddressError) as err:   # (an address of no pool: the advice)
        art.memcpy(12345678, np.zeros(4, np.float32), 16)
    assert "register_host" in str(err.value)


def test_a_fraction_setting_of_negative_zero_is_zero(monkeypatch):
    monkeypatch.setenv("ASCENTRT_MEM_POOL_GC_THRESHOLD", "-0")
    assert str(art.config.get("ASCENTRT_MEM_POOL_GC_THRESHOLD")) == "0.0"


@pytest.mark.cpu_only
def test_the_cli_names_the_variable_of_an_infinite_size():
    env = dict(os.environ, ASCENTRT_DEVICE_MEMORY="inf")
    done = subprocess.run([sys.executable, "-m", "ascentrt", "info"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "ASCENTRT_DEVICE_MEMORY='inf'" in done.stderr and "100000 INVALID_PARAM" in done.stderr


def test_a_stream_of_another_device_is_rejected():
    out = run_program("""
        import numpy as np
        import ascentrt as art
        E = art.ErrorCode
        assert art.device_count() == 2
        d0, d1 = art.Device(0), art.Device(1)
        s0, s1 = d0.create_stream(), d1.create_stream()
        b0 = art.malloc(64, device=0)
        b1 = art.malloc(64, device=1)
        art.memset(b0, 1); art.memset(b1, 2)
        checks = []
        def expect(call, error, code):
            try:
                call()
            except error as exc:
                checks.append(exc.code == code)
            else:
                checks.append(False)
        # A kernel on a stream of device 1 with a buffer of device 0.
        expect(lambda: art.launch(art.kernels.fill, b0, 3, stream=s1),
               art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        # An event of device 0 recorded on a stream of device 1.
        expect(lambda: d0.create_event().record(s1), art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        # A host-to-device copy into device 0's memory on a stream of device 1.
        expect(lambda: art.memcpy_async(b0, np.zeros(64, np.uint8), stream=s1),
               art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        # Every asynchronous copy and fill of device 0's memory on device 1's stream (the 2-D
        # copy once ran it on device 1's engine).
        h = art.malloc_host(64)
        expect(lambda: art.memcpy_async(h, b0, 64, stream=s1), art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        expect(lambda: art.memcpy2d_async(h, 8, b0, 8, 8, 8, stream=s1),
               art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        expect(lambda: art.memcpy2d_async(b0, 8, h, 8, 8, 8, stream=s1),
               art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        expect(lambda: art.memset_async(b0, 1, stream=s1), art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        expect(lambda: art.set_device(2), art.InvalidDeviceError, E.RT_INVALID_DEVICEID)
        # Stream-ordered malloc and free on device 0 with device 1's stream, also after device
        # 0's allocator has seen (and may remember) one of its own streams.
        art.malloc(64, stream=s0).free(stream=s0)
        expect(lambda: art.malloc(64, device=0, stream=s1), art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        expect(lambda: b0.free(stream=s1), art.InvalidArgumentError, E.RT_STREAM_CONTEXT)
        assert b0.alive and art.malloc(64, stream=s1).device is d1
        assert s1.pending == 0 and (b0.numpy() == 1).all() and (b1.numpy() == 2).all()
        # The right pairings still work, and each device keeps its own memory and current device.
        art.launch(art.kernels.fill, b1.view(np.uint8), 7, stream=s1)
        # Device-to-device across devices needs peer access from the device that copies.
        expect(lambda: art.memcpy_async(b0, b1, stream=s0), art.InvalidArgumentError,
               E.RT_FEATURE_NOT_SUPPORT)
        expect(lambda: art.memcpy(b0, b1), art.InvalidArgumentError, E.RT_FEATURE_NOT_SUPPORT)
        d1.enable_peer_access(d0)                    # the other direction: still refused on s0
        expect(lambda: art.memcpy_async(b0, b1, stream=s0), art.InvalidArgumentError,
               E.RT_FEATURE_NOT_SUPPORT)
        d0.enable_peer_access(d1)
        s1.synchronize(timeout=10)                   # (the fill of b1 first)
        art.memcpy_async(b0, b1, stream=s0)
        s0.synchronize(timeout=10)
        art.set_device(1)
        assert art.current_device() is d1 and art.malloc(32).device is d1
        print(all(checks), len(checks), int(b0.numpy()[0]))
    """, env={"ASCENTRT_DEVICES": "2"})
    assert out.split() == ["True", "13", "7"]


def test_current_device_is_per_host_thread():
    out = run_program("""
        import threading
        import ascentrt as art
        art.set_device(1)
        seen = []
        t = threading.Thread(target=lambda: seen.append(art.current_device().id))
        t.start(); t.join(10)
        print(art.current_device().id, seen[0])
    """, env={"ASCENTRT_DEVICES": "2"})
    assert out.split() == ["1", "0"]


def test_many_bad_calls_in_a_row_leave_the_runtime_usable(dev, stream):
    before = dev.mem_info()
    for _ in range(100):
        for call in (lambda: art.malloc(-1), lambda: art.free(1), lambda: art.memcpy(1, 2, 3),
                     lambda: art.set_device(7), lambda: stream.synchronize(timeout=-1)):
            with pytest.raises(art.AscentError):
                call()
    assert dev.mem_info() == before
    art.get_last_error()
    _still_usable(stream)


@pytest.mark.parametrize("events", [
    [("alloc", 1, -1, 0)], [("alloc", 1, 0, 0)], [("alloc", 1, "64", 0)], [("alloc", 1, 1.5, 0)],
    [("alloc", 1, True, 0)], [("alloc", 1, 64)], [("free", [1], 0)], [("bogus",)], [()], [None],
    [("alloc", 1, 64, 0), ("free",)], 5, [(np.array([1, 2]), 1, 64, 0)],
    [("alloc", 1, 64, 0), ("alloc", 1, 64, 0)],  # an id allocated again while live
], ids=repr)
def test_a_bad_trace_event_is_refused_before_anything_is_replayed(events):
    # (load_trace checks a file's lines; a trace built in memory is checked the same way)
    pool = art.memory.BlockPool(art.memory.ArenaChunks(1 << 30), name="replayed")
    with pytest.raises(art.InvalidArgumentError) as err:
        art.replay_trace(events, pool)
    assert err.value.code == E.INVALID_PARAM
    assert pool.peak_allocated == 0 and pool.reserved == 0  # nothing was replayed


@pytest.mark.parametrize("kwargs", [{"capacity": 0}, {"capacity": -1}, {"capacity": 1.5},
                                    {"capacity": "1G"}, {"capacity": True}, {"pool": 5}], ids=repr)
def test_replay_refuses_a_bad_pool_or_capacity(kwargs):
    with pytest.raises(art.InvalidArgumentError) as err:
        art.replay_trace([("alloc", 1, 64, 0)], **kwargs)
    assert err.value.code == E.INVALID_PARAM


def test_replay_takes_a_recorder_for_its_pool_and_ids_used_again_after_their_free():
    pool = art.memory.BlockPool(art.memory.ArenaChunks(1 << 30), name="recorded")
    recorder = art.memory.TraceRecorder(pool)
    events = [("alloc", 1, 64, 0), ("free", 1, 0), ("alloc", 1, 128, None), ("free", 1, None)]
    assert art.replay_trace(events, recorder)["peak_allocated"] == 128
    assert [e[0] for e in recorder.events] == ["alloc", "free", "alloc", "free"]


@pytest.mark.parametrize("nbytes", [0, -1, -(1 << 40)])
def test_a_pool_refuses_a_request_of_no_bytes(nbytes):
    # A fresh pool once remembered (-1, 0) as its last request: asked for -1 bytes, it handed
    # out a block of 0 bytes.
    pool = art.memory.BlockPool(art.memory.ArenaChunks(1 << 30), name="fresh")
    with pytest.raises(art.InvalidArgumentError) as err:
        pool.allocate(nbytes)
    assert err.value.code == E.INVALID_PARAM and pool.allocated == 0
    assert pool.allocate(64).size == 64  # and it goes on


# ---- graphs are checked as the eager calls they stand for, when they are built ----------------

@pytest.mark.parametrize("add", [
    lambda g, a, b: g.add_copy(b, a, -5), lambda g, a, b: g.add_copy(b, a, 3.5),
    lambda g, a, b: g.add_copy(b, a, 1000), lambda g, a, b: g.add_copy(b, a, "x"),
    lambda g, a, b: g.add_memset(a, "x", 16), lambda g, a, b: g.add_memset(a, 1000, 16),
    lambda g, a, b: g.add_memset(a, 1, 16, after=5),
    lambda g, a, b: g.add_kernel(art.kernels.noop, reads=5),
    lambda g, a, b: g.add_kernel(art.kernels.noop, cost=10 ** 400),
    lambda g, a, b: g.add_kernel(art.kernels.noop, cost=float("inf")),
    lambda g, a, b: g.add_kernel(art.kernels.noop, name=5),
    # (a falsy non-list group, or a falsy non-str name, once read as "none given")
    lambda g, a, b: g.add_kernel(art.kernels.noop, a, reads=0, writes=[a]),
    lambda g, a, b: g.add_kernel(art.kernels.noop, a, reads=[a], writes=0),
    lambda g, a, b: g.add_copy(b, a, 16, name=0), lambda g, a, b: g.add_memset(a, 1, 16, name=0),
    lambda g, a, b: g.add_kernel(art.kernels.noop, cost=None),
], ids=["copy -5", "copy 3.5", "copy past end", "copy str", "memset str", "memset 1000",
        "after int", "reads int", "cost huge int", "cost inf", "name int", "reads 0", "writes 0",
        "copy name 0", "memset name 0", "cost None"])
def test_a_bad_graph_node_is_refused_when_added_so_no_run_does_half_of_it(add, stream):
    a, b = art.malloc(64), art.malloc(64)
    g = art.TaskGraph()
    g.add_memset(a, 9, 16)
    with pytest.raises(art.InvalidArgumentError) as err:
        add(g, a, b)
    assert err.value.code == E.INVALID_PARAM and len(g.nodes) == 1
    art.memset(a, 0)
    g.schedule(1).run(timeout=10)  # the graph as it was: the good node alone
    assert a.numpy()[0] == 9 and g.add_kernel(art.kernels.noop, reads=b) is g.nodes[-1]
    a.free(), b.free()


def test_a_launch_name_must_be_text(stream):
    with pytest.raises(art.InvalidArgumentError) as err:
        art.launch(art.kernels.noop, stream=stream, name=5)
    assert err.value.code == E.INVALID_PARAM and stream.query()


def test_a_schedule_run_checks_its_timeout_and_a_capture_before_submitting(stream):
    a = art.malloc(64)
    g = art.TaskGraph()
    g.add_memset(a, 7, 16)
    art.memset(a, 0)
    for bad in (-1, 0, "x"):
        with pytest.raises(art.InvalidArgumentError) as err:
            g.schedule(1).run(timeout=bad)
        assert err.value.code == E.RT_PARAM_INVALID
    assert a.numpy()[0] == 0  # nothing ran
    s = art.Stream()
    s.begin_capture()
    with pytest.raises(art.CaptureError) as err:
        g.schedule(1).run([s])  # as synchronizing a capturing stream
    assert err.value.code == E.RT_STREAM_CAPTURED
    with pytest.raises(art.CaptureError):
        s.end_capture()  # the refused call invalidated the capture
    s.destroy()
    a.free()


def test_schedule_planning_grows_with_the_graph_not_the_streams_asked_for():
    g = art.TaskGraph()
    g.add_kernel(art.kernels.noop)
    import time
    t0 = time.thread_time()  # (CPU time: a loaded machine stretches wall time)
    most = art.Device(0)._backend.properties().max_streams or 20000  # (0: no limit, the cpu's)
    plan = g.schedule(num_streams=most)  # (planned as an N x N table, 20000 took gigabytes)
    assert time.thread_time() - t0 < 2 and plan.assignment == [0]


def test_a_schedule_over_the_stream_limit_is_refused_and_a_failed_run_leaves_no_streams():
    out = run_program("""
        import ascentrt as art
        g = art.TaskGraph()
        g.add_kernel(art.kernels.noop)
        try:
            g.schedule(3000)
        except art.AscentError as e:
            print(int(e.code))
        before = [art.Stream() for _ in range(1000)]
        try:
            g.schedule(1984).run()  # the limit is reached half-way through its streams
        except art.AscentError as e:
            print(int(e.code))
        g.schedule(1).run(timeout=10)  # the half-made streams were destroyed
        print(len([art.Stream() for _ in range(984)]))
    """, env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend910b"})
    assert out.split() == ["207008", "207008", "984"]


def test_a_graph_update_on_a_stream_of_another_device_is_refused():
    out = run_program("""
        import ascentrt as art
        s, s1 = art.Device(0).create_stream(), art.Device(1).create_stream()
        x, y = art.malloc(256), art.malloc(256)
        s.begin_capture(); s.begin_task_group(); art.memcpy_async(y, x, stream=s)
        group = s.end_task_group(); g = s.end_capture()
        try:
            g.update(group, s1)
        except art.AscentError as e:
            print(int(e.code))
        u = art.Device(0).create_stream()
        with g.update(group, u):
            try:
                u.end_capture()  # not a capture: an update diverts the stream
            except art.AscentError as e:
                print(int(e.code))
            art.memcpy_async(y, x, stream=u)
        g.launch(s); s.synchronize(timeout=10)
        print("ok")
    """, env={"ASCENTRT_DEVICES": "2"})
    assert out.split() == ["107003", str(int(E.RT_STREAM_NOT_CAPTURED)), "ok"]


@pytest.mark.parametrize("assignment", [[0], [0, 1, 2], [0, -1], [0, 1.5], 5, "ab"], ids=repr)
def test_a_task_graph_drawn_with_a_bad_assignment_is_refused(assignment):
    g = art.TaskGraph()
    g.add_kernel(art.kernels.noop, name='say "hi"')
    g.add_kernel(art.kernels.noop)
    for draw in (g.to_dict, g.to_dot):
        with pytest.raises(art.InvalidArgumentError) as err:
            draw(assignment)
        assert err.value.code == E.INVALID_PARAM
    assert 'say \\"hi\\"' in g.to_dot(g.schedule(2).assignment)  # a quote in a name is escaped


def test_an_array_of_python_objects_is_no_memory_to_copy_or_register(buf):
    # (its bytes are object pointers: a copy into it would overwrite them; one out of it
    # raised a bare TypeError, and acl.util.numpy_to_ptr handed out its address)
    objects = np.array([object()] * 16)
    for copy in (lambda: art.memcpy(objects, buf, 64), lambda: art.memcpy(buf, objects, 64),
                 lambda: art.memory.external.register_host(objects)):
        with pytest.raises(art.InvalidArgumentError) as err:
            copy()
        assert err.value.code == E.INVALID_PARAM
    assert all(type(o) is object for o in objects) and buf.numpy()[0] == 0x11


@pytest.mark.parametrize("key", [slice(0.5, 2), slice(0, "8"), slice(None, 2.0)], ids=repr)
def test_buffer_slice_bounds_must_be_ints(buf, key):
    with pytest.raises(art.InvalidArgumentError) as err:
        buf[key]
    assert err.value.code == E.INVALID_PARAM


@pytest.mark.parametrize("cost", [10 ** 400, float("inf"), float("nan"), -1.0, {"flops": 10 ** 400},
                                  # a Cost object is checked as the keyword and dict forms are
                                  Cost(seconds=1e-3, block_dim="x"), Cost(seconds=1e-3, block_dim=-24),
                                  Cost(seconds=1e-3, block_dim=True), Cost(flops=1.0, link_bytes=-5.0),
                                  Cost(seconds=float("nan"))], ids=repr)
def test_a_launch_cost_must_be_a_finite_number(stream, cost):
    # (an int too large for a float raised a bare OverflowError from math.isfinite)
    with pytest.raises(art.InvalidArgumentError) as err:
        art.launch(art.kernels.noop, stream=stream, cost=cost)
    assert err.value.code == E.INVALID_PARAM and stream.query()


@pytest.mark.parametrize("cost", [{"flops": ""}, {"flops": []}, {"bytes": ()}, {"flops": 0j},
                                  {"flops": None}, {"bytes": None}, {"seconds": None}, {"seconds": ""},
                                  {"flops": True}, Cost(flops=None), Cost(bytes=""),
                                  Cost(seconds=1e-3, link_bytes=None), Cost(link_bytes=[])], ids=repr)
def test_a_cost_value_that_is_no_number_is_refused_not_read_as_zero(stream, cost):
    # (`value or 0.0` once took "", [], (), 0j and None for 0 flops, and the kernel as uncosted)
    with pytest.raises(art.InvalidArgumentError, match=r"cost \w+ must be a finite number >= 0") as err:
        art.launch(art.kernels.noop, stream=stream, cost=cost)
    assert err.value.code == E.INVALID_PARAM and stream.query()


@pytest.mark.parametrize("cost", [np.int64(1), np.float32(1e-3), np.float64(1e-3), np.uint8(2),
                                  {"seconds": np.float32(1e-3)}, {"flops": np.int64(10 ** 6), "bytes": np.float16(8)},
                                  Cost(flops=np.float32(1e6), block_dim=np.int64(2))], ids=repr)
def test_numpy_scalars_are_numbers_to_a_cost(stream, cost):
    # (np.int64(1) was refused as "must be a finite number", np.float64 accepted)
    art.launch(art.kernels.noop, stream=stream, cost=cost)
    stream.synchronize(timeout=10)


def test_numpy_ints_are_a_block_dim_and_bools_are_not(stream):
    art.launch(art.kernels.noop, stream=stream, block_dim=np.int32(1), cost=np.float64(1e-6))
    art.launch(art.kernels.noop, stream=stream, cost=Cost(seconds=1e-6, block_dim=np.uint16(1)))
    stream.synchronize(timeout=10)
    for bad in (True, np.bool_(True), 1.0, np.float32(1)):
        with pytest.raises(art.InvalidArgumentError, match="block_dim must be an int .*not a bool"):
            art.launch(art.kernels.noop, stream=stream, block_dim=bad)
    for bad in (True, np.bool_(True)):
        with pytest.raises(art.InvalidArgumentError, match=r"an int or float, numpy's too; not a bool\), got"):
            art.launch(art.kernels.noop, stream=stream, cost=bad)


@pytest.mark.parametrize("call", [
    lambda b, s: art.malloc_async(64, stream=s),
    lambda b, s: art.malloc(64, stream=s),
    lambda b, s: art.free_async(b, stream=s),
    lambda b, s: b.free(s),
    lambda b, s: art.record_stream(b, s),
    lambda b, s: art.MemPool().malloc_async(64, stream=s),
])
def test_memory_ordered_on_a_destroyed_stream_is_refused(buf, call):
    s = art.Stream()
    art.malloc(64, stream=s).free(s)
    s.destroy()  # (the allocator had just checked this stream: its memo must not pass it)
    with pytest.raises(art.InvalidHandleError) as e:
        call(buf, s)
    assert e.value.code == E.RT_INVALID_HANDLE
    assert buf.alive and buf.numpy()[0] == 0x11


def test_a_pool_frees_only_its_own_buffers(buf):
    pool = art.MemPool()
    with pytest.raises(art.InvalidArgumentError) as e:
        pool.free_async(buf)
    assert e.value.code == E.INVALID_PARAM and buf.alive
    mine = pool.malloc_async(64)
    pool.free_async(mine)
    assert not mine.alive
    pool.destroy()


def test_a_wait_on_a_notify_destroyed_before_any_record_is_a_deadlock_not_a_hang():
    s = art.Stream()
    n = art.Notify()
    s.wait_notify(n)
    n.destroy()  # nothing, not even the host, can record it now
    with pytest.raises(art.DeadlockError) as e:
        s.synchronize()
    assert "destroyed" in str(e.value)
    with pytest.raises(art.DeadlockError):
        s.destroy()
    assert s.destroy(force=True) == 1
    _still_usable(art.Stream())


@pytest.mark.parametrize("value", ["no", "False", float("nan"), 2, None, 1.0], ids=repr)
@pytest.mark.parametrize("call", [
    lambda v, s: art.Event(timing=v),
    lambda v, s: art.launch_host_func(lambda: None, stream=s, blocking=v),
    lambda v, s: s.destroy(force=v),
    lambda v, s: art.Stream(stop_on_failure=v),
    lambda v, s: art.ReusePolicy(opportunistic=v),
    # (writable=None means: what the object allows)
    lambda v, s: art.memory.external.register_host(np.zeros(4), writable="x" if v is None else v),
], ids=["Event.timing", "launch_host_func.blocking", "destroy.force", "stop_on_failure",
        "ReusePolicy", "register_host.writable"])
def test_a_yes_no_argument_must_be_a_bool(stream, call, value):
    # ("no" and NaN are true to Python: taken as flags they did the opposite of what was meant)
    with pytest.raises(art.InvalidArgumentError) as err:
        call(value, stream)
    assert err.value.code == E.INVALID_PARAM
    assert stream.query()  # nothing was queued


def test_a_profile_folder_is_not_replaced_on_overwrite_no(tmp_path):
    folder = tmp_path / "p"
    with art.profile(folder):
        pass
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(art.InvalidArgumentError) as err:
        art.profile(folder, overwrite="no")
    assert err.value.code == E.INVALID_PARAM
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_capture_mode_of_true_is_refused(stream):
    from ascentrt.graph.capture import begin_capture
    with pytest.raises(art.InvalidArgumentError) as err:
        begin_capture(stream, True)
    assert err.value.code == E.RT_CAPTURE_MODE_NOT_SUPPORT
    assert stream.capture_status() == art.CaptureStatus.NONE


@pytest.mark.parametrize("bad", ["destroyed", "stopped", "not a stream", "other device"])
def test_a_schedule_run_checks_every_stream_before_submitting_anything(bad):
    if bad == "other device" and art.device_count() < 2:
        pytest.skip("one device")
    a, b = art.malloc(64), art.malloc(64)
    art.memset(a, 0), art.memset(b, 0)
    g = art.TaskGraph()
    g.add_memset(a, 7, 16)
    g.add_memset(b, 7, 16)  # independent: one per stream
    plan = g.schedule(2)
    good = art.Stream()
    if bad == "destroyed":
        other = art.Stream()
        other.destroy()
        code = E.RT_INVALID_HANDLE
    elif bad == "stopped":
        other = art.Stream(stop_on_failure=True)
        art.launch(lambda: 1 / 0, stream=other)
        with pytest.raises(art.AscentError):
            other.synchronize()
        code = E.RT_STREAM_ABORT
    elif bad == "not a stream":
        other, code = "stream", E.INVALID_PARAM
    else:
        other, code = art.Device(1).create_stream(), E.RT_STREAM_CONTEXT
    streams = [good, other] if plan.assignment[0] == 0 else [other, good]
    with pytest.raises(art.AscentError) as err:
        plan.run(streams)
    assert err.value.code == code
    assert a.numpy()[0] == 0 and b.numpy()[0] == 0  # neither node ran
    a.free(), b.free()


@pytest.mark.parametrize("n", [1 << 17, 10 ** 9, 2 ** 63])
def test_a_schedule_on_a_device_without_a_stream_limit_is_still_bounded(n):
    g = art.TaskGraph()
    g.add_kernel(art.kernels.noop)
    with pytest.raises(art.InvalidArgumentError) as err:
        g.schedule(n)  # (10**9 lanes ran out of memory, 2**63 raised OverflowError)
    assert err.value.code == E.RT_NO_STREAM_RESOURCE


@pytest.mark.parametrize("shape", [(1.5, 2), (True, 2), (np.bool_(True), 2), "8", (-1,), 2.0], ids=repr)
def test_a_view_shape_must_be_ints_in_every_build(buf, shape):
    # (a compiled build raised a bare TypeError for these, and for numpy ints below)
    with pytest.raises(art.InvalidArgumentError) as err:
        buf.numpy(np.uint8, shape)
    assert err.value.code == E.INVALID_PARAM
    with pytest.raises(art.InvalidArgumentError):
        buf.view(np.uint8, shape)


def test_a_view_shape_may_be_numpy_ints(buf):
    assert buf.view(np.float32, np.int64(8)).numpy().shape == (8,)
    assert buf.numpy(np.uint8, (np.int64(8), np.int32(2))).shape == (8, 2)


@pytest.mark.parametrize("pool", [5, "x", object()], ids=_stable_id)
def test_memory_stats_of_something_that_is_no_pool_is_refused(pool):
    for call in (art.memory_stats, art.memory_snapshot):
        with pytest.raises(art.InvalidArgumentError) as err:
            call(pool=pool)
        assert err.value.code == E.INVALID_PARAM


def test_a_demo_with_more_batches_than_the_host_can_stage_is_refused_before_allocating():
    from ascentrt import demo
    for call in (lambda: demo.check_batches(10 ** 20), lambda: demo.run_pipeline(1, 10 ** 20)):
        with pytest.raises(art.OutOfMemoryError) as err:  # (it was killed by the kernel instead)
            call()
        assert err.value.code == E.RT_MEMORY_ALLOCATION
    demo.check_batches(12)


def test_a_demo_refused_part_way_leaves_no_profile_folder(tmp_path, monkeypatch):
    # (the memory shrank after the command's own check: the folder of the run that did not
    # happen made its retry refused, "already holds a profile")
    from ascentrt import cli, demo
    rooms = iter([64 << 30])
    monkeypatch.setattr(demo, "_available_memory", lambda: next(rooms, 1 << 20))
    backend = art.Device(0).properties.backend
    for env in ("ASCENTRT_BACKEND", "ASCENTRT_SIM_PRESET"):  # (the command sets them: restored after)
        monkeypatch.setenv(env, os.environ.get(env, "cpu" if env == "ASCENTRT_BACKEND" else "ascend910b"))
    out = tmp_path / "demo"
    assert cli.main(["demo", "--backend", backend, "--no-compare", "-o", str(out)]) == 1
    assert not out.exists()


@pytest.mark.parametrize("value", [1.0, True, "1", [1], None, 99], ids=repr)
def test_an_enum_argument_takes_its_members_and_ints_only(stream, buf, value):
    # (IntEnum(1.0) and IntEnum(True) are members: a float or a bool passed as a mode or a data
    # type was taken; a list raised a bare TypeError)
    from ascentrt import hccl
    from ascentrt.graph.capture import begin_capture
    checks = [(lambda: stream.set_failure_mode(value), art.InvalidArgumentError, E.INVALID_PARAM),
              (lambda: begin_capture(stream, value), art.InvalidArgumentError, E.RT_CAPTURE_MODE_NOT_SUPPORT),
              (lambda: hccl.constants.data_type(value), hccl.HcclError, hccl.HcclResult.E_PARA),
              (lambda: hccl.constants.reduce_op(value), hccl.HcclError, hccl.HcclResult.E_PARA)]
    if value is not None:  # (no kind: the addresses decide)
        checks.append((lambda: art.memcpy(buf, np.zeros(16, np.uint8), 16, value),
                       art.InvalidArgumentError, E.INVALID_PARAM))
    for call, error, code in checks:
        with pytest.raises(error) as err:
            call()
        assert err.value.code == code
    assert buf.numpy()[0] == 0x11 and stream.capture_status() == art.CaptureStatus.NONE


def test_a_destroyed_handle_answers_no_more_questions():
    ev = art.Event()
    ev.destroy()
    s = art.Stream()
    s.destroy()
    pool = art.MemPool()
    pool.destroy()
    for call in (lambda: ev.recorded, s.capture_status, lambda: pool.trim_to(0),
                 lambda: setattr(pool, "release_threshold", 1 << 20)):
        with pytest.raises(art.InvalidHandleError) as err:
            call()
        assert err.value.code == E.RT_INVALID_HANDLE


@pytest.mark.parametrize("value", [True, False, 0, 1, np.bool_(True), np.int64(0)], ids=repr)
def test_a_yes_no_argument_takes_bools_and_0_or_1(stream, value):
    assert art.Event(timing=value).timing is bool(value)
    art.launch_host_func(lambda: None, stream=stream, blocking=value)
    stream.synchronize(timeout=10)
    assert art.ReusePolicy(opportunistic=value).opportunistic is bool(value)
    art.Stream(stop_on_failure=value).destroy(force=value)


def test_a_registered_array_that_numpy_moved_is_refused_not_written(buf):
    # (the registry kept the old range: a copy through the pointer wrote into freed memory and
    # crashed the process)
    from ascentrt.memory.external import register_host, unregister_host
    arr = np.zeros(4 << 20, np.uint8)
    ptr = register_host(arr)
    arr.resize(64 << 20, refcheck=False)  # numpy moves the data
    with pytest.raises(art.InvalidAddressError) as err:
        art.memcpy(ptr, buf, 64)
    assert err.value.code == E.INVALID_PARAM and "moved" in str(err.value)
    unregister_host(ptr)


# ---- the memory layer's own classes (art.memory: pools and chunk sources to study strategies) --

_M = art.memory
_BAD_VALUES = [1.5, True, -1, "64", None, 2 ** 64, np.float64(3), []]


def _shrunk(nbytes):
    """A fresh 4 MiB chunk of a chunk source, shrunk to `nbytes`."""
    source = _M.ArenaChunks(1 << 30)
    source.shrink(source.allocate(4 << 20), nbytes)
_MEMORY_ENTRY_POINTS = {
    "ArenaChunks(capacity)": lambda v: _M.ArenaChunks(v),
    "ArenaChunks(base)": lambda v: _M.ArenaChunks(1 << 30, base=v),
    "ArenaChunks(view)": lambda v: _M.ArenaChunks(1 << 30, view=v),
    "ArenaChunks.allocate": lambda v: _M.ArenaChunks(1 << 30).allocate(v),
    "ArenaChunks.deallocate": lambda v: _M.ArenaChunks(1 << 30).deallocate(v),
    "ArenaChunks.shrink(chunk)": lambda v: _M.ArenaChunks(1 << 30).shrink(v, 2 << 20),
    "ArenaChunks.shrink(nbytes)": lambda v: _shrunk(v),
    "BlockPool(upstream)": lambda v: _M.BlockPool(v),
    "BlockPool(align)": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30), align=v),
    "BlockPool(split_limit)": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30), split_limit=v),
    "BlockPool(release_threshold)": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30), release_threshold=v),
    "BlockPool(gc_threshold)": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30), gc_threshold=v),
    "BlockPool(policy)": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30), policy=v),
    "BlockPool(name)": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30), name=v),
    "BlockPool.allocate": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30)).allocate(v),
    "BlockPool.deallocate": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30)).deallocate(v),
    "BlockPool.record_stream": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30)).record_stream(v, None),
    "BlockPool.prereserve": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30)).prereserve(v),
    "BlockPool.trim_to": lambda v: _M.BlockPool(_M.ArenaChunks(1 << 30)).trim_to(v),
}


@pytest.mark.parametrize("entry", sorted(_MEMORY_ENTRY_POINTS))
def test_the_memory_layers_classes_refuse_bad_values_with_a_code(entry):
    # (each took them: a float size hit the memo of the last int size, a bool aligned to 1,
    # and strings, None or a block of another pool escaped as TypeError / AttributeError, or
    # corrupted both pools' accounting; a compiled build raised TypeError at the call)
    make = _MEMORY_ENTRY_POINTS[entry]
    for value in _BAD_VALUES:
        try:
            made = make(value)
        except art.AscentError as e:
            assert e.code == E.INVALID_PARAM, (entry, value, e)
            continue
        if isinstance(made, _M.BlockPool):  # (a value it may take: the pool still works)
            made.deallocate(made.allocate(100))
    other = _M.BlockPool(_M.ArenaChunks(1 << 30), name="other")
    block = other.allocate(100)
    with pytest.raises(art.InvalidArgumentError, match="not a block this pool allocated"):
        _M.BlockPool(_M.ArenaChunks(1 << 30)).deallocate(block)
    assert other.allocated == block.size


def test_views_unregistering_and_costs_refuse_what_numpy_or_the_clock_cannot_hold(dev):
    # (bare ValueError / TypeError from inside the package, and a cost whose end the virtual
    # clock could not hold, accepted at launch and failing as a kernel exception)
    import numpy as np
    from ascentrt.memory.external import register_host, unregister_host
    b = art.malloc(256)
    for args in [(np.float32, (2**62, 2**62, 0)), (np.uint8, (2**63, 0)),
                 (np.dtype(("f4", (1000,))),)]:
        for call in (b.view, b.numpy, b[0:64].view):
            with pytest.raises(art.InvalidArgumentError):
                call(*args)
    keep = np.zeros(64, np.uint8)
    ptr = register_host(keep)
    for bad in ([1, 2], {}, 1.0, True):
        with pytest.raises(art.InvalidArgumentError):
            unregister_host(bad)
    unregister_host(np.int64(ptr))
    for cost in (1e300, {"flops": 1e30}, {"bytes": 1e300}):
        with pytest.raises(art.InvalidArgumentError):
            art.launch(art.kernels.noop, cost=cost)
    b.free()


def test_every_setting_set_but_empty_is_read_as_its_default_or_its_own_empty_meaning(monkeypatch):
    # (empty ASCENTRT_SIM_PRESET meant the default, empty ASCENTRT_BACKEND was refused)
    from ascentrt import config
    for env, _, _ in config.table():
        monkeypatch.setenv(env, "")
        config.get(env)  # no refusal
        monkeypatch.delenv(env)
