"""The facade's remaining differences from CANN, each a family: which bytes objects copies may
write into, teardown that never waits forever, leaks reported at finalize, the fuzzed
top-level namespace, sizes printed in their unit, and pool reuse behind timed waits."""

import gc
import json
import linecache
import os
import subprocess
import sys
import threading
import time
import types
import warnings
import weakref

import numpy as np
import pytest

import ascentrt as art
import ascentrt.acl as acl
from ascentrt import context
from ascentrt.acl import constants as C
from ascentrt.memory.external import register_host
from ascentrt.memory.leaks import LeakWarning
from ascentrt.memory import shared_bytes
from ascentrt.memory.shared_bytes import interpreter_shares
from ascentrt.units import format_bytes

D2H = C.ACL_MEMCPY_DEVICE_TO_HOST
PARAM_INVALID = C.ACL_ERROR_RT_PARAM_INVALID


@pytest.fixture
def acl_device():
    """acl's device 0 with 64 bytes of 0x41 on it; everything released afterwards."""
    assert acl.rt.set_device(0) == 0
    dev, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memset(dev, 64, 0x41, 64) == 0
    yield dev
    acl.rt.free(dev)
    acl.rt.reset_device_force(0)
    context.set_current_context(None)


# ---- bytes_to_ptr: writes reach the program's bytes, never ones the interpreter shares --------

def _read_back(dev, buf):
    """A helper that copies device memory into a buffer it was handed (the samples' shape)."""
    return acl.rt.memcpy(acl.util.bytes_to_ptr(buf), len(buf), dev, len(buf), D2H)


def test_a_run_time_bytes_is_written_however_many_references_hold_it(acl_device):
    kept = []
    out = bytes(64)
    kept.append(out)                                   # also in a list
    assert _read_back(acl_device, out) == 0            # and passed down to a helper
    assert out == b"A" * 64 and kept[0] is out
    holder = types.SimpleNamespace(out=bytes(64), by_name={"o": bytes(32)})
    assert _read_back(acl_device, holder.out) == 0 and holder.out == b"A" * 64
    assert _read_back(acl_device, holder.by_name["o"]) == 0 and holder.by_name["o"] == b"A" * 32


def _constant():
    return b"z" * 64                                   # folded into one constant of this code


def _nested_constant():
    return (b"k" * 16, 1)[0]                           # inside a tuple constant


def test_constants_and_tables_of_code_are_never_written(acl_device):
    late = {}
    exec("def made_later():\n    return b'm' * 24\n", late)   # code that came after the first scan
    shared = [_constant(), _nested_constant(), late["made_later"](), b"a", b"",
              _constant.__code__.co_linetable]
    before = [bytes(bytearray(s)) for s in shared]
    for obj in shared:
        assert interpreter_shares(obj)
        if obj:
            assert _read_back(acl_device, obj) == PARAM_INVALID
            assert "one the interpreter shares" in acl.get_recent_err_msg()
    assert [bytes(bytearray(s)) for s in shared] == before      # untouched
    assert _constant() == b"z" * 64 and late["made_later"]() == b"m" * 24


def test_a_constant_of_the_running_module_code_is_not_written(acl_device):
    scope = {"acl": acl, "dev": acl_device, "D2H": D2H}
    exec("out = b'\\x00' * 48\nret = acl.rt.memcpy(acl.util.bytes_to_ptr(out), 48, dev, 48, D2H)\n",
         scope)
    assert scope["ret"] == PARAM_INVALID and scope["out"] == bytes(48)


def test_the_bytecode_and_constants_of_code_held_in_a_variable_only_are_never_written(
        acl_device):
    code = compile("data = b'q' * 40\n", "<made>", "exec")  # only this variable holds it
    scope: dict = {}
    exec(code, scope)
    bytecode = _constant.__code__.co_code              # (3.11 keeps it on the code object)
    for obj in (scope["data"], bytecode):
        before = bytes(bytearray(obj))
        assert _read_back(acl_device, obj) == PARAM_INVALID
        assert bytes(bytearray(obj)) == before
    again: dict = {}
    exec(code, again)
    assert again["data"] == b"q" * 40 and _constant() == b"z" * 64


def test_a_numpy_view_of_a_read_only_registration_is_read_only(acl_device):
    shared = _constant()
    view = acl.util.ptr_to_numpy(acl.util.bytes_to_ptr(shared), (64,), C.NPY_UBYTE)
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[:] = 0
    assert _constant() == b"z" * 64
    mine = bytes(64)                                   # the program's own: writable
    view = acl.util.ptr_to_numpy(acl.util.bytes_to_ptr(mine), (64,), C.NPY_UBYTE)
    view[:] = 7
    assert mine == bytes([7]) * 64


def test_looking_for_code_keeps_no_caller_frame_alive():
    class Sentinel:
        pass

    def caller():
        sentinel = Sentinel()
        shared_bytes._state["stale"] = True           # the next check scans the frames
        assert not interpreter_shares(bytes(8))
        return weakref.ref(sentinel)

    gc.disable()
    try:
        assert caller()() is None                     # freed on return, not left to the collector
    finally:
        gc.enable()


def test_the_core_refuses_a_writable_registration_of_a_shared_bytes():
    with pytest.raises(art.InvalidArgumentError, match="the interpreter shares"):
        register_host(_constant(), writable=True)
    assert register_host(bytes(40), writable=True)     # a run-time object: as before


# ---- destroy_stream: waits for work that can finish, never for ever behind a stuck wait ------

@pytest.fixture
def short_drain(monkeypatch):
    monkeypatch.setattr(context, "DRAIN_S", 0.2)
    assert acl.rt.set_device(0) == 0
    yield
    acl.rt.reset_device_force(0)
    context.set_current_context(None)


@pytest.mark.cpu_only
def test_destroy_stream_behind_an_unrecorded_notify_fails_and_keeps_the_handle(short_drain):
    s, _ = acl.rt.create_stream()
    n, _ = acl.rt.create_notify(0)
    assert acl.rt.wait_and_reset_notify(n, s, 0) == 0          # 0: waits for ever
    start = time.monotonic()
    assert acl.rt.destroy_stream(s) == C.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    assert time.monotonic() - start < 5
    msg = acl.get_recent_err_msg()
    assert "notify" in msg and "destroy_stream_force" in msg
    assert acl.rt.stream_query(s)[1] == 0                      # still a live handle
    assert acl.rt.destroy_stream_force(s) == 0
    assert acl.rt.destroy_stream(s) == C.ACL_ERROR_RT_INVALID_HANDLE

def test_destroy_stream_in_a_cycle_of_waits_says_deadlock_and_keeps_the_handle(short_drain):
    s, _ = acl.rt.create_stream()
    n, _ = acl.rt.create_notify(0)
    assert acl.rt.wait_and_reset_notify(n, s, 0) == 0
    assert acl.rt.record_notify(n, s) == 0                     # behind the wait it releases
    assert acl.rt.destroy_stream(s) == C.ACL_ERROR_RT_DEADLOCK
    assert acl.rt.stream_query(s)[1] == 0                      # still a live handle
    assert acl.rt.destroy_stream_force(s) == 0



@pytest.mark.cpu_only
def test_destroy_stream_waits_past_the_grace_for_work_that_runs(short_drain):
    s, _ = acl.rt.create_stream()
    gate = threading.Event()
    assert acl.rt.launch_kernel(lambda: gate.wait(10), (), s) == 0
    threading.Timer(0.6, gate.set).start()                    # three graces later
    start = time.monotonic()
    assert acl.rt.destroy_stream(s) == 0
    assert time.monotonic() - start >= 0.5


@pytest.mark.cpu_only
def test_destroy_stream_behind_a_timed_wait_on_a_destroyed_notify_fails_without_waiting_it_out(
        short_drain):
    s, _ = acl.rt.create_stream()
    n, _ = acl.rt.create_notify(0)
    assert acl.rt.wait_and_reset_notify(n, s, 60_000) == 0     # a minute: it can only time out
    assert acl.rt.destroy_notify(n) == 0
    start = time.monotonic()
    assert acl.rt.destroy_stream(s) == C.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
    assert time.monotonic() - start < 5
    assert acl.rt.destroy_stream_force(s) == 0


@pytest.mark.cpu_only
def test_destroy_context_waits_past_the_grace_for_work_that_runs(short_drain):
    ctx, _ = acl.rt.create_context(0)
    s, _ = acl.rt.create_stream()
    host, _ = acl.rt.malloc_host(8)
    gate = threading.Event()
    assert acl.rt.launch_kernel(lambda: gate.wait(10), (), s) == 0
    assert acl.rt.memset_async(host, 8, 5, 8, s) == 0          # queued behind the slow kernel
    threading.Timer(0.6, gate.set).start()                    # three graces later
    assert acl.rt.destroy_context(ctx) == 0
    assert acl.util.ptr_to_bytes(host, 8) == bytes([5]) * 8    # nothing was thrown away
    assert acl.rt.free_host(host) == 0


# ---- leaks: what finalize reclaims is reported once, at the program's call ------------------

def _finalize_leaking():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acl._teardown()                               # what earlier tests left is not ours
    acl._init_count[0] = 0
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    acl.rt.malloc(1 << 20, 0)
    acl.rt.malloc_host(4096)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert acl.finalize() == 0
    context.set_current_context(None)
    return [w for w in caught if issubclass(w.category, LeakWarning)]


def test_finalize_reports_device_and_pinned_memory_it_reclaims_in_one_warning():
    (leak,) = _finalize_leaking()
    text = str(leak.message)
    assert "2 buffer(s), 1.0 MiB, never freed, reclaimed at acl.finalize (1 device 0, 1 pinned host)" in text
    assert leak.filename == __file__                           # the program's call, not ours
    assert "acl.finalize()" in linecache.getline(leak.filename, leak.lineno)


def test_finalize_goes_on_when_another_thread_freed_a_pinned_buffer_first():
    from ascentrt.acl import _memory
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        acl._teardown()
    acl._init_count[0] = 0
    assert acl.init() == 0
    first, _ = acl.rt.malloc_host(4096)
    second, _ = acl.rt.malloc_host(4096)
    raced = _memory._handed["host"][first]
    mem = raced._mem
    assert raced._release(raced)   # another thread's free, between finalize's look and its free
    raced._mem = mem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert acl.finalize() == 0
    assert second not in _memory._handed["host"] and first not in _memory._handed["host"]
    context.set_current_context(None)


def test_finalize_is_silent_with_the_leak_check_off(monkeypatch):
    monkeypatch.setenv("ASCENTRT_LEAK_CHECK", "off")
    assert _finalize_leaking() == []


SITES_PROGRAM = """
import ascentrt.acl as acl
acl.init(); acl.rt.set_device(0)
dev, _ = acl.rt.malloc(1 << 20, 0)
host, _ = acl.rt.malloc_host(4096)
acl.finalize()
"""


def test_finalize_names_the_sites_and_leaves_nothing_for_exit():
    out = subprocess.run([sys.executable, "-c", SITES_PROGRAM], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "ASCENTRT_LEAK_CHECK": "sites"})
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("LeakWarning") == 1, out.stderr
    assert "<string>:6: LeakWarning" in out.stderr
    assert "allocated at <string>:4 (1.0 MiB), <string>:5 (4.0 KiB)" in out.stderr


# ---- ascentrt info: sizes in the unit that shows them ---------------------------------------

def test_info_prints_each_size_in_the_unit_that_shows_it(tmp_path, monkeypatch, capsys):
    from ascentrt import cli
    live = os.getppid()                                 # a live process other than this one
    (tmp_path / f"{live}.json").write_text(json.dumps(
        {"format": 1, "pid": live, "program": "python small.py", "since": 0.0, "start_ticks": None,
         "devices": [{"device": 0, "memory_used": 1024, "memory_reserved": 3 << 19, "streams": 1}]}))
    monkeypatch.setenv("ASCENTRT_USAGE_DIR", str(tmp_path))
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"{live:<9}{'?':<20}1.0 KiB / 1.5 MiB " in out   # not '0 / 1' (an older file: no backend)
    total = art.Device(0).mem_info()[1]
    assert f"/ {format_bytes(total)}" in out and "(MiB)" not in out


# ---- pool reuse through a wait the pool inserts, with device-side waits bounded -------------

@pytest.mark.cpu_only
def test_reuse_through_an_inserted_wait_is_safe_when_device_waits_time_out(dev):
    a, b = dev.create_stream(), dev.create_stream()
    only_inserted = art.ReusePolicy(follow_event_dependencies=False, opportunistic=False,
                                    allow_internal_dependencies=True)
    pool = art.MemPool(dev, policy=only_inserted)
    gate, seen = threading.Event(), []
    try:
        buf = pool.malloc_async(16 << 20, a)
        art.memset(buf, 7)
        art.launch(lambda x: (gate.wait(10), seen.append(int(x.max()))), buf.view(np.uint8), stream=a)
        buf.free(stream=a)
        art.set_wait_timeout(0.05)                # every device-side wait gives up after 50 ms
        new = pool.malloc_async(16 << 20, b)
        assert new.ptr == buf.ptr and pool.stats()["num_inserted_waits"] == 1   # the path under test
        art.memset_async(new, 0xFF, stream=b)
        time.sleep(0.3)                           # (not a synchronization: six wait timeouts pass)
        gate.set()
        a.synchronize(timeout=10)
        b.synchronize(timeout=10)                 # the pool's own wait did not time out: no error
        assert seen == [7], "the block's new owner wrote before its old owner's kernel read it"
        assert (new.numpy() == 0xFF).all()
        new.free()
    finally:
        art.set_wait_timeout(None)
        gate.set()
        a.destroy(force=True)
        b.destroy(force=True)
        pool.destroy()


def test_code_exec_runs_over_and_over_is_noted_once():
    code = compile("x = 1", "<loop>", "exec")
    scope: dict = {}
    for _ in range(5000):
        exec(code, scope)
    assert len(shared_bytes._ran) < 100  # (each exec of the same code: two lookups, no entry)
