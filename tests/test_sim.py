"""The simulated NPU: exact timings from the preset, priorities, SQ back-pressure, virtual
timeouts, determinism, and the checks on presets and costs.

The exact cases run in the `--backend sim` session (make test runs one); the preset checks run
in every session, the cases in processes of their own once per build (see cli_once).
"""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ascentrt as art
from ascentrt import accel
from ascentrt.backends import presets
from ascentrt.backends.presets import PresetError
from subprocess_util import run_program

ON_SIM = os.environ.get("ASCENTRT_BACKEND") == "sim"
sim_only = pytest.mark.skipif(not ON_SIM, reason="runs in the --backend sim session")
# A test that starts its own processes gives them their backend itself: the session it runs in
# changes only the build they load (the cpu session's compiled one, the sim session's source).
# The command-line checks run once, in the cpu session; the simulator's cases once per build.
cli_once = pytest.mark.skipif(ON_SIM, reason="its own processes: runs once, in the cpu session")
each_build_once = pytest.mark.skipif(
    ON_SIM and "ascentrt.backends.sim" in accel.compiled(),
    reason="its own processes: the cpu session runs them on the compiled build")
P = presets.load("ascend910b")  # the default preset of the sim session


def _tasks(prof, kind=None):
    tasks = prof.snapshot().tasks
    return [t for t in tasks if kind is None or t.kind == kind]


@sim_only
def test_a_pinned_copy_takes_latency_plus_bytes_over_bandwidth(stream):
    n = 8 << 20
    host = art.malloc_host(n)
    dev_buf = art.malloc(n)
    with art.profile() as prof:
        art.memcpy_async(dev_buf, host, stream=stream)
        art.memcpy_async(host, dev_buf, stream=stream)
        stream.synchronize()
    h2d, d2h = _tasks(prof, "copy")
    expect = P.host_link_latency_ns + n / P.host_link_bandwidth * 1e9  # (dispatch: queued)
    assert abs(h2d.duration_ns - expect) <= 2
    assert abs(d2h.duration_ns - expect) <= 2
    assert d2h.start_ns == h2d.end_ns + P.dispatch_ns  # same stream: back to back
    dev_buf.free(), host.free()


@sim_only
def test_a_launch_cost_object_keeps_its_link_bytes(stream):
    # (launch once rebuilt a Cost without its link_bytes: reads over the peer link cost nothing)
    from ascentrt.backends.base import Cost
    n = 1 << 30
    with art.profile() as prof:
        art.launch(art.kernels.noop, stream=stream, cost=Cost(flops=1.0, link_bytes=float(n)))
        stream.synchronize()
    (k,) = _tasks(prof, "kernel")
    expect = P.peer_link_latency_ns + n / P.peer_link_bandwidth * 1e9
    assert abs(k.duration_ns - expect) <= 2


@sim_only
@pytest.mark.parametrize("later_us", [5, 150])  # inside the first's return path, and after it
def test_a_device_synchronize_returns_the_sync_cost_after_the_last_stream_ends(dev, later_us):
    # (one wait per stream returned host_sync_ns after the first stream's end: a stream that
    # ended within that return path added nothing, and the host woke before it had)
    a, b = dev.create_stream(), dev.create_stream()
    clock = dev._backend.now_ns
    took = {}
    for sync in ("device", "last stream"):
        t0 = clock()
        art.launch(art.kernels.noop, stream=a, cost=100e-6, block_dim=1)
        art.launch(art.kernels.noop, stream=b, cost=(100 + later_us) * 1e-6, block_dim=1)
        dev.synchronize() if sync == "device" else b.synchronize()
        took[sync] = clock() - t0
    assert took["device"] == took["last stream"]
    assert took["device"] >= (100 + later_us) * 1000 + P.host_sync_ns
    a.destroy(), b.destroy()


@sim_only
@pytest.mark.parametrize("how", ["stream", "event", "device", "graph"])
@pytest.mark.parametrize("kernel_us", [0.0, 8.99, 9.01, 40.0])
def test_a_synchronize_charges_its_return_path_once_from_the_work_end(dev, stream, how, kernel_us):
    # (it charged host_sync_ns as it was called, then again after a wait: a kernel 20 ns
    # longer than that cost the host 10 us more, 20010 ns instead of 10000)
    clock = dev._backend.now_ns
    g = None
    if how == "graph":
        stream.begin_capture()
        art.launch(art.kernels.noop, stream=stream, cost=kernel_us * 1e-6)
        g = stream.end_capture()
    stream.synchronize()
    if g is not None:
        g.launch(stream)
    else:
        art.launch(art.kernels.noop, stream=stream, cost=kernel_us * 1e-6)
    ev = stream.record() if how == "event" else None
    t1 = clock()
    ends = t1 - (P.host_record_ns if ev is not None else 0) + P.dispatch_ns + round(kernel_us * 1000)
    if how == "stream":
        stream.synchronize()
    elif how == "event":
        ev.synchronize()
    elif how == "device":
        dev.synchronize()
    else:
        g.synchronize()
    assert clock() == max(t1, ends) + P.host_sync_ns
    t2 = clock()
    stream.synchronize()  # (nothing left: the return path alone)
    assert clock() - t2 == P.host_sync_ns


@each_build_once
def test_copies_sharing_the_host_link_move_no_faster_than_it_and_keep_their_latency():
    # (the latency was paced as bytes: two copies sharing the link ended 2 us early, as if the
    # link had moved more than its bandwidth)
    r = _run_sim(textwrap.dedent("""
        import json, ascentrt as art
        dev = art.set_device(0)
        n = 50_000_000
        s1, s2 = dev.create_stream(), dev.create_stream()
        hosts, devs = [art.malloc_host(n) for _ in range(2)], [art.malloc(n) for _ in range(2)]
        with art.profile() as prof:
            art.memcpy_async(devs[0], hosts[0], stream=s1)
            art.memcpy_async(devs[1], hosts[1], stream=s2)
            dev.synchronize()
        print(json.dumps([[t.start_ns, t.end_ns] for t in prof.snapshot().tasks if t.kind == "copy"]))
    """), env_extra={"ASCENTRT_SIM_VARY": '{"copy_engines_h2d": 2}', "ASCENTRT_LEAK_CHECK": "off"})
    assert r.returncode == 0, r.stderr
    (a_start, a_end), (b_start, b_end) = sorted(json.loads(r.stdout.splitlines()[-1]))
    assert b_start > a_start and b_start < a_end  # they overlap on their two engines
    link = 2 * 50_000_000 / P.host_link_bandwidth * 1e9  # the link busy from the first start on
    assert abs(max(a_end, b_end) - (a_start + link + P.host_link_latency_ns)) <= 2


@sim_only
def test_a_pageable_copy_is_staged_and_synchronous(stream):
    n = 4 << 20
    dev_buf = art.malloc(n)
    src = np.full(n, 3, np.uint8)
    with art.profile() as prof:
        t0 = stream.device._backend.now_ns()
        art.memcpy_async(dev_buf, src, stream=stream)  # returns once the copy is done
        t1 = stream.device._backend.now_ns()
    (copy,) = _tasks(prof, "copy")
    assert abs(copy.duration_ns - (P.host_link_latency_ns + n / P.pageable_bandwidth * 1e9)) <= 2
    assert t1 >= t0 + copy.duration_ns  # the host waited for it
    assert (dev_buf.numpy() == 3).all()
    dev_buf.free()


@sim_only
def test_a_three_stage_pipeline_takes_sum_plus_k_minus_one_times_the_slowest(dev):
    # Three streams, one engine class each (H2D copy, compute, D2H copy); stage times a, b, c.
    k = 6
    n = 4 << 20
    a = P.dispatch_ns + P.host_link_latency_ns + n / P.host_link_bandwidth * 1e9
    b = 300_000.0  # the kernel's declared duration (ns), the slowest stage
    c = a
    streams = [dev.create_stream() for _ in range(3)]
    host_in = [art.malloc_host(n) for _ in range(k)]
    host_out = [art.malloc_host(n) for _ in range(k)]
    bufs = [art.malloc(n) for _ in range(k)]
    with art.profile() as prof:
        for i in range(k):
            s0, s1, s2 = streams
            art.memcpy_async(bufs[i], host_in[i], stream=s0)
            e0 = s0.record()
            s1.wait(e0)
            art.launch(lambda: None, stream=s1, cost=(b - P.dispatch_ns) / 1e9, name="stage")
            e1 = s1.record()
            s2.wait(e1)
            art.memcpy_async(host_out[i], bufs[i], stream=s2)
        for s in streams:
            s.synchronize()
    work = [t for t in _tasks(prof) if t.kind in ("copy", "kernel")]
    first = min(t.start_ns for t in work)
    last = max(t.end_ns for t in work)
    bound = a + b + c + (k - 1) * max(a, b, c)
    # Each hand-off through an event costs event_latency_ns: two per batch on the path.
    assert abs((last - first) - bound) <= 2 * P.event_latency_ns + 10
    for x in (*host_in, *host_out, *bufs):
        x.free()
    for s in streams:
        s.destroy()


@sim_only
def test_strict_priority_order_under_contention(dev):
    # Every kernel occupies all compute units: a high-priority stream's ready kernels go
    # first whenever the units free up, and nothing is preempted.
    low, high = dev.create_stream(priority=7), dev.create_stream(priority=0)
    gate = dev.create_notify()
    blocker = dev.create_stream()
    gate.wait_and_reset(low)
    gate_h = dev.create_notify()
    gate_h.wait_and_reset(high)
    order = []
    for i in range(3):
        art.launch(lambda i=i: order.append(f"low{i}"), stream=low, cost=1e-4)
        art.launch(lambda i=i: order.append(f"high{i}"), stream=high, cost=1e-4)
    art.launch(lambda: order.append("running"), stream=blocker, cost=1e-3)
    gate.record(dev.create_stream())   # both become ready while "running" holds the units
    gate_h.record(dev.create_stream())
    dev.synchronize()
    assert order == ["running", "high0", "high1", "high2", "low0", "low1", "low2"]
    for s in (low, high, blocker):
        s.destroy()


@sim_only
def test_block_dim_lets_kernels_of_other_streams_share_the_units(dev):
    half = P.compute_units // 2
    s1, s2 = dev.create_stream(), dev.create_stream()
    with art.profile() as prof:
        art.launch(lambda: None, stream=s1, cost=1e-3, block_dim=half, name="k1")
        art.launch(lambda: None, stream=s2, cost=1e-3, block_dim=half, name="k2")
        dev.synchronize()
    k1, k2 = sorted(_tasks(prof, "kernel"), key=lambda t: t.name)
    assert k2.start_ns < k1.end_ns  # overlapped: each took half the units
    with art.profile() as prof:
        art.launch(lambda: None, stream=s1, cost=1e-3, name="w1")
        art.launch(lambda: None, stream=s2, cost=1e-3, name="w2")
        dev.synchronize()
    w1, w2 = sorted(_tasks(prof, "kernel"), key=lambda t: t.name)
    assert w2.start_ns >= w1.end_ns  # all units each (the default): one after the other
    s1.destroy(), s2.destroy()


@sim_only
def test_a_full_submission_queue_makes_the_host_wait(stream):
    depth = P.queue_depth
    backend = stream.device._backend
    t0 = backend.now_ns()
    for _ in range(depth):  # 10 ms kernels: none ends while the host fills the queue
        art.launch(lambda: None, stream=stream, cost=10e-3)
    t_full = backend.now_ns()
    assert t_full - t0 == depth * P.host_launch_ns       # the host never waited so far
    assert stream.pending == depth
    art.launch(lambda: None, stream=stream, cost=10e-3)   # the SQ is full: waits for a slot
    first_end = t0 + P.host_launch_ns + P.dispatch_ns + 10e6
    # (the submit's own cost came first; the host goes on as the slot frees: no synchronize's
    # return path on top, which the wait for room once charged)
    assert backend.now_ns() == first_end
    assert stream.pending == depth
    stream.synchronize()


@sim_only
@pytest.mark.parametrize("timed, seconds", [("host", 10), ("host", 1836), ("device", 1836)])
def test_a_virtual_timeout_takes_little_wall_time(dev, timed, seconds):
    # (a long one too: each 0.25 s stall-check slice once waited 5 ms of real time, so 1836 s
    # took 37 s)
    a = dev.create_stream()
    n = dev.create_notify()
    t0 = time.perf_counter()
    v0 = dev._backend.now_ns()
    try:
        if timed == "device":  # the wait's own timeout fails its task
            n.wait_and_reset(a, timeout=seconds)
            with pytest.raises(art.AscentError):
                a.synchronize()
        else:  # the host's synchronize times out
            n.wait_and_reset(a)
            with pytest.raises(art.AscentTimeoutError):
                a.synchronize(timeout=seconds)
        took = time.perf_counter() - t0
        assert dev._backend.now_ns() - v0 >= seconds * 1e9
        # (0.3-0.4 s alone, the deadlock check's real-time grace; over 1 s beside a loaded
        # suite: 3 s still tells it from the 37 s of a slice per stall check)
        assert took < 3.0
    finally:  # (a stream left waiting would hold up every later test of the session)
        n.record(dev.create_stream())
        a.synchronize()
        a.destroy()


@sim_only
@pytest.mark.parametrize("inside", ["synchronize", "event synchronize"])
def test_a_host_function_that_waited_does_not_hold_later_timeouts_to_real_time(dev, inside):
    # A host function's thread that waited once was counted as a host thread that may act, for
    # the rest of the process: every later stuck wait then passed in real time (10 s of timeout,
    # 10 s of wall time). Host functions are counted while they run, not after.
    other = dev.create_stream()
    a = dev.create_stream()
    ev = art.Event()
    art.launch(lambda: None, stream=other, cost=0.001)  # (so that the function must wait)
    ev.record(other)

    def waits():
        (other.synchronize if inside == "synchronize" else ev.synchronize)(timeout=5)

    art.launch_host_func(waits, stream=a)
    a.synchronize(timeout=10)
    n = dev.create_notify()
    n.wait_and_reset(a)
    t0 = time.perf_counter()
    try:
        with pytest.raises(art.AscentTimeoutError):
            a.synchronize(timeout=10)
        assert time.perf_counter() - t0 < 5.0  # (it took 10 s: the timeout in real time)
    finally:
        n.record(other)
        a.synchronize()
        a.destroy()
        other.destroy()


@sim_only
def test_elapsed_time_is_virtual_milliseconds(stream):
    e1, e2 = art.Event(timing=True), art.Event(timing=True)
    e1.record(stream)
    art.launch(lambda: None, stream=stream, cost=0.25)
    e2.record(stream)
    e2.synchronize()
    ms = art.elapsed_time(e1, e2)
    expect = (P.host_launch_ns + P.dispatch_ns + 0.25e9) / 1e6
    assert abs(ms - expect) < 1e-5


@sim_only
def test_results_are_computed_for_real(stream):
    x = art.malloc(4096)
    y = art.malloc(4096)
    art.launch("fill", x.view(np.float32), 2.0, stream=stream)
    art.launch("scale", y.view(np.float32), x.view(np.float32), 3.0, stream=stream)
    out = np.empty(1024, np.float32)
    art.memcpy_async(out, y, stream=stream)
    assert (out == 6.0).all()
    x.free(), y.free()


@sim_only
def test_kernels_without_a_cost_get_the_default_and_are_listed(stream):
    backend = stream.device._backend
    before = backend.uncosted.get("mystery", 0)
    with art.profile() as prof:
        art.launch(lambda: None, stream=stream, name="mystery")
        stream.synchronize()
    (k,) = _tasks(prof, "kernel")
    assert k.duration_ns == P.default_kernel_ns  # (its dispatch shows as time queued)
    assert backend.uncosted["mystery"] == before + 1


@sim_only
def test_the_device_reports_the_sim_backend_and_its_preset(dev):
    assert dev.properties.backend == "sim"
    assert dev.properties.preset == "ascend910b"
    assert dev.properties.compute_units == P.compute_units
    assert dev.properties.total_memory == P.memory_bytes


# ---- bad input (every session) ----------------------------------------------------------------

def test_bad_costs_and_block_dims_are_refused(stream):
    for bad in (-1.0, float("nan"), float("inf"), "fast", {"flops": -5}, {"speed": 1}):
        with pytest.raises(art.InvalidArgumentError, match="cost"):
            art.launch(lambda: None, stream=stream, cost=bad)
    for bad in (0, 65536, 2.5, "4", True):
        with pytest.raises(art.InvalidArgumentError, match="block_dim") as err:
            art.launch(lambda: None, stream=stream, block_dim=bad)
        assert err.value.code == art.ErrorCode.INVALID_PARAM
    assert stream._submitted == 0  # nothing was queued
    stream.synchronize()


def _write_preset(tmp_path, **changes):
    text = open(os.path.join(os.path.dirname(presets.__file__), "ascend910b.toml")).read()
    lines = []
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if key in changes:
            if changes[key] is None:
                continue
            line = f"{key} = {{ value = {changes[key]}, kind = \"estimated\", source = \"test\" }}"
        lines.append(line)
    for key, value in changes.items():  # fields the shipped file leaves out (their defaults)
        if value is not None and not any(l.split("=", 1)[0].strip() == key for l in lines):
            lines.append(f"{key} = {{ value = {value}, kind = \"estimated\", source = \"test\" }}")
    path = tmp_path / "mine.toml"
    path.write_text("\n".join(lines))
    return str(path)


def test_presets_ship_with_a_source_for_every_number():
    assert {"ascend910b", "ascend310p", "h200"} <= set(presets.names())
    for name in presets.names():
        p = presets.load(name)
        assert set(p.values) == set(presets.FIELDS)
        for field, (kind, source) in p.sources.items():
            assert kind in presets.KINDS_OF_SOURCE and source
    assert presets.load("ascend910b").compute_units == 24
    assert presets.load("ascend310p").max_streams == 1024


def test_each_preset_s_compute_rate_is_the_one_its_source_derives():
    # (910B's 14.7e12 against 16x16x16 MACs x 2 x 1.8 GHz = 14.7456e12, 310P's 8.7e12 against
    # 8.68352e12, H200's 7.49e12 against 989 / 132 TFLOPS)
    import re
    for name in ("ascend910b", "ascend310p", "h200"):
        p = presets.load(name)
        source = p.sources["compute_flops_per_unit"][1]
        macs = re.search(r"(\d+)x(\d+)x(\d+) cube MACs x 2 x ([\d.]+) GHz", source)
        if macs:
            a, b, c, ghz = macs.groups()
            derived = int(a) * int(b) * int(c) * 2 * float(ghz) * 1e9
        else:
            tflops, units = re.search(r"([\d.]+) TFLOPS .*/ (\d+) SMs", source).groups()
            derived = float(tflops) * 1e12 / int(units)
        assert abs(p.compute_flops_per_unit - derived) <= 1e-4 * derived, (name, source)


def test_a_file_named_as_a_preset_in_the_working_folder_does_not_shadow_it(tmp_path, monkeypatch):
    # (a folder called h200 here made ASCENTRT_SIM_PRESET=h200 "not a regular file")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h200").mkdir()
    (tmp_path / "ascend310p").write_text("not toml [")
    assert presets.load("h200").name == "h200"
    assert presets.load("ascend310p").max_streams == 1024
    with pytest.raises(presets.PresetError, match="not a regular file"):
        presets.load("./h200")  # (a path says so)


@pytest.mark.parametrize("name", ["ascend910b", "ascend310p", "h200"])
def test_a_shipped_preset_says_what_one_compute_unit_draws_from_memory(name):
    # (ascend310p and h200 left it out: a kernel on one of h200's 132 SMs drew all 4.8 TB/s,
    # though the 310P's own CANN ini gives 17 B per cycle per core)
    p = presets.load(name)
    kind, source = p.sources["memory_bandwidth_per_unit"]
    assert kind != "default" and source
    assert 0 < p.memory_bandwidth_per_unit < p.memory_bandwidth


def test_the_readme_names_every_preset_field_that_may_be_left_out():
    # (memory_bandwidth_per_unit had a default but the README's list did not name it, and
    # said a missing field is an error)
    readme = open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()
    start = readme.index("a missing, negative or non-numeric field")
    listed = readme[start:readme.index("`info --preset` shows them", start)]
    assert [f for f in presets.DEFAULTS if f"`{f}`" not in listed] == []


@pytest.mark.parametrize("change, words", [
    ({"compute_units": None}, "'compute_units' is missing"),
    ({"memory_bandwidth": -1}, "'memory_bandwidth' must be at least"),
    ({"dispatch_ns": '"fast"'}, "'dispatch_ns' must be a number"),
    ({"compute_units": 2.5}, "whole number"),
    # (beyond these bounds a modelled time overflowed: a raw OverflowError, a copy that failed)
    ({"host_launch_ns": 1e308}, "'host_launch_ns' must be at most"),
    ({"copy_engine_bandwidth": 1e-300}, "'copy_engine_bandwidth' must be at least 1000 (or 0)"),
    ({"compute_flops_per_unit": 1e30}, "'compute_flops_per_unit' must be at most"),
])
def test_a_bad_preset_file_names_the_field_and_the_file(tmp_path, change, words):
    path = _write_preset(tmp_path, **change)
    with pytest.raises(PresetError) as err:
        presets.load(path)
    assert words in str(err.value) and path in str(err.value)


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe garbage", "not UTF-8 text"),
    ("name = 5", "name must be a string"),  # (a device is named after its preset)
    (b"x" * ((1 << 20) + 1), "KiB, no preset"),
])
def test_a_preset_file_that_is_no_text_preset_is_refused(tmp_path, content, words):
    path = tmp_path / "odd.toml"
    if isinstance(content, str):  # a whole preset, with this line for its name
        whole = open(_write_preset(tmp_path)).read().splitlines()
        content = "\n".join(content if line.startswith("name =") else line for line in whole).encode()
    path.write_bytes(content)
    with pytest.raises(PresetError, match=words):
        presets.load(str(path))


@pytest.mark.parametrize("path", ["/dev/zero", "folder"])
def test_a_preset_path_that_is_no_regular_file_is_refused_at_once(tmp_path, path):
    # (/dev/zero was read without end, a FIFO blocked for ever)
    if path == "folder":
        path = str(tmp_path)
    with pytest.raises(PresetError, match="not a regular file"):
        presets.load(path)


def test_a_variant_nested_deeper_than_python_goes_is_refused():
    with pytest.raises(PresetError, match="is not JSON"):
        presets.variant_doc("[" * 100000)


def test_an_unknown_preset_name_lists_the_known_ones():
    with pytest.raises(PresetError, match="ascend910b"):
        presets.load("ascend999")


def test_an_unknown_preset_name_says_calibrated_is_known_once_calibrate_wrote_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENTRT_CACHE_DIR", str(tmp_path))  # (no calibrated preset there)
    with pytest.raises(PresetError, match="calibrated once `ascentrt calibrate` has written it"):
        presets.load("ascend999")


def test_a_varied_field_is_checked_like_a_file_field():
    p = presets.load("h200")
    assert p.varied({"copy_engines_h2d": 2}).copy_engines_h2d == 2
    with pytest.raises(PresetError, match="unknown preset field 'warp_speed'"):
        p.varied({"warp_speed": 9})
    with pytest.raises(PresetError, match="at least"):
        p.varied({"copy_engines_h2d": 0})


# ---- whole programs in a fresh process (every session) ------------------------------------------

PIPELINE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import ascentrt as art
    n = 1 << 20
    streams = [art.Stream() for _ in range(3)]
    with art.profile(sys.argv[1]):
        for i in range(8):
            s = streams[i % 3]
            h = art.malloc_host(n); d = art.malloc(n)
            h.numpy()[:] = i
            art.memcpy_async(d, h, stream=s)
            art.launch("scale", d.view(np.float32), d.view(np.float32), 2.0, stream=s)
            art.memcpy_async(h, d, stream=s)
            s.synchronize()
            d.free(); h.free()
    print(art.Device(0)._backend.now_ns())
""")


def _run_sim(code, *args, env_extra=None):
    env = dict(os.environ, ASCENTRT_BACKEND="sim", **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=120)


@each_build_once
def test_the_same_program_gives_the_same_trace_on_every_run(tmp_path):
    outs = []
    for i in range(2):
        r = _run_sim(PIPELINE, str(tmp_path / f"p{i}"))
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1]
    a = json.loads((tmp_path / "p0" / "trace.json").read_text())
    b = json.loads((tmp_path / "p1" / "trace.json").read_text())
    strip = lambda t: [{k: v for k, v in e.items() if k not in ("pid",)} for e in t["traceEvents"]]
    assert strip(a) == strip(b)


@each_build_once
def test_an_unknown_preset_in_the_settings_is_one_clear_error():
    r = _run_sim("import ascentrt as art\ntry:\n    art.Device(0)\nexcept art.InvalidArgumentError as e:"
                 "\n    print('ERR', e)", env_extra={"ASCENTRT_SIM_PRESET": "nope"})
    assert r.returncode == 0 and "ERR" in r.stdout and "ASCENTRT_SIM_PRESET" in r.stdout


@pytest.mark.cpu_only
def test_executor_settings_a_sim_device_ignores_are_named_in_one_warning():
    code = ("import warnings\nwarnings.simplefilter('always')\nimport ascentrt as art\n"
            "print(art.Device(0).properties.compute_units, art.Device(1).properties.copy_engines)")
    r = _run_sim(code, env_extra={"ASCENTRT_COMPUTE_UNITS": "3", "ASCENTRT_COPY_ENGINES": "5",
                                  "ASCENTRT_DEVICES": "2"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["24", "3"]  # the preset's (ascend910b: 24 cores, 3 copy engines)
    assert r.stderr.count("ignored on sim") == 1
    assert "ASCENTRT_COMPUTE_UNITS, ASCENTRT_COPY_ENGINES ignored on sim" in r.stderr


@pytest.mark.cpu_only
def test_device_memory_on_sim_is_honoured_without_a_warning():
    r = _run_sim("import ascentrt as art\nprint(art.Device(0).properties.total_memory)",
                 env_extra={"ASCENTRT_DEVICE_MEMORY": "1G"})
    assert r.returncode == 0 and r.stdout.split() == [str(1 << 30)] and "ignored" not in r.stderr


# ---- ascentrt whatif ------------------------------------------------------------------------------

def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ascentrt", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


@cli_once
def test_whatif_runs_each_variant_and_writes_a_table_csv_and_plot(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import numpy as np
        import ascentrt as art
        from ascentrt import sim
        k = int(sim.variant().get("batches", 2))
        s = art.Stream()
        h = art.malloc_host(1 << 20); d = art.malloc(1 << 20)
        for _ in range(k):
            art.memcpy_async(d, h, stream=s)
        s.synchronize()
    """))
    out = tmp_path / "wi"
    r = _cli("whatif", "--vary", "host_link_bandwidth=10e9,40e9", "--vary", "program.batches=2,4",
             "-o", str(out), "--", "python", str(prog))
    assert r.returncode == 0, r.stderr
    rows = list(__import__("csv").DictReader((out / "whatif.csv").open()))
    assert len(rows) == 4
    ms = {(float(x["host_link_bandwidth"]), int(x["program.batches"])): float(x["virtual_ms"])
          for x in rows}
    assert ms[(10e9, 4)] > ms[(40e9, 4)] and ms[(10e9, 4)] > ms[(10e9, 2)]
    assert "<svg" in (out / "whatif.html").read_text()
    assert "critical path" in r.stdout and "copy" in r.stdout


@cli_once
def test_whatif_names_what_a_failed_variant_died_of_and_a_knob_no_run_read(tmp_path):
    # (a failed row showed the LeakWarning printed at exit, 200 characters wide, and a
    # misspelt program knob gave identical rows with no word)
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import ascentrt as art
        from ascentrt import sim
        k = int(sim.variant().get("streams", 1))
        kept = art.malloc(1 << 20)   # (never freed: a LeakWarning at exit, after the error)
        if art.Device(0).properties.compute_units == 1:
            raise RuntimeError("one unit is not enough")
    """))
    out = tmp_path / "wi"
    r = _cli("whatif", "--vary", "compute_units=1,2", "--vary", "program.stream=1,3",
             "-o", str(out), "--", "python", str(prog))
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines[:5]) < 120  # (the table stays a table)
    assert any("failed: RuntimeError: one unit is not enough" in line for line in lines)
    assert any("no run read program.stream" in line for line in lines)
    rows = list(__import__("csv").DictReader((out / "whatif.csv").open()))
    assert [x["error"] for x in rows if x["compute_units"] == "1"] == \
        ["RuntimeError: one unit is not enough"] * 2


@cli_once
def test_the_documented_spelling_reads_a_knob_and_runs_that_all_failed_name_no_typo(tmp_path):
    # (art.sim was not there after `import ascentrt` as the README spells it: every variant
    # failed with AttributeError, and whatif then said the knob looked misspelt)
    prog = tmp_path / "prog.py"
    prog.write_text("import sys, ascentrt as art\nprint(art.sim.variant().get('streams', 1))\n"
                    "sys.exit(int(art.sim.variant().get('fail', 0)))\n")
    r = _cli("whatif", "--vary", "program.streams=1,2", "-o", str(tmp_path / "ok"), "--", "python", str(prog))
    assert r.returncode == 0 and "no run read" not in r.stdout, r.stdout + r.stderr
    r = _cli("whatif", "--vary", "program.fail=3", "--vary", "program.typo=1,2", "-o", str(tmp_path / "bad"),
             "--", "python", str(prog))
    assert r.returncode == 1 and "no run read" not in r.stdout, r.stdout


@cli_once
@pytest.mark.parametrize("args, words", [
    (["--vary", "warp_speed=1,2"], "unknown field 'warp_speed'"),
    (["--vary", "copy_engines_h2d=0"], "must be at least 1"),
    (["--vary", "dispatch_ns=fast"], "must be a number"),
    (["--preset", "nope", "--vary", "dispatch_ns=1"], "unknown simulator preset 'nope'"),
    (["--vary", "dispatch_ns"], "expected name=v1,v2"),
    (["--vary", "program.x=1", "--vary", "program.x=2"], "program.x is varied twice"),
    (["--vary", "dispatch_ns=1" + "0" * 400], "must be a finite number"),
    # (a knob without a name, an empty value dropped, a variant run twice: all once went on)
    (["--vary", "program.=1"], "a program knob needs a name"),
    (["--vary", "program.=1,2", "--vary", "compute_units=1"], "a program knob needs a name"),
    (["--vary", "compute_units=1,,2"], "an empty value"),
    (["--vary", "compute_units=1,2,"], "an empty value"),
    (["--vary", "compute_units=1,1"], "the value 1 is given twice"),
    (["--vary", "memory_bandwidth=1e12,1000000000000"], "the value 1000000000000 is given twice"),
    (["--vary", "program.x=a,b,a"], "the value a is given twice"),
])
def test_whatif_bad_input_is_one_line_naming_the_field(args, words, tmp_path):
    r = _cli("whatif", *args, "--", "python", "-c", "pass", cwd=tmp_path)
    assert r.returncode == 1
    assert words in r.stderr and "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # refused before anything ran or was written


@cli_once
def test_info_prints_a_preset_with_its_sources():
    r = _cli("info", "--preset", "ascend310p")
    assert r.returncode == 0
    assert "compute_units" in r.stdout and "documented" in r.stdout and "estimated" in r.stdout
    bad = _cli("info", "--preset", "./missing.toml")
    assert bad.returncode == 1 and "cannot be read" in bad.stderr


# ---- found in review: time that real host work takes, and costs that must not be dropped ------

@sim_only
def test_a_long_task_simulates_in_little_wall_time(stream):
    # A synchronize checks for stalls every 0.25 virtual s; each check once waited 5 ms of
    # real time for other threads: a 1000 s task took 20 s to simulate.
    import time as _time
    t0 = _time.monotonic()
    start = art.Device(0).now_ns()
    art.launch(art.kernels.noop, stream=stream, cost=1000.0)
    stream.synchronize()
    assert art.Device(0).now_ns() - start >= 1000 * 10**9
    assert _time.monotonic() - t0 < 2.0


@sim_only
def test_a_timeout_does_not_expire_while_a_host_function_still_runs(stream):
    import time as _time
    art.launch_host_func(lambda: _time.sleep(0.7), stream=stream)  # longer than the patience
    stream.synchronize(timeout=5)  # 5 s: far more than the 0.7 s the host function takes


@sim_only
def test_a_timeout_does_not_expire_while_another_thread_is_about_to_record(dev):
    import threading
    import time as _time
    s, s2 = dev.create_stream(), dev.create_stream()
    n = dev.create_notify()

    def producer():
        _time.sleep(0.2)  # real host work before it signals
        n.record(s2)

    th = threading.Thread(target=producer)
    th.start()
    n.wait_and_reset(s)
    s.synchronize(timeout=5)
    th.join()
    s.destroy(), s2.destroy()


@sim_only
def test_block_dim_alone_keeps_a_built_in_kernels_cost(stream):
    x = art.malloc(1 << 20)
    with art.profile() as prof:
        art.launch("scale", x.view(np.float32), x.view(np.float32), 2.0, stream=stream, name="a")
        art.launch("scale", x.view(np.float32), x.view(np.float32), 2.0, stream=stream, name="b",
                   block_dim=4)
        stream.synchronize()
    a, b = sorted(_tasks(prof, "kernel"), key=lambda t: t.name)
    assert P.default_kernel_ns != a.duration_ns < b.duration_ns  # memory-bound: 4 cores draw less
    assert "b" not in stream.device._backend.uncosted
    x.free()


@sim_only
def test_a_host_function_that_copies_keeps_its_own_cost(stream):
    buf = art.malloc(1 << 20)
    with art.profile() as prof:
        art.launch_host_func(lambda: None, stream=stream)
        art.launch_host_func(lambda: art.memset(buf, 0), stream=stream)
        stream.synchronize()
    empty, copying = _tasks(prof, "host_func")
    assert copying.duration_ns > empty.duration_ns >= P.host_func_ns
    buf.free()


@pytest.mark.long
@cli_once
def test_calibrate_writes_a_preset_the_simulator_loads(tmp_path):
    out = tmp_path / "cal.toml"
    r = _cli("calibrate", "-o", str(out))
    assert r.returncode == 0, r.stderr
    p = presets.load(str(out))
    assert p.name == "calibrated" and p.host_link_bandwidth > 1e8 and p.host_launch_ns > 0
    assert all(kind in ("measured", "documented") for kind, _ in p.sources.values())
    env = {"ASCENTRT_CACHE_DIR": str(tmp_path / "none")}
    r = subprocess.run([sys.executable, "-c", "from ascentrt.backends import presets\n"
                        "presets.load('calibrated')"], capture_output=True, text=True,
                       env=dict(os.environ, **env))
    assert "run `ascentrt calibrate` first" in r.stderr


@sim_only
def test_a_replayed_graph_takes_the_time_of_its_nodes(stream):
    stream.begin_capture()
    for i in range(3):
        art.launch(lambda: None, stream=stream, cost=1e-3, name=f"node{i}")
    graph = stream.end_capture()
    with art.profile() as prof:
        graph.launch(stream)
        stream.synchronize()
    nodes = sorted((t for t in _tasks(prof, "kernel") if t.name.startswith("node")),
                   key=lambda t: t.start_ns)
    # (each node's time is its work, each dispatched as an eager task is: its dispatch shows
    # as time queued, between the node before and it; the segment adds nothing after them)
    assert [t.duration_ns for t in nodes] == [1_000_000] * 3
    assert nodes[1].start_ns == nodes[0].end_ns + P.dispatch_ns
    assert nodes[2].start_ns == nodes[1].end_ns + P.dispatch_ns
    segment = next(t for t in prof.profile.tasks if t.kind == "graph")
    assert segment.end_ns == nodes[2].end_ns
    assert nodes[0].start_ns == segment.start_ns + P.dispatch_ns
    graph.destroy()


LIMITS = textwrap.dedent("""
    import ascentrt as art
    dev = art.Device(0)
    streams = [dev.create_stream() for _ in range(3)]
    try:
        dev.create_stream()
    except art.StreamStateError as e:
        print("streams", int(e.code), len([s for s in dev.streams()]))
    streams[0].destroy()
    dev.create_stream()                       # a slot came free
    events = [dev.create_event() for _ in range(2)]
    try:
        dev.create_event()
    except art.StreamStateError as e:
        print("events", int(e.code))
    events[0].destroy()
    dev.create_event()
    print("ok")
""")


@each_build_once
def test_stream_and_event_caps_of_the_model_are_refused_with_codes():
    r = _run_sim(LIMITS, env_extra={"ASCENTRT_SIM_VARY": '{"max_streams": 3, "max_events": 2}'})
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split("\n")
    assert lines[0].split()[:2] == ["streams", "207008"]
    assert lines[1] == "events 207007" and lines[2] == "ok"


@each_build_once
def test_the_default_stream_counts_against_the_models_stream_cap_as_cann_counts_it():
    # (CANN's aclrtCreateStream: the cap includes the default stream; one more was allowed)
    r = _run_sim(textwrap.dedent("""
        import ascentrt as art
        import ascentrt.acl as acl
        dev = art.set_device(0)
        acl.init(); acl.rt.set_device(0)
        print(acl.rt.get_stream_available_num()[0])  # (set_device made the default stream)
        art.launch(art.kernels.noop); dev.synchronize()     # the default stream, used
        print(acl.rt.get_stream_available_num()[0])
        made = []
        try:
            while True:
                made.append(dev.create_stream())
        except art.StreamStateError as e:
            print(len(made), int(e.code))
    """), env_extra={"ASCENTRT_SIM_VARY": '{"max_streams": 4}'})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3", "3", "3", "207008"]


@each_build_once
def test_the_runtimes_own_events_do_not_count_against_the_models_event_cap():
    # (a pageable memcpy_async, a TaskGraph's run and its capture recorded events of the
    # program's quota: a program holding all its events had its copy refused with 207007)
    r = _run_sim(textwrap.dedent("""
        import numpy as np, ascentrt as art
        dev = art.Device(0)
        s = dev.create_stream()
        held = [dev.create_event() for _ in range(2)]
        b = art.malloc(64)
        art.memcpy_async(b, np.arange(64, dtype=np.uint8), stream=s)
        g = art.TaskGraph(dev)
        x, y = art.malloc(64), art.malloc(64)
        g.add_memset(x, 1, 64)
        g.add_memset(y, 2, 64)
        from ascentrt.kernels import add
        g.add_kernel(add, b.view(np.uint8), x.view(np.uint8), y.view(np.uint8), reads=[x, y],
                     writes=[b])  # (joins the two streams the memsets go to: a recorded event)
        g.schedule(num_streams=2).run()
        g.schedule(num_streams=2).capture(s).launch(s)
        s.synchronize()
        out = np.zeros(64, np.uint8)
        art.memcpy(out, b)
        print(int(out.sum()))
    """), env_extra={"ASCENTRT_SIM_VARY": '{"max_events": 2}'})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["192"]


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
@pytest.mark.serial  # (the real pace of its threads against virtual time: alone, after the rest)
def test_a_blocking_callbacks_runtime_calls_act_in_its_host_tasks_time():
    # (a report thread's calls inside a blocking callback waited for the host task holding
    # the stream, which waited for the callback: 0.5 s of real time per callback, then virtual
    # time went on without them, with the notice that the host had left the device alone)
    code = textwrap.dedent("""
        import threading, time, numpy as np, ascentrt as art
        from ascentrt import callback
        dev = art.set_device(0)
        s = dev.create_stream()
        stop = threading.Event()
        def loop():
            while not stop.is_set():
                try:
                    callback.process_reports(0.2)
                except art.AscentError:
                    pass
        t = threading.Thread(target=loop); t.start()
        callback.subscribe(t.ident, s)
        src = np.ones(16 << 20, np.uint8)          # pageable: a synchronous copy takes time
        bufs = [art.malloc(16 << 20) for _ in range(5)]
        seen = []
        def cb(i):
            art.memcpy(bufs[i], src)
            seen.append(dev.now_ns())
            bufs[i].free()
        w0, t0 = time.monotonic(), dev.now_ns()
        for i in range(5):
            art.launch(art.kernels.noop, stream=s, cost=1e-4)
            callback.launch_callback(cb, i, s)
        s.synchronize()
        print(time.monotonic() - w0, dev.now_ns() - t0, *[x - t0 for x in seen])
        callback.unsubscribe(t.ident, s); stop.set(); t.join()
    """)
    runs = [_run_sim(code) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0 and "moved on without it" not in r.stderr, r.stderr
        assert float(r.stdout.split()[0]) < 1.5  # (5 x 0.5 s of waiting before)
    first, second = (r.stdout.split()[1:] for r in runs)
    assert first == second  # the same virtual times
    ends = [int(x) for x in first[1:]]
    copy_ns = ends[1] - ends[0]  # each callback's copy is in its host task's time
    assert copy_ns > 1_000_000 and int(first[0]) >= 5 * copy_ns


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
@pytest.mark.serial  # (the real pace of its threads against virtual time: alone, after the rest)
def test_a_thread_that_never_uses_the_runtime_does_not_hold_virtual_time_to_the_real_pace():
    # (any live non-daemon thread, a timer or an idle pool worker, made time pass at the real
    # world's pace: a 10 s kernel took 8 s of wall time, a collective's timeout 30 minutes)
    r = _run_sim(textwrap.dedent("""
        import os, threading, time, ascentrt as art
        threading.Timer(60, lambda: None).start()          # never touches ascentrt
        dev = art.set_device(0); s = dev.create_stream()
        art.launch(art.kernels.noop, stream=s, cost=10.0)
        t0, v0 = time.monotonic(), dev.now_ns()
        s.synchronize()
        print((dev.now_ns() - v0) / 1e9, time.monotonic() - t0)
        os._exit(0)
    """))
    assert r.returncode == 0, r.stderr
    virtual, wall = r.stdout.split()
    # (work runs: time moves on by itself; a stuck wait would let the timer act for 2 s)
    assert float(virtual) >= 10 and float(wall) < 1


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
@pytest.mark.serial  # (the real pace of its threads against virtual time: alone, after the rest)
def test_a_thread_that_starts_using_the_runtime_late_still_releases_a_wait():
    # (what the real pace was for: a thread about to record what the host waits for)
    r = _run_sim(textwrap.dedent("""
        import threading, time, ascentrt as art
        dev = art.set_device(0); s, t = dev.create_stream(), dev.create_stream()
        n = art.Notify(); s.wait_notify(n)
        def late():
            time.sleep(0.05)
            n.record(t)
        threading.Thread(target=late).start()
        s.synchronize(timeout=1)
        print("released")
    """))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["released"]


@each_build_once
def test_a_malformed_variant_is_one_clear_error():
    r = _run_sim("import ascentrt as art\ntry:\n    art.Device(0)\nexcept art.InvalidArgumentError as e:"
                 "\n    print('ERR', int(e.code), e)", env_extra={"ASCENTRT_SIM_VARY": "{not json"})
    assert r.returncode == 0 and "ERR 100000" in r.stdout and "not JSON" in r.stdout


@each_build_once
def test_a_device_with_a_hundred_million_units_starts_as_fast_as_a_small_one():
    # (the engine once made one executor queue per unit: 1e8 of them took minutes to start)
    code = ("import time, ascentrt as art\nt = time.perf_counter()\ns = art.Stream()\n"
            "for _ in range(100):\n    art.launch(art.kernels.noop, stream=s)\ns.synchronize()\n"
            "print(art.Device(0).properties.compute_units, time.perf_counter() - t)")
    r = _run_sim(code, env_extra={"ASCENTRT_SIM_VARY": '{"compute_units": 100000000, '
                                                        '"copy_engines_h2d": 100000000}'})
    assert r.returncode == 0, r.stderr
    units, wall = r.stdout.split()
    assert units == "100000000" and float(wall) < 5


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "5", "null"])
def test_variant_refuses_a_malformed_variant_as_device_creation_does(text, monkeypatch):
    import ascentrt.sim
    monkeypatch.setenv("ASCENTRT_SIM_VARY", text)
    with pytest.raises(art.InvalidArgumentError) as err:
        ascentrt.sim.variant()
    assert err.value.code == art.ErrorCode.INVALID_PARAM and "ASCENTRT_SIM_VARY" in str(err.value)


# ---- sharing: memory bandwidth, and the processors of a cpu-backend model ----------------------

@sim_only
def test_a_d2d_copy_and_a_memory_bound_kernel_share_the_memory_bandwidth(dev):
    # Each needs all of the memory bandwidth at its full rate (the kernel on every core draws
    # all of it): while both run, their rates rise alike until the memory is full.
    n = 64 << 20
    a, b = art.malloc(n), art.malloc(n)
    s1, s2 = dev.create_stream(), dev.create_stream()
    units = P.compute_units
    work = 2 * n / P.memory_bandwidth * 1e9  # the copy reads and writes n bytes, at full rate
    kernel_work = 2 * n / P.memory_bandwidth * 1e9  # the kernel moves as many
    demand = work / kernel_work              # its share of the memory at its full rate
    with art.profile() as prof:
        art.memcpy_async(b, a, stream=s1)
        art.launch(lambda: None, stream=s2, cost={"bytes": 2 * n}, block_dim=units, name="k")
        dev.synchronize()
    (copy,), (kernel,) = _tasks(prof, "copy"), _tasks(prof, "kernel")
    alone = kernel.start_ns - copy.start_ns   # the copy ran alone this long, at its full rate
    assert 0 < alone < work / 4
    # Then both at 1 / (1 + demand) until the copy is done; the kernel finishes alone.
    assert abs(copy.duration_ns - (alone + (1 + demand) * (work - alone))) <= 3
    assert abs(kernel.duration_ns - (kernel_work + demand * (work - alone))) <= 3
    with art.profile() as prof:  # one at a time: each at its full rate
        art.memcpy_async(b, a, stream=s1)
        s1.synchronize()
    (copy,) = _tasks(prof, "copy")
    assert abs(copy.duration_ns - work) <= 2
    s1.destroy(), s2.destroy(), a.free(), b.free()


@sim_only
def test_a_kernel_runs_its_blocks_in_waves_and_few_cores_draw_less_memory(stream):
    # (a block_dim over the compute units was refused, though CANN runs up to 65535 blocks
    # in waves; and one core drew the whole memory bandwidth)
    units, flops = P.compute_units, P.compute_flops_per_unit
    with art.profile() as prof:
        for blocks in (units, units + 1, 2 * units):
            art.launch(lambda: None, stream=stream, cost={"flops": flops * 1e-3 * blocks},
                       block_dim=blocks, name=f"f{blocks}")  # 1 ms of one core per block
        for blocks in (1, units):
            art.launch(lambda: None, stream=stream, cost={"bytes": 1e9}, block_dim=blocks,
                       name=f"m{blocks}")
        stream.synchronize()
    took = {t.name: t.duration_ns for t in _tasks(prof, "kernel")}
    assert took[f"f{units}"] == 1_000_000                     # one wave
    assert took[f"f{units + 1}"] == took[f"f{2 * units}"] == 2_000_000  # a partial wave is whole
    assert abs(took["m1"] - 1e9 / P.memory_bandwidth_per_unit * 1e9) <= 1
    assert abs(took[f"m{units}"] - 1e9 / P.memory_bandwidth * 1e9) <= 1  # all cores: all of it


@sim_only
def test_a_memory_bound_kernels_last_partial_wave_moves_its_bytes_at_what_its_cores_draw(stream):
    # (the bytes counted over the whole kernel at the whole device's rate: the last wave's one
    # core moved its block's bytes 11x past memory_bandwidth_per_unit on ascend310p)
    units, nbytes = P.compute_units, 1e9
    with art.profile() as prof:
        art.launch(lambda: None, stream=stream, cost={"bytes": nbytes}, block_dim=units + 1,
                   name="m")
        stream.synchronize()
    (k,) = _tasks(prof, "kernel")
    first = nbytes * units / (units + 1) / P.memory_bandwidth   # every core: all of it
    last = nbytes / (units + 1) / P.memory_bandwidth_per_unit   # one core: its own draw
    assert abs(k.tail_ns - last * 1e9) <= 2 and abs(k.duration_ns - (first + last) * 1e9) <= 2
    (tail,) = [f for f in prof.diagnose() if f.kind == "tail_wave"]
    assert tail.evidence["time in last waves"] == f"{last * 1e3:.2f} ms"


def _tail_wave_and_a_small_kernel(dev, nbytes):
    """A kernel of units + 1 blocks (1 ms of one core each) on one stream, then a 1-block
    0.1 ms kernel on another: (big, small) as profiled."""
    units, flops = P.compute_units, P.compute_flops_per_unit
    a, b = dev.create_stream(), dev.create_stream()
    with art.profile() as prof:
        art.launch(lambda: None, stream=a, cost={"flops": flops * 1e-3 * (units + 1), "bytes": nbytes},
                   block_dim=units + 1, name="big")
        art.launch(lambda: None, stream=b, cost=0.1e-3, block_dim=1, name="small")
        dev.synchronize()
    a.destroy(), b.destroy()
    return sorted(_tasks(prof, "kernel"), key=lambda t: t.name)


@sim_only
@pytest.mark.parametrize("nbytes", [0, 1e6], ids=["fixed_end", "sharing_memory"])
def test_a_kernels_last_partial_wave_leaves_the_other_cores_to_other_kernels(dev, nbytes):
    # (every core was held to the end of the last wave, where one block ran: a 1-block kernel
    # of another stream waited for all of it, as CANN and CUDA, whose free cores take other
    # kernels' blocks, do not)
    big, small = _tail_wave_and_a_small_kernel(dev, nbytes)
    assert big.duration_ns == 2_000_000      # two waves of 1 ms (the last one partial)
    # taken as the last wave begins (its other cores free), then dispatched: it runs in that wave
    assert small.start_ns == big.start_ns + 1_000_000 + P.dispatch_ns
    assert small.end_ns == small.start_ns + 100_000 < big.end_ns
    # (the profile says so: the blocks it asked for, and how long its last wave held 1 core)
    assert (big.units, big.block_dim, big.tail_ns, big.tail_units) == (P.compute_units, P.compute_units + 1,
                                                                       1_000_000, 1)


@sim_only
def test_utilization_counts_only_the_cores_a_last_partial_wave_holds(stream):
    # (a kernel of units + 1 blocks counted every core busy through its last wave: 99.9% busy
    # where the cores did half the unit-time)
    units, flops = P.compute_units, P.compute_flops_per_unit
    with art.profile() as prof:
        for blocks in (units + 1, units):  # 1 ms of one core per block: 2 ms, then 1 ms
            art.launch(lambda: None, stream=stream, cost={"flops": flops * 1e-3 * blocks},
                       block_dim=blocks)
        stream.synchronize()
    snap = prof.snapshot()
    compute = snap.metrics()["executors"][f"{stream.device.id}/compute"]
    # units cores for the 1st wave, 1 for the 2nd, units for the 2nd kernel
    assert compute["busy_ns"] == (units + 1 + units) * 1_000_000
    tail = [f for f in snap.diagnose() if f.kind == "tail_wave"]
    assert len(tail) == 1 and f"{units + 1} blocks on {units} cores: 2 waves, the 2nd 1/{units} full" \
        in tail[0].title
    assert tail[0].impact_ns == 1_000_000 * (units - 1) // units  # what full waves would save


LINK = textwrap.dedent("""
    import ascentrt as art
    n = 64 << 20
    dev = art.Device(0)
    p = dev._backend.preset
    hosts = [art.malloc_host(n) for _ in range(3)]
    devs = [art.malloc(n) for _ in range(3)]
    streams = [dev.create_stream() for _ in range(3)]
    with art.profile() as prof:
        art.memcpy_async(devs[0], hosts[0], stream=streams[0])  # two H2D copies: one link
        art.memcpy_async(devs[1], hosts[1], stream=streams[1])
        art.memcpy_async(hosts[2], devs[2], stream=streams[2])  # D2H: the other direction's
        dev.synchronize()
    h2d = [t for t in prof.snapshot().tasks if t.kind == "copy"]
    link = n / p.host_link_bandwidth * 1e9
    print(*(round(t.duration_ns / link, 3) for t in h2d))
""")


def test_copies_over_one_link_share_its_bandwidth_however_many_engines_move_them():
    # (two engines moved two H2D copies at twice the link's bandwidth: 100 GB/s over a 50 GB/s
    # link; the D2H copy crosses the other direction's link and keeps its full rate)
    out = run_program(LINK, env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_PURE_PYTHON": "1",
                                 "ASCENTRT_SIM_VARY": '{"copy_engines_h2d": 2}'}, timeout=60)
    first, second, d2h = map(float, out.split())
    assert 1.99 <= first <= 2.0 and 1.99 <= second <= 2.0  # each at half the link (less its latency)
    assert 1.0 <= d2h <= 1.05                              # alone on its link: latency + bytes


SHARED = textwrap.dedent("""
    import ascentrt as art
    dev = art.Device(0)
    streams = [dev.create_stream() for _ in range(3)]
    with art.profile() as prof:
        for s in streams:
            art.launch(lambda: None, stream=s, cost=1e-3)   # no block_dim: the preset's default
        dev.synchronize()
    ks = [t for t in prof.snapshot().tasks if t.kind == "kernel"]
    print(min(t.start_ns for t in ks), max(t.start_ns for t in ks), max(t.end_ns for t in ks),
          min(t.duration_ns for t in ks), dev._backend.preset.dispatch_ns)
""")


@each_build_once
@pytest.mark.parametrize("procs", [1, 3])
def test_kernels_share_the_processors_of_a_cpu_backend_model(procs):
    # default_block_dim 1: the three kernels run at once; on 1 processor they share it (it
    # never idles: the last ends 3 ms after the first started), on 3 each has its own.
    r = _run_sim(SHARED, env_extra={"ASCENTRT_SIM_VARY":
                                    json.dumps({"shared_processors": procs, "default_block_dim": 1})})
    assert r.returncode == 0, r.stderr
    first, last, end, shortest, dispatch = (float(v) for v in r.stdout.split())
    # (a task's profiled start comes after its dispatch, shown as time queued)
    if procs == 1:
        assert abs(end - (first + 3e6)) <= 3
        assert shortest > 1e6  # each ran slower than alone
    else:
        assert abs(end - (last + 1e6)) <= 3
        assert abs(shortest - 1e6) <= 2


CROWD = textwrap.dedent("""
    import sys, ascentrt as art
    dev = art.Device(0)
    n = 16 << 20
    a, b = art.malloc(n), art.malloc(n)
    streams = [dev.create_stream() for _ in range(3)]
    with art.profile() as prof:
        if sys.argv[1] == "kernels":   # three kernels of 1 ms at once
            for s in streams:
                art.launch(lambda: None, stream=s, cost=1e-3)
        else:                          # a kernel of 1 ms beside a D2D copy (1 ms on its engine)
            art.launch(lambda: None, stream=streams[0], cost=1e-3)
            art.memcpy_async(b, a, stream=streams[1])
        dev.synchronize()
    ts = [t for t in prof.snapshot().tasks if t.kind in ("kernel", "copy")]
    print(min(t.start_ns for t in ts), max(t.start_ns for t in ts), max(t.end_ns for t in ts),
          min(t.duration_ns for t in ts), dev._backend.preset.dispatch_ns)
""")


@each_build_once
@pytest.mark.parametrize("crowded", [0, 1])
def test_more_tasks_than_processors_get_what_the_crowded_processors_deliver(crowded):
    # Two processors: three kernels at once share them (2/3 of a processor each); a preset
    # measured as losing speed when crowded (crowded_processors 1) gets only one in all.
    vary = {"shared_processors": 2, "crowded_processors": crowded, "default_block_dim": 1}
    r = _run_sim(CROWD, "kernels", env_extra={"ASCENTRT_SIM_VARY": json.dumps(vary)})
    assert r.returncode == 0, r.stderr
    first, last, end, _, dispatch = (float(v) for v in r.stdout.split())
    work = 3e6 / (crowded or 2)  # ns of all three kernels' work over the processors' rate
    assert abs(end - (first + work)) <= 2 * (last - first) + 3


@each_build_once
@pytest.mark.parametrize("procs", [0, 1])
def test_on_shared_processors_a_copy_needs_one_too(procs):
    # The copy takes 1 ms on its engine (16 MiB at copy_engine_bandwidth). On one shared
    # processor the kernel and the copy share it (it never idles: 2 ms); without sharing
    # each runs at its own rate.
    vary = {"shared_processors": procs, "default_block_dim": 1,
            "copy_engine_bandwidth": (16 << 20) / 1e-3}
    r = _run_sim(CROWD, "copy", env_extra={"ASCENTRT_SIM_VARY": json.dumps(vary)})
    assert r.returncode == 0, r.stderr
    first, last, end, shortest, dispatch = (float(v) for v in r.stdout.split())
    if procs:
        assert abs(end - (first + 2e6)) <= (last - first) + 3
    else:
        assert abs(end - (last + 1e6)) <= 3
        assert abs(shortest - 1e6) <= 2


HANDOFF = textwrap.dedent("""
    import json, ascentrt as art
    n = 1 << 20
    h, d = art.malloc_host(n), art.malloc(n)
    s, other = art.Stream(), art.Stream()
    with art.profile() as prof:
        # kernel kernel copy copy kernel copy: three changes of executor class on `s`
        for kind in "kkcckc":
            if kind == "k":
                art.launch(lambda: None, stream=s, cost=1e-5)
            else:
                art.memcpy_async(d, h, stream=s)
        s.synchronize()
        # a wait released by a kernel on `other`, then a kernel after a copy on `s`: one delay,
        # the later of the release's and the hand-over's
        art.memcpy_async(d, h, stream=s)
        art.launch(lambda: None, stream=other, cost=1e-3)
        s.wait(other.record())
        art.launch(lambda: None, stream=s, cost=1e-5)
        art.Device(0).synchronize()
    tasks = prof.snapshot().tasks
    ts = sorted((t for t in tasks if t.kind in ("kernel", "copy") and t.stream == s.id),
                key=lambda t: t.start_ns)
    (released,) = [t.end_ns for t in tasks if t.kind == "kernel" and t.stream == other.id]
    p = art.Device(0)._backend.preset
    print(json.dumps({"gaps": [b.start_ns - a.end_ns for a, b in zip(ts, ts[1:])],
                      "dispatch": p.dispatch_ns, "latency": p.event_latency_ns,
                      "released_after_copy": released - ts[-2].end_ns}))
""")


@each_build_once
@pytest.mark.parametrize("handoff", [0, 7000, 2_000_000])
def test_a_stream_pays_the_handoff_once_per_change_of_executor_class(handoff):
    # 910B with executor_handoff_ns set: a stream's next task on another executor class
    # starts that long after its last one ended (after its dispatch, as any task); two tasks
    # of one class follow each other at the dispatch alone; 0 charges nothing. After a wait,
    # the later of the release and the hand-over counts, not their sum.
    r = _run_sim(HANDOFF, env_extra={"ASCENTRT_SIM_VARY":
                                     json.dumps({"executor_handoff_ns": handoff})})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    d, h = out["dispatch"], handoff
    gaps = out["gaps"]  # (gaps[5]: a copy after a copy, with the host's synchronize between)
    assert gaps[:5] == [d, d + h, d, d + h, d + h]
    assert gaps[6] == d + max(out["released_after_copy"] + out["latency"], h)


@sim_only
def test_a_d2d_copy_moves_at_most_its_engines_bandwidth(stream):
    # 910B's engines are limited by the memory alone (2 x n / memory_bandwidth); with a slower
    # copy engine declared, a copy takes its bytes over that engine's rate.
    n = 32 << 20
    a, b = art.malloc(n), art.malloc(n)
    backend = stream.device._backend
    p = backend.preset
    with art.profile() as prof:
        art.memcpy_async(b, a, stream=stream)
        stream.synchronize()
    (fast,) = _tasks(prof, "copy")
    assert abs(fast.duration_ns - 2 * n / p.memory_bandwidth * 1e9) <= 2
    backend.preset = p.varied({"copy_engine_bandwidth": 10e9})
    try:
        with art.profile() as prof:
            art.memcpy_async(b, a, stream=stream)
            stream.synchronize()
    finally:
        backend.preset = p
    (slow,) = _tasks(prof, "copy")
    assert abs(slow.duration_ns - n / 10e9 * 1e9) <= 2
    a.free(), b.free()


@sim_only
def test_copies_up_to_small_copy_bytes_move_at_the_small_copy_rate(stream):
    # A calibrated cpu preset's regime: under glibc's non-temporal threshold a copy moves at
    # small_copy_bandwidth, from it on at the link's (or engine's) rate; pinned H2D and D2D both.
    small, large = 4 << 20, 8 << 20
    host = art.malloc_host(large)
    a, b = art.malloc(large), art.malloc(large)
    backend = stream.device._backend
    p = backend.preset
    backend.preset = p.varied({"small_copy_bytes": small + 1, "small_copy_bandwidth": 5e9,
                               "copy_engine_bandwidth": 8e9})
    try:
        with art.profile() as prof:
            for n in (small, small + 1):
                art.memcpy_async(a, host, n, stream=stream)
                art.memcpy_async(b, a, n, stream=stream)
            stream.synchronize()
    finally:
        backend.preset = p
    h2d_small, d2d_small, h2d_large, d2d_large = _tasks(prof, "copy")
    assert abs(h2d_small.duration_ns - (p.host_link_latency_ns + small / 5e9 * 1e9)) <= 2
    assert abs(d2d_small.duration_ns - small / 5e9 * 1e9) <= 2
    assert abs(h2d_large.duration_ns - (p.host_link_latency_ns
                                        + (small + 1) / p.host_link_bandwidth * 1e9)) <= 2
    assert abs(d2d_large.duration_ns - (small + 1) / 8e9 * 1e9) <= 2
    host.free(), a.free(), b.free()


def test_without_sharing_fields_a_preset_keeps_the_older_model(tmp_path):
    path = _write_preset(tmp_path, shared_processors=None, default_block_dim=None,
                         unified_memory=None, copy_engine_bandwidth=None, crowded_processors=None,
                         small_copy_bytes=None, small_copy_bandwidth=None,
                         memory_bandwidth_per_unit=None, executor_handoff_ns=None,
                         max_notifies=None)
    p = presets.load(path)
    assert (p.shared_processors, p.default_block_dim, p.unified_memory, p.copy_engine_bandwidth,
            p.crowded_processors, p.small_copy_bytes, p.small_copy_bandwidth,
            p.memory_bandwidth_per_unit, p.executor_handoff_ns) == (0, 0, 0, 0, 0, 0, 0, 0, 0)
    assert p.max_notifies == 1 << 30  # (notifies were not capped)
    assert all(p.sources[f][0] == "default" for f in presets.DEFAULTS)  # (not a claim)


@pytest.mark.parametrize("change, words", [
    ({"unified_memory": 2}, "'unified_memory' must be at most 1"),
    ({"default_block_dim": 25}, "'default_block_dim' (25) must be at most compute_units"),
    ({"shared_processors": -1}, "'shared_processors' must be at least"),
    ({"crowded_processors": -0.5}, "'crowded_processors' must be at least"),
    ({"executor_handoff_ns": -1}, "'executor_handoff_ns' must be at least"),
    ({"memory_bandwidth_per_unit": -1.0}, "'memory_bandwidth_per_unit' must be at least"),
    ({"copy_engine_bandwidth": "\"fast\""}, "'copy_engine_bandwidth' must be a number"),
    ({"small_copy_bytes": 1 << 20}, "'small_copy_bytes' and 'small_copy_bandwidth' go together"),
    ({"small_copy_bandwidth": 5e9}, "'small_copy_bytes' and 'small_copy_bandwidth' go together"),
    ({"shared_processors": 2, "crowded_processors": 3},
     "'crowded_processors' (3) must be at most shared_processors (2)"),
])
def test_bad_sharing_fields_name_the_field_and_the_file(tmp_path, change, words):
    path = _write_preset(tmp_path, **change)
    with pytest.raises(PresetError) as err:
        presets.load(path)
    assert words in str(err.value) and path in str(err.value)
    with pytest.raises(PresetError, match="must be at most"):
        presets.load("ascend910b").varied({"default_block_dim": 99})
    with pytest.raises(PresetError, match="'crowded_processors' .* must be at most"):
        presets.load("ascend910b").varied({"shared_processors": 1, "crowded_processors": 1.5})


@sim_only
def test_a_replayed_graph_beside_a_copy_keeps_its_nodes_inside_its_span(dev):
    # A segment's nodes take their times as they run: the segment runs at its full rate and
    # so ends when its last node does (sharing would stretch the span but not the nodes).
    n = 16 << 20
    a, b, c, d = (art.malloc(n) for _ in range(4))
    s1, s2 = dev.create_stream(), dev.create_stream()
    s1.begin_capture()
    art.memcpy_async(b, a, stream=s1)
    art.memcpy_async(a, b, stream=s1)
    graph = s1.end_capture()
    with art.profile() as prof:
        graph.launch(s1)
        art.memcpy_async(d, c, stream=s2)
        dev.synchronize()
    tasks = _tasks(prof)
    (segment,) = [t for t in tasks if t.kind == "graph"]
    nodes = [t for t in tasks if t.kind == "copy" and t.stream == s1.id]
    assert len(nodes) == 2 and segment.start_ns <= min(t.start_ns for t in nodes)
    assert 0 <= segment.end_ns - max(t.end_ns for t in nodes) <= P.dispatch_ns + 2
    graph.destroy(), s1.destroy(), s2.destroy()
    for buf in (a, b, c, d):
        buf.free()


@sim_only
def test_ctrl_c_inside_a_simulation_step_is_raised_once_the_step_is_whole(stream):
    import signal
    ran = []

    def interrupted_kernel():  # runs on the host thread, inside the step that starts it
        os.kill(os.getpid(), signal.SIGINT)
        ran.append("whole")
    buf = art.malloc(64)
    with pytest.raises(KeyboardInterrupt):  # (from the host call whose step ran the kernel)
        art.launch(interrupted_kernel, stream=stream)
        art.memset_async(buf, 1, stream=stream)
        stream.synchronize(timeout=5)
    assert ran == ["whole"]  # the kernel ran to its end: the interrupt did not fail it
    stream.synchronize(timeout=5)  # and nothing was left half started
    assert stream.query()
    buf.free()


KERNEL_BLOCKED = r"""
import os, signal, sys, threading, time
import ascentrt as art
import ascentrt.backends.sim as sim
sim.LONG_STEP_S = 0.2
said, first = threading.Event(), threading.Event()
class Tee:  # (the report, as it is written: the second Ctrl-C comes after it)
    def __init__(self, out):
        self.out = out
    def write(self, text):
        if "stuck_kernel has run for" in text:
            said.set()
        return self.out.write(text)
    def flush(self):
        self.out.flush()
sys.stderr = Tee(sys.stderr)
s = art.Stream()
never = threading.Event()
art.launch(never.wait, stream=s, name="stuck_kernel")  # a kernel waiting for its own host
# (the first Ctrl-C waits for the step; the second ends the kernel, once the report is out: on
# a loaded machine the simulator's pump, which says it, may look late)
def ctrl_c(then):
    os.kill(os.getpid(), signal.SIGINT)
    then.set()
def second():
    said.wait(10)
    first.wait(10)
    time.sleep(0.2)
    ctrl_c(threading.Event())
threading.Timer(0.4, ctrl_c, (first,)).start()
threading.Thread(target=second, daemon=True).start()
try:
    s.synchronize(timeout=5)
    print("no interrupt")
except KeyboardInterrupt:
    print("interrupted")
try:
    s.synchronize(timeout=5)
except art.TaskError as e:
    print(int(e.code))
"""


@each_build_once
def test_a_kernel_that_blocks_its_host_thread_is_said_and_two_ctrl_c_get_the_program_back():
    # (the second Ctrl-C failed the kernel and synchronize raised TaskError instead of the
    # interrupt the program waits for; nothing said why the program stood still)
    r = _run_sim(KERNEL_BLOCKED)
    assert r.stdout.split() == ["interrupted", "507015"], r.stderr
    assert r.stderr.count("stuck_kernel has run for 0.2 s") == 1


# A kernel (on the main thread, inside the step that runs it) gets a Ctrl-C, then does
# something that holds the timeline's lock outside a step or steps itself: the interrupt waits
# for the outermost step to be whole, and nothing is left half done.
CTRL_C_IN_KERNEL = r"""
import os, signal, sys
import ascentrt as art
s, other = art.Stream(), art.Stream()
ran = []
def kernel():
    os.kill(os.getpid(), signal.SIGINT)
    if sys.argv[1] == "free":
        art.malloc_host(4096).free()  # (no pool: the backend's own free, under the lock)
    else:
        other.synchronize(timeout=5)  # a wait of its own, with the lock let go
    ran.append("whole")
try:
    # (one compute unit each: the other stream's kernel still runs when this one waits)
    art.launch(art.kernels.noop, stream=other, cost=1e-3, block_dim=1)
    art.launch(kernel, stream=s, block_dim=1)
    s.synchronize(timeout=5)
    print("no interrupt")
except KeyboardInterrupt:
    s.synchronize(timeout=5)
    assert s.query()
    print("interrupted", ran)
"""


@each_build_once
@pytest.mark.parametrize("then", ["free", "synchronize"])
def test_ctrl_c_in_a_kernel_that_frees_or_waits_is_raised_once_the_step_is_whole(then):
    r = _run_sim(CTRL_C_IN_KERNEL, then, env_extra={"ASCENTRT_MEM_POOL_ENABLE": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "interrupted ['whole']"  # not a failed kernel


def test_a_held_back_ctrl_c_is_raised_on_the_main_thread_only():
    from ascentrt.backends.sim import TIMELINE
    import threading
    import signal
    TIMELINE.hold_back(signal.SIGINT)
    try:
        seen = []
        t = threading.Thread(target=lambda: seen.append(TIMELINE.raise_interrupt()))
        t.start()
        t.join(10)
        assert seen == [None] and TIMELINE.interrupted  # another thread's call goes on
        with pytest.raises(KeyboardInterrupt):
            TIMELINE.raise_interrupt()
        assert not TIMELINE.interrupted
    finally:
        TIMELINE.interrupted = False
        TIMELINE.held = []


@sim_only
def test_a_polling_host_moves_to_the_devices_next_event_and_a_single_query_does_not(dev):
    # (each poll moved virtual time by host_query_ns alone: `while not ev.query():
    # time.sleep(0.1)` over an 8 MB copy took 339 real sleeps)
    s = dev.create_stream()
    art.launch(lambda: None, stream=s, cost=0.5)
    ev = s.record()
    t0 = dev.now_ns()
    assert not ev.query()                  # one query, then other host work: no jump
    art.launch(lambda: None, stream=dev.create_stream(), cost=1e-6)
    assert dev.now_ns() - t0 < 1e6
    polls = 0
    while not ev.query():
        polls += 1
        assert polls < 10, "a poll loop must reach the end of the work"
    assert dev.now_ns() - t0 >= 0.5e9 and polls <= 3
    s.destroy()


@sim_only
def test_queries_of_different_streams_in_a_row_are_not_polling_until_one_comes_round(dev):
    # (a program that looked at two streams once each jumped to the device's next event, as
    # if it had polled: its later launches went in late)
    a, b = dev.create_stream(), dev.create_stream()
    art.launch(lambda: None, stream=a, cost=0.5)
    art.launch(lambda: None, stream=b, cost=0.5)
    t0 = dev.now_ns()
    assert not a.query() and not b.query()       # each looked at once: no jump
    assert dev.now_ns() - t0 < 1e6
    rounds = 0
    while not (a.query() and b.query()):         # a poll loop over both: a comes round again
        rounds += 1
        assert rounds < 10
    assert dev.now_ns() - t0 >= 0.5e9
    a.destroy()
    b.destroy()


@sim_only
def test_a_replayed_graph_runs_its_forked_branches_side_by_side_as_eager_launches_do(dev):
    # (each segment task held every AI core: a fork/join replayed its branches one after the
    # other, 3.5 ms instead of the 2.5 ms of the same launches made eagerly)
    def run(graph: bool) -> int:
        m, left, right = (dev.create_stream() for _ in range(3))
        if graph:
            m.begin_capture(art.CaptureMode.GLOBAL)
        fork = m.record()
        left.wait(fork)
        right.wait(fork)
        art.launch(lambda: None, stream=left, cost=1e-3, block_dim=1)
        art.launch(lambda: None, stream=right, cost=2e-3, block_dim=1)
        m.wait(left.record())
        m.wait(right.record())
        art.launch(lambda: None, stream=m, cost=0.5e-3, block_dim=1)
        t0 = dev.now_ns()
        if graph:
            g = m.end_capture()
            t0 = dev.now_ns()
            g.launch(m)
        m.synchronize()
        took = dev.now_ns() - t0
        for s in (m, left, right):
            s.destroy()
        return took
    eager, replayed = run(False), run(True)
    assert 2.5e6 <= replayed < 2.6e6 and abs(replayed - eager) < 0.1e6, (eager, replayed)


@sim_only
def test_a_replayed_lane_holds_a_wide_nodes_units_only_while_it_runs(dev):
    # (a segment held its widest node's AI cores throughout: a 12-core branch on another lane
    # waited for the whole lane, 3.02 ms instead of the 2.02 ms of the same launches made
    # eagerly, where it runs beside the first 12-core kernel)
    def run(graph: bool):
        s, left = dev.create_stream(), dev.create_stream()
        if graph:
            s.begin_capture(art.CaptureMode.GLOBAL)
        t0 = dev.now_ns()
        left.wait(s.record())
        art.launch(lambda: None, stream=s, cost=1e-3, block_dim=12, name="k1")
        art.launch(lambda: None, stream=s, cost=1e-3, block_dim=24, name="k2")
        art.launch(lambda: None, stream=left, cost=1e-3, block_dim=12, name="k3")
        s.wait(left.record())
        with art.profile() as prof:
            if graph:
                g = s.end_capture()
                t0 = dev.now_ns()
                g.launch(s)
            s.synchronize()
        took = dev.now_ns() - t0
        if graph:
            assert g.plan_summary()["segments"] == 3  # (s's lane is cut where the block_dim changes)
            g.destroy()
        s.destroy(), left.destroy()
        return took, {t.name: t for t in _tasks(prof, "kernel")}
    eager, _ = run(False)
    replayed, k = run(True)
    assert k["k3"].start_ns == k["k1"].start_ns + P.event_latency_ns  # beside k1, as eagerly
    assert k["k2"].start_ns == k["k3"].end_ns + P.dispatch_ns  # all 24 cores: once k3 is done
    assert k["k2"].end_ns == k["k2"].start_ns + 1_000_000
    assert replayed <= eager and replayed < 2.1e6, (replayed, eager)


@sim_only
def test_compute_utilization_counts_the_units_each_kernel_held(dev):
    # (each kernel counted as one AI core: two 1 ms kernels on all 24 cores showed 4%)
    a, b = dev.create_stream(), dev.create_stream()
    with art.profile() as prof:
        art.launch(lambda: None, stream=a, cost=1e-3)              # every core (the default)
        art.launch(lambda: None, stream=b, cost=1e-3)
        dev.synchronize()
    busy = prof.snapshot().metrics()["executors"][f"{dev.id}/compute"]["utilization"]
    assert busy > 0.99
    a.destroy(), b.destroy()


@sim_only
def test_whatif_utilization_is_the_summary_s_units_held_over_units_times_window(dev):
    # (whatif said 100% for a kernel on a quarter of the AI cores, where the profile's summary
    # of the same run said 25%: "any unit busy" against "units held")
    from ascentrt.whatif import summarize
    a = dev.create_stream()
    quarter = dev.properties.compute_units // 4
    with art.profile() as prof:
        art.launch(lambda: None, stream=a, cost=1e-3, block_dim=quarter)
        a.synchronize()
    snap = prof.snapshot()
    busy = summarize(snap)["busy"]["compute"]
    assert busy == snap.metrics()["executors"][f"{dev.id}/compute"]["utilization"]
    assert 0.2 < busy < 0.3
    a.destroy()


@sim_only
def test_whatif_copy_utilization_is_the_busiest_direction_s(dev):
    # (four 50 MB H2D copies kept the H2D engines busy all the run; whatif's copy column, the
    # copy class pooled over every direction's engines, said a third of that)
    from ascentrt.whatif import summarize
    streams = [dev.create_stream() for _ in range(4)]
    host = art.malloc_host(50_000_000)
    bufs = [art.malloc(50_000_000) for _ in range(4)]
    with art.profile() as prof:
        for s, b in zip(streams, bufs):
            art.memcpy_async(b, host, stream=s)
        dev.synchronize()
    snap = prof.snapshot()
    h2d = snap.metrics()["executors"][f"{dev.id}/copy host_to_device"]["utilization"]
    assert h2d > 0.95 and summarize(snap)["busy"]["copy"] == h2d
    for x in (host, *bufs):
        x.free()
    for s in streams:
        s.destroy()


@sim_only
def test_a_value_wait_the_host_released_goes_on_from_the_host_s_next_call(dev):
    # (it went on only after the host's synchronize had waited out a 0.25 s slice: 256 ms late)
    a, b = dev.create_stream(), dev.create_stream()
    word = art.malloc(8)
    art.memset(word, 0)
    t0 = dev.now_ns()
    b.wait_value(word, lambda w: w == 2, "the word to be 2")
    art.launch(lambda: None, stream=b, cost=1e-3, block_dim=1)
    art.launch(lambda: None, stream=a, cost=5e-3, block_dim=1)
    a.synchronize()
    word.numpy(np.uint64)[0] = 2                  # the host writes the word
    b.synchronize()
    assert (dev.now_ns() - t0) / 1e6 < 7          # 5 ms, then 1 ms, and the small latencies
    word.free()
    a.destroy(), b.destroy()


@sim_only
def test_a_value_write_and_a_memset_node_hold_what_their_eager_forms_hold(dev):
    # A value write holds no AI core (the stream's scheduler writes it): it went only once a
    # kernel holding every core ended. A memset node of a replayed graph held every core, its
    # eager form one.
    a, b, c = (dev.create_stream() for _ in range(3))
    word = art.malloc(8)
    art.memset(word, 0)
    seen = {}
    t0 = dev.now_ns()
    art.launch(lambda: None, stream=a, cost=10e-3)          # every core, 10 ms
    b.write_value(word, 1)
    c.wait_value(word, lambda w: w == 1, "the word to be 1")
    art.launch_host_func(lambda: seen.setdefault("t", dev.now_ns()), stream=c)
    dev.synchronize()
    assert (seen["t"] - t0) / 1e6 < 1
    buf = art.malloc(1 << 20)
    a.begin_capture()
    art.memset_async(buf, 0, stream=a)
    graph = a.end_capture()
    units = dev.properties.compute_units
    times = []
    for replayed in (False, True):
        t0 = dev.now_ns()
        graph.launch(a) if replayed else art.memset_async(buf, 0, stream=a)
        art.launch(lambda: None, stream=b, cost=1e-3, block_dim=units - 1)
        dev.synchronize()
        times.append(dev.now_ns() - t0)
    assert abs(times[1] - times[0]) < 0.1 * times[0]  # side by side in both (it was one after the other)
    graph.destroy()
    buf.free()
    word.free()
    for s in (a, b, c):
        s.destroy()


@sim_only
def test_a_wait_on_a_done_event_and_a_pinned_free_cost_the_host_their_calls(dev):
    # (both cost nothing: the preset's host_record_ns is aclrtStreamWaitEvent's cost whatever
    # the event's state, and a free of pinned memory is a free)
    s, s2 = dev.create_stream(), dev.create_stream()
    ev = s.record()
    s.synchronize()
    t0 = dev.now_ns()
    s2.wait(ev)
    assert dev.now_ns() - t0 == P.host_record_ns
    h = art.malloc_host(1 << 20)
    t0 = dev.now_ns()
    h.free()
    assert dev.now_ns() - t0 == P.host_free_ns
    s.destroy(), s2.destroy()


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
def test_a_wait_released_at_the_instant_it_is_reached_takes_the_release_latency_either_way(tmp_path):
    # A record and the end of the waiting stream's kernel at one instant: the release latency
    # applied only when the kernel's end came first (the wait blocked), so the order the two
    # were submitted in changed the timeline (2000 us against 2100 us).
    preset = _write_preset(tmp_path, host_launch_ns=0, host_record_ns=0, dispatch_ns=0,
                           host_sync_ns=0, event_latency_ns=100_000)
    r = _run_sim(textwrap.dedent("""
        import ascentrt as art
        dev = art.set_device(0)
        kernel = lambda: None
        for wait in ("event", "notify"):
            for record_first in (True, False):
                a, b = dev.create_stream(), dev.create_stream()
                ev, n = art.Event(), dev.create_notify()
                record = (lambda: ev.record(a)) if wait == "event" else (lambda: n.record(a))
                t0 = dev.now_ns()
                if record_first:
                    art.launch(kernel, stream=a, cost=1e-3, block_dim=1)
                    record()
                    art.launch(kernel, stream=b, cost=1e-3, block_dim=1)
                else:
                    art.launch(kernel, stream=b, cost=1e-3, block_dim=1)
                    art.launch(kernel, stream=a, cost=1e-3, block_dim=1)
                    record()
                b.wait(ev) if wait == "event" else n.wait_and_reset(b)
                art.launch(kernel, stream=b, cost=1e-3, block_dim=1)
                b.synchronize()
                print(wait, (dev.now_ns() - t0) // 1000)
    """), env_extra={"ASCENTRT_SIM_PRESET": preset})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["event", "2100", "event", "2100", "notify", "2100", "notify", "2100"]


@sim_only
def test_a_kernel_a_host_function_launches_is_dispatched_after_the_function_s_own_start(dev):
    # (it started at the function's start: dispatched before the function that launched it)
    a, b = dev.create_stream(), dev.create_stream()
    seen = {}

    def hf():
        seen["hf"] = dev.now_ns()
        art.launch(lambda: seen.setdefault("k", dev.now_ns()), stream=b, cost=1e-3, block_dim=1)

    art.launch_host_func(hf, stream=a)
    dev.synchronize()
    assert seen["k"] - seen["hf"] == P.dispatch_ns
    a.destroy(), b.destroy()


def test_calibrate_times_small_copies_both_ways_with_the_host_side_written_first(stream,
                                                                                  monkeypatch):
    # (H2D copies alone, from a host range only ever read, measured ~15% faster here than a
    # pipeline's copies, whose D2H lands in memory the cache no longer holds: the simulated
    # demo ran 16% faster than the cpu backend did)
    from ascentrt.calibrate import _streamed_pass
    n, half = 4096, 3
    host, dev_buf = art.malloc_host(2 * half * n), art.malloc(3 * n)
    dev_buf.numpy()[:] = 9
    calls = []

    def recording(dst, src, *args, **kwargs):
        calls.append((dst.ptr, src.ptr, int(host.numpy()[0])))
        return copy(dst, src, *args, **kwargs)
    copy = art.memcpy_async
    monkeypatch.setattr(art, "memcpy_async", recording)
    assert _streamed_pass(stream, host, dev_buf, n, half, 5) > 0
    slots = [dev_buf.ptr + (i % 3) * n for i in range(half)]
    assert calls == [c for i in range(half) for c in (
        (slots[i], host.ptr + i * n, 5), (host.ptr + (half + i) * n, slots[i], 5))]
    assert (host.numpy()[half * n:] == 5).all()  # (each slot held the input copied into it)
    host.free(), dev_buf.free()


@pytest.mark.cpu_only
def test_calibrate_times_a_launch_synchronize_loop_whole_stalls_included(stream, monkeypatch):
    # (a loaded machine stalls ~1% of the iterations for milliseconds: a loop pays them, and
    # the median iteration calibrate took left them out: at a load of 5 on 2 cores, the
    # simulator predicted ~40% of the time of bench_sim's latency-bound loop)
    from ascentrt.calibrate import _launch_then_synchronize
    launched = [0]

    def stalling(*args, **kwargs):
        launched[0] += 1
        if launched[0] % 20 == 0:  # one iteration in 20 waits 20 ms
            time.sleep(0.02)
        return launch(*args, **kwargs)
    launch = art.launch
    monkeypatch.setattr(art, "launch", stalling)
    per_iteration, _ = _launch_then_synchronize(stream, count=20)
    assert per_iteration >= 0.02e9 / 20  # each loop of 20 took its stall


def test_calibrate_warns_before_measuring_a_busy_machine():
    from ascentrt.calibrate import busy_warning
    assert busy_warning(0.1) is None
    assert "was busy (1-minute load average 1.30" in busy_warning(1.3)


@sim_only
def test_a_driver_allocation_is_charged_once_to_the_call_that_made_it(dev):
    # (a device malloc that grew the pool paid the driver twice; a malloc_host paid nothing
    # and the launch after it paid its 20 us)
    p = dev._backend.preset
    pool, driver = int(p.host_malloc_pool_ns), int(p.host_malloc_driver_ns)
    def cost(call):
        t0 = dev.now_ns()
        out = call()
        return dev.now_ns() - t0, out
    art.empty_cache()  # (no free block an earlier test left may serve the first two)
    took, big = cost(lambda: art.malloc(160 << 20))       # a chunk of its own: the driver once
    assert took == pool + driver
    took, again = cost(lambda: art.malloc(160 << 20))     # a new chunk again
    assert took == pool + driver
    again.free()
    took, hit = cost(lambda: art.malloc(160 << 20))       # the cached block: a pool hit
    assert took == pool
    took, host = cost(lambda: art.malloc_host(64 << 20))  # a pinned mapping
    assert took == pool + driver
    took, _ = cost(lambda: art.launch(art.kernels.noop, stream=dev.create_stream()))
    assert took == int(p.host_launch_ns)
    for b in (big, hit, host):
        b.free()


@sim_only
def test_a_graph_with_a_fork_adds_no_time_of_its_own_at_its_join(dev):
    # (its lane-error check ran as an uncosted kernel: 10 us on every AI core per launch)
    m, side = dev.create_stream(), dev.create_stream()
    m.begin_capture(art.CaptureMode.GLOBAL)
    side.wait(m.record())
    art.launch(lambda: None, stream=side, cost=1e-5, block_dim=1)
    art.launch(lambda: None, stream=m, cost=1e-5, block_dim=1)
    m.wait(side.record())
    graph = m.end_capture()
    graph.launch(m)
    m.synchronize()
    assert not any(name.endswith("_join") for name in dev._backend.uncosted)
    graph.destroy()


@sim_only
def test_long_virtual_waits_take_no_real_time():
    # (a host wait stepped virtual time 0.25 s at a time: a 1e9 s task or timeout never ended)
    # (in a process of its own: the test runner's alarm handler could record the notify, so a
    # wait here would pass virtual time at a bounded pace instead of going to its deadline)
    out = run_program("""
        import time, ascentrt as art
        dev = art.Device(0)
        s = dev.create_stream()
        art.launch(art.kernels.noop, stream=s, cost=1e9)
        started = time.monotonic()
        s.synchronize()
        stuck = dev.create_stream()
        stuck.wait_notify(art.Notify(dev))             # nothing will record it
        try:
            stuck.synchronize(timeout=1e9)
        except art.AscentTimeoutError:
            print("timed out", time.monotonic() - started < 5)
        stuck.destroy(force=True)
    """, env={"ASCENTRT_BACKEND": "sim"}, timeout=60)
    assert out.split() == ["timed", "out", "True"]


@sim_only
@pytest.mark.parametrize("waits_for, found", [("the batch before", False), ("this batch", True)])
def test_an_event_synchronized_every_iteration_is_diagnosed_only_where_the_device_runs_dry(
        dev, waits_for, found):
    # (a double-buffered loop, which waits for the batch before the one it just queued, got
    # the finding for its dispatch gaps alone)
    s = dev.create_stream()
    with art.profile() as prof:
        events = []
        for i in range(20):
            art.launch(art.kernels.noop, stream=s, cost=1e-3)
            events.append(s.record())
            if waits_for == "this batch":
                events[i].synchronize()
            elif i >= 1:
                events[i - 1].synchronize()
        s.synchronize()
    assert ("stream_sync_in_loop" in {f.kind for f in prof.diagnose()}) is found
    s.destroy()


_BUSY_OR_BLOCKED_HOST = textwrap.dedent("""
    import time, ascentrt as art
    {gate}
    a, b = art.Stream(), art.Stream()
    art.launch(lambda: None, stream=a, cost=1.0, block_dim=12)
    end = time.perf_counter() + {busy}
    while time.perf_counter() < end:
        pass
    time.sleep({blocked})
    art.launch(lambda: None, stream=b, cost=1.0, block_dim=12)
    a.synchronize(); b.synchronize()
    print(art.Device(0).now_ns())
""")


def _run_busy_or_blocked_host(busy, blocked):
    """(the device clock at the end, how often the device was said to move on) of a host that
    computes `busy` s, then blocks `blocked` s, with work pending."""
    proc = subprocess.run([sys.executable, "-c", _BUSY_OR_BLOCKED_HOST.format(busy=busy, blocked=blocked,
                                                                                gate="")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ASCENTRT_BACKEND": "sim"})
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1]), proc.stderr.count("moved on without it")


@each_build_once
def test_a_device_that_moved_on_without_a_blocked_host_says_so_and_a_busy_host_keeps_its_timeline():
    # (a host busy longer than IDLE_HOST_S between calls got 2 s of virtual time instead of
    # 1 s, with nothing said: the figure depended on the machine's speed. A host that computes
    # is not idle: the timeline is the one a host with no work between its calls gives, and
    # only a host blocked outside the runtime lets the device move on, and is told so.)
    quick, said = _run_busy_or_blocked_host(0, 0)
    assert said == 0
    assert _run_busy_or_blocked_host(0.6, 0) == (quick, 0)
    moved, said = _run_busy_or_blocked_host(0, 0.6)
    assert moved > quick and said == 1  # (once per process)


def _scheduler_figures() -> bool:
    """Whether this system gives a thread's run and run-queue times (Linux with schedstats)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat", "rb") as f:
            return int(f.read().split()[0]) > 0
    except (OSError, ValueError, IndexError):
        return False


@pytest.mark.serial  # (it loads one core to the full: a test beside it would be starved)
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not _scheduler_figures(),
                    reason="needs CPU affinity and Linux's per-thread scheduler figures")
def test_a_busy_host_on_a_loaded_core_keeps_its_timeline():
    # (a host computing on a core that 14 other processes share runs ~6% of the time, less
    # than a busy host's share: it was taken for blocked, and the device moved on without it,
    # so virtual time depended on the machine's load. Waiting in the run queue for a core is
    # computing too.)
    quick, _ = _run_busy_or_blocked_host(0, 0)
    cpu = min(os.sched_getaffinity(0))
    # (the program pins itself once started, since a start on a loaded core takes seconds, then
    # waits for the hogs with no work pending; each hog spins 30 s at most: none outlives a
    # test run that is killed)
    gate = f"import os, sys; os.sched_setaffinity(0, {{{cpu}}})\nsys.stdin.read(1)"
    proc = subprocess.Popen([sys.executable, "-c", _BUSY_OR_BLOCKED_HOST.format(busy=0.6, blocked=0, gate=gate)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "ASCENTRT_BACKEND": "sim"})
    hogs = [subprocess.Popen([sys.executable, "-c", "import time\nend = time.monotonic() + 30\n"
                              "while time.monotonic() < end: pass"]) for _ in range(14)]
    try:
        for hog in hogs:
            os.sched_setaffinity(hog.pid, {cpu})
        out, err = proc.communicate("x", timeout=60)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert (int(out.split()[-1]), err.count("moved on without it")) == (quick, 0)


@each_build_once
def test_a_host_call_waiting_for_a_running_host_function_is_not_an_idle_host():
    # A launch whose step waits for a host function that runs long (its patience) is the host
    # inside a runtime call: the device was said to have moved on "without the host", which
    # "made no runtime call for 0.2 s", while it waited in that launch.
    code = textwrap.dedent("""
        import time, ascentrt as art
        s = art.Stream()
        art.launch_host_func(time.sleep, 1.0, stream=s)
        art.launch(lambda: None, stream=s, cost=1e-3)
        s.synchronize()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "ASCENTRT_BACKEND": "sim"})
    assert proc.returncode == 0, proc.stderr
    assert "moved on without it" not in proc.stderr


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
@pytest.mark.serial  # (the real pace of its threads against virtual time: alone, after the rest)
def test_a_timed_host_wait_with_an_idle_thread_alive_ends_at_its_virtual_deadline():
    # (the stuck wait kept the real pace for its whole timeout when only a thread that never
    # used the runtime lived: a 12 s synchronize took 12 s, a collective's 1836 s half an hour)
    r = _run_sim(textwrap.dedent("""
        import os, threading, time, ascentrt as art
        dev = art.set_device(0); s = dev.create_stream()
        n = art.Notify(); s.wait_notify(n)
        threading.Thread(target=threading.Event().wait, daemon=False).start()  # idle
        t0 = time.monotonic()
        try:
            s.synchronize(timeout=12)
        except art.AscentTimeoutError as e:
            print(int(e.code), time.monotonic() - t0)
        os._exit(0)
    """))
    assert r.returncode == 0, r.stderr
    code, wall = r.stdout.split()
    assert code == "507046" and float(wall) < 5  # (the 2 s it gives such a thread, then the jump)


@sim_only
def test_a_daemon_thread_that_set_its_device_may_end_a_timed_wait_as_on_cpu():
    # (a daemon helper that records a notify 0.3 s later: on cpu the synchronize returns; on
    # sim it timed out at once, daemon threads counting as nobody who could act)
    dev = art.set_device(0)
    s, helper_stream = dev.create_stream(), dev.create_stream()
    n = art.Notify(dev)

    def helper():
        art.set_device(0)
        time.sleep(0.3)
        helper_stream.record_notify(n)

    s.wait_notify(n)
    threading.Thread(target=helper, daemon=True).start()
    s.synchronize(timeout=3.0)


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
@pytest.mark.serial  # (the real pace of its threads against virtual time: alone, after the rest)
def test_an_untimed_wait_on_a_thread_that_acts_late_keeps_virtual_time_at_the_real_pace():
    # (after the 2 s a stuck wait gives threads that never used the runtime, empty slices ran
    # the clock away at full speed: 23,000 virtual s for a record 3 s later, a core busy)
    r = _run_sim(textwrap.dedent("""
        import threading, time, ascentrt as art
        dev = art.set_device(0); s, t = dev.create_stream(), dev.create_stream()
        n = art.Notify(); s.wait_notify(n)
        threading.Timer(2.3, lambda: n.record(t)).start()
        v0, c0 = dev.now_ns(), time.process_time()
        s.synchronize()
        print((dev.now_ns() - v0) / 1e9, time.process_time() - c0)
    """))
    assert r.returncode == 0, r.stderr
    virtual, cpu = (float(x) for x in r.stdout.split())
    assert 2.0 < virtual < 5 and cpu < 1.0


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
@pytest.mark.serial  # (the real pace of its threads against virtual time: alone, after the rest)
def test_a_cycle_another_thread_completes_is_found_at_that_instant_not_a_check_later():
    # (the waiting thread, told once that a notify had no record, looked again only a check
    # slice later: the deadlock cost 0.25 virtual s, 5 s with ASCENTRT_DEADLOCK_CHECK_S=5)
    r = _run_sim(textwrap.dedent("""
        import threading, time, ascentrt as art
        dev = art.set_device(0); a, b = dev.create_stream(), dev.create_stream()
        na, nb = art.Notify(), art.Notify()
        a.wait_notify(nb); a.record_notify(na)
        recorded = []
        def other():  # completes the cycle while the main thread waits
            art.set_device(0)
            time.sleep(0.1)
            b.wait_notify(na); b.record_notify(nb)
            recorded.append(dev.now_ns())
        threading.Thread(target=other).start()
        try:
            a.synchronize(timeout=20)
        except art.DeadlockError as e:
            print(int(e.code), dev.now_ns(), recorded[0])
    """), env_extra={"ASCENTRT_DEADLOCK_CHECK_S": "5"})
    assert r.returncode == 0, r.stderr
    code, found, recorded = (int(x) for x in r.stdout.split())
    assert code == 507950 and found == recorded  # (the real pace before it: both see it)


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
@pytest.mark.serial  # (the real pace of its threads against virtual time: alone, after the rest)
def test_a_wait_left_alone_by_a_thread_that_ends_is_found_where_it_ended():
    # (the last other thread's end left the wait to its check slice, which then jumped to its
    # end: a deadlock at 5 virtual s for a thread that lived 0.1 s)
    r = _run_sim(textwrap.dedent("""
        import threading, time, ascentrt as art
        dev = art.set_device(0); s = dev.create_stream()
        n = art.Notify(); s.wait_notify(n)
        def other():  # uses the runtime, then ends without recording n
            art.set_device(0)
            time.sleep(0.1)
        threading.Thread(target=other).start()
        try:
            s.synchronize()
        except art.DeadlockError as e:
            print(int(e.code), dev.now_ns() / 1e9)
    """), env_extra={"ASCENTRT_DEADLOCK_CHECK_S": "5"})
    assert r.returncode == 0, r.stderr
    code, found = r.stdout.split()
    assert code == "507950" and 0.1 <= float(found) < 2  # (the real pace while it lived)


@sim_only
def test_a_replayed_graphs_copies_take_the_engines_of_their_own_direction(dev):
    # (a copy segment took the first free engine of any direction: two H2D copies on two lanes
    # ran side by side on the H2D and D2H engines, 1.02 ms instead of the 2.02 ms eagerly)
    n = 50_000_000  # 1 ms over the host link
    hosts, devs = [art.malloc_host(n) for _ in range(3)], [art.malloc(n) for _ in range(3)]
    m, a, b, c = (dev.create_stream() for _ in range(4))
    m.begin_capture(art.CaptureMode.GLOBAL)
    fork = m.record()
    for s in (a, b, c):
        s.wait(fork)
    art.memcpy_async(devs[0], hosts[0], n, stream=a)
    art.memcpy_async(devs[1], hosts[1], n, stream=b)
    art.memcpy_async(hosts[2], devs[2], n, stream=c)  # D2H: its own engine, beside them
    for s in (a, b, c):
        m.wait(s.record())
    g = m.end_capture()
    with art.profile() as prof:
        g.launch(m)
        m.synchronize()
    copies = sorted(_tasks(prof, "copy"), key=lambda t: t.start_ns)
    assert len(copies) == 3
    h2d = [t for t in copies if t.name == "host_to_device"]
    d2h = [t for t in copies if t.name == "device_to_host"]
    assert len(h2d) == 2 and len(d2h) == 1, [t.name for t in copies]
    assert h2d[1].start_ns >= h2d[0].end_ns  # one H2D engine: one after the other
    assert d2h[0].start_ns < h2d[0].end_ns   # the D2H engine beside them
    g.destroy()
    for s in (m, a, b, c):
        s.destroy()
    for x in (*hosts, *devs):
        x.free()


@sim_only
@pytest.mark.parametrize("pitched", [False, True], ids=["1d", "2d"])
def test_a_replayed_lanes_copies_of_two_directions_hold_one_engine_at_a_time(dev, pitched):
    # (a segment holds an engine of each direction it moves: a lane's H2D then D2H copy is cut
    # in two, so another lane's D2H runs beside the H2D, as eagerly; 2D copies were all named
    # "memcpy2d", so their lane was not cut: 3.0 ms against 2.0 ms eagerly)
    n = 50_000_000
    hosts, devs = [art.malloc_host(n) for _ in range(3)], [art.malloc(n) for _ in range(3)]
    m, a, b = (dev.create_stream() for _ in range(3))

    def copy(dst, src, stream):
        if pitched:
            art.memcpy2d_async(dst, 1000, src, 1000, 1000, n // 1000, stream=stream)
        else:
            art.memcpy_async(dst, src, n, stream=stream)

    m.begin_capture(art.CaptureMode.GLOBAL)
    fork = m.record()
    a.wait(fork), b.wait(fork)
    copy(devs[0], hosts[0], a)
    copy(hosts[1], devs[1], a)
    copy(hosts[2], devs[2], b)
    m.wait(a.record()), m.wait(b.record())
    g = m.end_capture()
    with art.profile() as prof:
        g.launch(m)
        m.synchronize()
    h2d, d2h_b, d2h_a = sorted(_tasks(prof, "copy"), key=lambda t: (t.start_ns, not t.name.endswith("host_to_device")))
    assert h2d.name.endswith("host_to_device") and d2h_b.start_ns == h2d.start_ns
    assert d2h_a.start_ns == max(h2d.end_ns, d2h_b.end_ns) + P.dispatch_ns
    g.destroy()
    for s in (m, a, b):
        s.destroy()
    for x in (*hosts, *devs):
        x.free()


@sim_only
def test_a_memset_writes_at_what_the_one_ai_core_it_holds_can_draw(stream):
    # (a memset held one AI core but wrote at the whole memory bandwidth: 1e9 bytes in 0.625 ms,
    # where a kernel on one core with the same bytes took 17.4 ms)
    n = 10**8
    buf = art.malloc(n)
    with art.profile() as prof:
        art.memset_async(buf, 1, n, stream=stream)
        art.launch(lambda: None, stream=stream, cost={"bytes": n}, block_dim=1, name="k")
        stream.synchronize()
    (memset,), (kernel,) = _tasks(prof, "memset"), _tasks(prof, "kernel")
    assert memset.units == kernel.units == 1
    assert memset.duration_ns == kernel.duration_ns == int(n / P.memory_bandwidth_per_unit * 1e9)
    buf.free()


@sim_only
def test_now_inside_a_task_is_its_start_as_the_profile_records_it(dev):
    # (it read the time the task was taken: a dispatch early, and after a wait the event's
    # release too, 3000 and 14000 where the profile said 4000 and 16000)
    s, s2 = dev.create_stream(), dev.create_stream()
    seen = {}

    def note(name):
        return lambda: seen.setdefault(name, dev.now_ns())
    s.begin_capture()
    art.launch(note("n1"), stream=s, cost=10e-6, name="n1")
    art.launch(note("n2"), stream=s, cost=10e-6, name="n2")
    g = s.end_capture()
    with art.profile() as prof:
        origin = dev.now_ns()  # (a profile's times count from its start)
        art.launch(note("k1"), stream=s, cost=10e-6, name="k1")
        s2.wait(s.record())
        art.launch(note("k2"), stream=s2, cost=10e-6, name="k2")  # after a wait
        g.launch(s)                                               # graph nodes
        art.launch_host_func(note("h"), stream=s)                 # a host function
        dev.synchronize()
    tasks = prof.snapshot().tasks
    start = {t.name: t.start_ns for t in tasks}
    start["h"] = next(t.start_ns for t in tasks if t.kind == "host_func")
    assert {n: t - origin for n, t in seen.items()} == {n: start[n] for n in ("k1", "k2", "n1", "n2", "h")}
    g.destroy(), s.destroy(), s2.destroy()


@each_build_once
def test_copies_over_one_peer_link_share_it_whichever_device_queued_them():
    # (sharing was per device: a push from device 0 and a pull by device 1, both 0 -> 1, each
    # moved at the link's full rate, 2 x 56 MB in 1 ms over a 56 GB/s link)
    r = _run_sim(textwrap.dedent("""
        import json, ascentrt as art
        d0, d1 = art.Device(0), art.Device(1)
        d0.enable_peer_access(1); d1.enable_peer_access(0)
        n = 56_000_000
        art.set_device(0); a0, b0, s0 = art.malloc(n), art.malloc(n), d0.create_stream()
        art.set_device(1); a1, b1, s1 = art.malloc(n), art.malloc(n), d1.create_stream()
        d0.synchronize(); d1.synchronize()
        with art.profile() as prof:
            art.memcpy_async(a1, a0, n, stream=s0)   # pushed by device 0
            art.memcpy_async(b1, b0, n, stream=s1)   # pulled by device 1
            d0.synchronize(); d1.synchronize()
        print(json.dumps([(t.start_ns, t.end_ns) for t in prof.snapshot().tasks if t.kind == "copy"]))
        """), env_extra={"ASCENTRT_DEVICES": "2", "ASCENTRT_SIM_PRESET": "ascend910b"})
    assert r.returncode == 0, r.stderr
    (s_a, e_a), (s_b, e_b) = json.loads(r.stdout.strip().splitlines()[-1])
    both = 2 * 56_000_000 / P.peer_link_bandwidth * 1e9  # the link moves both, one after the other's worth
    assert both <= max(e_a, e_b) - min(s_a, s_b) <= both + 20_000


@sim_only
def test_a_synchronous_copy_shares_the_host_link_with_the_copies_running_beside_it(dev, stream):
    # (it took the link's full rate for itself while an asynchronous H2D copy crossed it too:
    # 2 x 50 MB over a 50 GB/s link in 1 ms)
    n = 50_000_000
    hosts, devs = [art.malloc_host(n) for _ in range(2)], [art.malloc(n) for _ in range(2)]
    dev.synchronize()
    with art.profile() as prof:
        art.memcpy_async(devs[0], hosts[0], n, stream=stream)
        t1 = dev.now_ns()
        art.memcpy(devs[1], hosts[1], n)  # the host waits for it, over the same link
        took = dev.now_ns() - t1
        stream.synchronize()
    (copy,) = _tasks(prof, "copy")
    both = 2 * n / P.host_link_bandwidth * 1e9
    call = P.host_launch_ns + P.dispatch_ns + P.host_sync_ns  # (launched, then the wait's return)
    assert both <= took <= both + call + 10_000
    assert copy.duration_ns >= both - 10_000  # the asynchronous one shared it too
    for x in (*hosts, *devs):
        x.free()


@sim_only
def test_a_replayed_host_function_holds_its_stream_as_long_as_its_eager_form(dev, stream):
    # (its segment held the stream for host_func_ns, and its node for host_func_ns again: the
    # kernel after it started 5 us late)
    def body():
        art.launch(art.kernels.noop, stream=stream, cost=50e-6, name="k1")
        art.launch_host_func(lambda: None, stream=stream)
        art.launch(art.kernels.noop, stream=stream, cost=20e-6, name="k2")
    stream.begin_capture()
    body()
    graph = stream.end_capture()
    for replayed in (False, True):
        with art.profile() as prof:
            graph.launch(stream) if replayed else body()
            stream.synchronize()
        (hf,) = _tasks(prof, "host_func")
        k1, k2 = sorted(_tasks(prof, "kernel"), key=lambda t: t.start_ns)
        assert hf.start_ns == k1.end_ns + P.dispatch_ns
        assert hf.duration_ns == P.host_func_ns
        assert k2.start_ns == hf.end_ns + P.dispatch_ns
    graph.destroy()


@sim_only
@pytest.mark.parametrize("through", ["events", "notifies"])
def test_a_record_right_after_a_wait_pays_the_release_latency_once_per_hop(dev, through):
    # (a record right after a wait was stamped at the release instant: an event recorded there
    # read 0 ms after the one it waited for, and two hops paid event_latency_ns once)
    s1, s2, s3 = (dev.create_stream() for _ in range(3))
    D, EL = P.dispatch_ns, P.event_latency_ns
    e1, e2 = art.Event(timing=True), art.Event(timing=True)
    n1, n2 = dev.create_notify(), dev.create_notify()
    with art.profile() as prof:
        art.launch(art.kernels.noop, stream=s1, cost=100e-6, block_dim=1, name="k1")
        if through == "events":
            e1.record(s1)
            s2.wait(e1)
            e2.record(s2)
            s3.wait(e2)
        else:
            s1.record_notify(n1)
            s2.wait_notify(n1)
            s2.record_notify(n2)
            s3.wait_notify(n2)
        art.launch(art.kernels.noop, stream=s2, cost=10e-6, block_dim=1, name="k2")
        art.launch(art.kernels.noop, stream=s3, cost=10e-6, block_dim=1, name="k3")
        dev.synchronize()
    k1, k2, k3 = (next(t for t in _tasks(prof, "kernel") if t.name == k) for k in ("k1", "k2", "k3"))
    assert k2.start_ns == k1.end_ns + EL + D      # one hop
    assert k3.start_ns == k1.end_ns + 2 * EL + D  # two hops: each release takes its latency
    if through == "events":
        assert round(art.elapsed_time(e1, e2) * 1e6) == EL
    # The profile agrees: each wait ends no earlier than the record that released it (its
    # record -> wait arrow points forward), and the second record is stamped EL after the first
    kinds = ("event_record", "event_wait") if through == "events" else ("notify_record", "notify_wait")
    (r1, r2), (w1, w2) = (sorted(_tasks(prof, k), key=lambda t: t.end_ns) for k in kinds)
    assert r1.end_ns <= w1.end_ns and r2.end_ns <= w2.end_ns
    assert r2.end_ns == r1.end_ns + EL
    for x in (e1, e2, n1, n2):
        x.destroy()
    for s in (s1, s2, s3):
        s.destroy()


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
def test_ascend310p_peer_copies_share_the_source_device_s_host_link(tmp_path):
    # (310P cards have no link between chips: a peer copy crosses PCIe through the host, out
    # over the source's x16 link, but it had a link of its own and ran beside that device's
    # D2H copy at full rate, 10 ms each instead of 20 ms)
    r = _run_sim(textwrap.dedent("""
        import ascentrt as art
        from ascentrt.backends import presets
        p = presets.load("ascend310p")
        d0, d1 = art.Device(0), art.Device(1)
        d0.enable_peer_access(1)
        n = 250_000_000
        a0, a1, h = d0.malloc(n), d1.malloc(n), art.malloc_host(n)
        s0, s1 = d0.create_stream(), d0.create_stream()
        for both in (False, True):
            t0 = d0.now_ns()
            art.memcpy_async(a1, a0, stream=s0)          # peer, 0 -> 1
            if both:
                art.memcpy_async(h, a0, stream=s1)       # device 0 -> host, at the same time
            d0.synchronize()
            print(round((d0.now_ns() - t0) / (n / p.host_link_bandwidth * 1e9), 2))
        for b in (a0, a1, h):
            b.free()
    """), env_extra={"ASCENTRT_SIM_PRESET": "ascend310p", "ASCENTRT_DEVICES": "2"})
    assert r.returncode == 0, r.stderr
    assert [float(x) for x in r.stdout.split()] == [1.0, 2.0]  # alone: the link's rate; both: half


@pytest.mark.cpu_only  # (its own sim process: once, in the cpu session)
def test_a_value_wait_reached_at_or_just_after_its_write_takes_the_release_latency(tmp_path):
    # A value wait that found its word written already passed with no release latency, while
    # one that blocked took it: the waiting stream went on 100 us sooner when its kernel ended
    # at the write's instant or within the latency after it (2000 / 2050 us against 2100).
    preset = _write_preset(tmp_path, host_launch_ns=0, host_record_ns=0, dispatch_ns=0,
                           host_sync_ns=0, event_latency_ns=100_000)
    r = _run_sim(textwrap.dedent("""
        import ascentrt as art
        dev = art.set_device(0)
        kernel = lambda: None
        word = art.malloc(8)
        for n, (write_first, later) in enumerate([(True, 0), (False, 0), (True, 50e-6)], 1):
            a, b = dev.create_stream(), dev.create_stream()
            t0 = dev.now_ns()
            if write_first:
                art.launch(kernel, stream=a, cost=1e-3, block_dim=1)
                a.write_value(word, n)
                art.launch(kernel, stream=b, cost=1e-3 + later, block_dim=1)
            else:
                art.launch(kernel, stream=b, cost=1e-3 + later, block_dim=1)
                art.launch(kernel, stream=a, cost=1e-3, block_dim=1)
                a.write_value(word, n)
            b.wait_value(word, lambda w, n=n: w == n, f"the word to be {n}")
            art.launch(kernel, stream=b, cost=1e-3, block_dim=1)
            b.synchronize()
            print((dev.now_ns() - t0) // 1000)
        word.free()
    """), env_extra={"ASCENTRT_SIM_PRESET": preset})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2100", "2100", "2100"]


@sim_only
def test_a_value_write_pays_no_dispatch_and_its_hop_costs_what_an_event_s_costs(dev):
    # A value write was a kernel dispatched as one: written dispatch_ns after the work before
    # it, so a write -> value wait hop cost event_latency_ns + 2 dispatches, an event's one.
    D, EL = P.dispatch_ns, P.event_latency_ns
    word = art.malloc(8)
    art.memset(word, 0)
    for through in ("event", "value"):
        a, b = dev.create_stream(), dev.create_stream()
        with art.profile() as prof:
            art.launch(art.kernels.noop, stream=a, cost=100e-6, block_dim=1, name="k1")
            if through == "event":
                b.wait(a.record())
            else:
                a.write_value(word, 1)
                b.wait_value(word, lambda w: w == 1, "the word to be 1")
            art.launch(art.kernels.noop, stream=b, cost=10e-6, block_dim=1, name="k2")
            dev.synchronize()
        tasks = prof.snapshot().tasks
        k1, k2 = (next(t for t in tasks if t.name == k) for k in ("k1", "k2"))
        assert k2.start_ns == k1.end_ns + EL + D, through
        if through == "value":
            (w,) = [t for t in tasks if t.kind == "value_write"]
            assert w.start_ns == w.end_ns == k1.end_ns
        art.memset(word, 0)
        a.destroy(), b.destroy()
    word.free()


@sim_only
def test_a_value_wait_the_host_wrote_goes_on_from_the_write_not_after_the_next_call(dev):
    # (the host's next launch charged its own cost before looking at the word: the stream went
    # on host_launch_ns after the write)
    a, b = dev.create_stream(), dev.create_stream()
    word = art.malloc(8)
    art.memset(word, 0)
    dev.synchronize()
    with art.profile() as prof:
        b.wait_value(word, lambda w: w == 2, "the word to be 2")
        art.launch(art.kernels.noop, stream=b, cost=10e-6, block_dim=1, name="after")
        art.launch(art.kernels.noop, stream=a, cost=1e-6, block_dim=1, name="ref")
        word.numpy(np.uint64)[0] = 2  # the host writes the word as that launch returns
        art.launch(art.kernels.noop, stream=a, cost=1e-6, block_dim=1)  # its next call
        dev.synchronize()
    k, ref = (next(t for t in _tasks(prof, "kernel") if t.name == n) for n in ("after", "ref"))
    written = ref.start_ns - P.dispatch_ns  # (`ref` started its dispatch after the launch)
    assert k.start_ns == written + P.event_latency_ns + P.dispatch_ns
    word.free()
    a.destroy(), b.destroy()


@sim_only
def test_a_synchronous_copy_costs_the_host_what_an_asynchronous_one_it_waits_for_costs(dev, stream):
    # (memcpy of pageable memory charged only its transfer, memcpy_async of the same copy a
    # launch, its dispatch and the wait's return besides)
    n = 4 << 20
    buf = art.malloc(n)
    src = np.ones(n, np.uint8)
    stream.synchronize()
    xfer = int(P.host_link_latency_ns + n / P.pageable_bandwidth * 1e9)
    took = []
    for copy in (lambda: art.memcpy_async(buf, src, stream=stream), lambda: art.memcpy(buf, src),
                 lambda: art.memset(buf, 0)):
        t0 = dev.now_ns()
        copy()
        took.append(dev.now_ns() - t0)
    call = P.host_launch_ns + P.dispatch_ns + P.host_sync_ns
    assert took[0] == took[1] == call + xfer
    memset = int(n / P.memory_bandwidth_per_unit * 1e9)  # (one AI core's draw)
    assert took[2] == call + memset
    buf.free()


@each_build_once
def test_a_kernel_s_link_bytes_share_the_peer_link_with_a_copy_crossing_it():
    # (a kernel's link_bytes took fixed time: a peer copy over the same link beside it kept the
    # link's full rate, and two collectives over one ring ran as fast as one)
    r = _run_sim(textwrap.dedent("""
        import json, ascentrt as art
        from ascentrt.backends.base import Cost
        d0, d1 = art.Device(0), art.Device(1)
        d0.enable_peer_access(1); d1.enable_peer_access(0)
        n = 56_000_000
        art.set_device(0); a0 = art.malloc(n)
        art.set_device(1); b1 = art.malloc(n); s1, t1 = d1.create_stream(), d1.create_stream()
        d0.synchronize(); d1.synchronize()
        with art.profile() as prof:
            art.launch(art.kernels.noop, stream=t1, block_dim=1,
                       cost=Cost(flops=1.0, link_bytes=float(n), link_src=a0.addr))  # reads 0 -> 1
            art.memcpy_async(b1, a0, n, stream=s1)                                      # pulls 0 -> 1
            d1.synchronize()
        print(json.dumps([(t.start_ns, t.end_ns) for t in prof.snapshot().tasks
                          if t.kind in ("copy", "kernel")]))
        """), env_extra={"ASCENTRT_DEVICES": "2", "ASCENTRT_SIM_PRESET": "ascend910b"})
    assert r.returncode == 0, r.stderr
    (s_a, e_a), (s_b, e_b) = json.loads(r.stdout.strip().splitlines()[-1])
    both = 2 * 56_000_000 / P.peer_link_bandwidth * 1e9  # the link moves both
    assert both <= max(e_a, e_b) - min(s_a, s_b) <= both + 20_000


@each_build_once
def test_two_all_reduces_over_one_ring_take_twice_one_alone():
    # (the reduce-scatter steps, kernels with link_bytes, escaped the link sharing: 1.48x)
    r = _run_sim(textwrap.dedent("""
        import json, ascentrt as art
        from ascentrt import hccl
        R, N = 2, 64 << 20
        comms = [hccl.comm_init_all(list(range(R))) for _ in range(2)]
        devs = [art.Device(r) for r in range(R)]
        streams = [[d.create_stream() for d in devs] for _ in range(2)]
        bufs = [[art.malloc(N, device=r) for r in range(R)] for _ in range(2)]
        for d in devs:
            d.synchronize()
        F, S = hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM
        spans = []
        for how_many in (1, 2):
            t0 = devs[0].now_ns()
            for r in range(R):
                for i in range(how_many):
                    hccl.all_reduce(bufs[i][r], bufs[i][r], N // 4, F, S, comms[i][r], streams[i][r])
            for d in devs:
                d.synchronize()
            spans.append(devs[0].now_ns() - t0)
        print(json.dumps(spans))
        """), env_extra={"ASCENTRT_DEVICES": "2", "ASCENTRT_SIM_PRESET": "ascend910b",
                         "ASCENTRT_SIM_VARY": '{"copy_engines_d2d": 2}'})
    assert r.returncode == 0, r.stderr
    one, two = json.loads(r.stdout.strip().splitlines()[-1])
    assert 1.9 * one <= two <= 2.1 * one


@each_build_once
def test_each_device_has_a_host_link_of_its_own():
    # (every device's host copies shared one link per direction: two NPUs, each on its own
    # PCIe x16 link, moved their H2D copies at half its rate)
    r = _run_sim(textwrap.dedent("""
        import json, ascentrt as art
        n = 50_000_000
        hosts = [art.malloc_host(n) for _ in range(2)]
        bufs = [art.malloc(n, device=i) for i in range(2)]
        streams = [art.Device(i).create_stream() for i in range(2)]
        with art.profile() as prof:
            for i in range(2):
                art.memcpy_async(bufs[i], hosts[i], n, stream=streams[i])
            for s in streams:
                s.synchronize()
        print(json.dumps([t.duration_ns for t in prof.snapshot().tasks if t.kind == "copy"]))
        """), env_extra={"ASCENTRT_DEVICES": "2", "ASCENTRT_SIM_PRESET": "ascend910b"})
    assert r.returncode == 0, r.stderr
    alone = P.host_link_latency_ns + 50_000_000 / P.host_link_bandwidth * 1e9
    assert [abs(d - alone) <= 2 for d in json.loads(r.stdout.strip().splitlines()[-1])] == [True, True]


@each_build_once
def test_a_peer_copy_shares_the_memory_of_the_device_it_writes_into():
    # (its memory traffic was charged to the device running it only: a memory-bound kernel on
    # the device it wrote into kept the whole memory bandwidth)
    r = _run_sim(textwrap.dedent("""
        import json, ascentrt as art
        from ascentrt.backends.base import Cost
        d0, d1 = art.Device(0), art.Device(1)
        d0.enable_peer_access(1); d1.enable_peer_access(0)
        n = 56_000_000
        art.set_device(0); a0, s0 = art.malloc(n), d0.create_stream()
        art.set_device(1); b1, s1 = art.malloc(n), d1.create_stream()
        took = []
        for push in (False, True):
            with art.profile() as prof:
                art.launch(art.kernels.noop, stream=s1, cost=Cost(bytes=3.2e9))  # 2 ms of memory
                if push:
                    art.memcpy_async(b1, a0, n, stream=s0)  # pushed by device 0 into device 1
                d0.synchronize(); d1.synchronize()
            took += [t.duration_ns for t in prof.snapshot().tasks if t.kind == "kernel"]
        print(json.dumps(took))
        """), env_extra={"ASCENTRT_DEVICES": "2", "ASCENTRT_SIM_PRESET": "ascend910b"})
    assert r.returncode == 0, r.stderr
    alone, beside = json.loads(r.stdout.strip().splitlines()[-1])
    assert alone == 2_000_000
    # while the copy moves its bytes both run at r = 1 / (1 + peer / memory bandwidth) of their
    # rate: the kernel loses what the copy's bytes take of device 1's memory
    lost = 56_000_000 / P.memory_bandwidth * 1e9
    assert abs(beside - alone - lost) <= 2


@each_build_once
def test_a_held_back_copy_shares_the_link_only_once_it_has_started():
    # (a copy released by a wait shared the host link from its release on, event_latency_ns
    # before the start its profile shows: the copy beside it was slowed by bytes not yet moving)
    r = _run_sim(textwrap.dedent("""
        import json, ascentrt as art
        d = art.set_device(0)
        s1, s2, s3 = (d.create_stream() for _ in range(3))
        nA, nB = 25_000_000, 50_000_000
        hA, hB, dA, dB = art.malloc_host(nA), art.malloc_host(nB), art.malloc(nA), art.malloc(nB)
        d.synchronize()
        with art.profile() as prof:
            art.launch(art.kernels.noop, stream=s1, cost=100e-6, block_dim=1)
            s2.wait(s1.record())
            art.memcpy_async(dA, hA, stream=s2)   # held back: released 500 us after the kernel
            art.memcpy_async(dB, hB, stream=s3)   # over the same link, from the start
            d.synchronize()
        print(json.dumps([(t.start_ns, t.end_ns) for t in sorted(
            (t for t in prof.snapshot().tasks if t.kind == "copy"), key=lambda t: t.stream)]))
        """), env_extra={"ASCENTRT_SIM_PRESET": "ascend910b",
                         "ASCENTRT_SIM_VARY": '{"event_latency_ns": 500000, "copy_engines_h2d": 2}'})
    assert r.returncode == 0, r.stderr
    (a_start, a_end), (b_start, b_end) = json.loads(r.stdout.strip().splitlines()[-1])
    bw, lat, D = P.host_link_bandwidth, P.host_link_latency_ns, P.dispatch_ns
    # (each copy's bytes move from its dispatch on: its dispatch_ns comes after them)
    alone = (a_start - D) - (b_start - D)            # B's work alone, until A's begins
    both = 2 * (50_000_000 / bw * 1e9 - alone)       # B's rest at half the link
    assert b_end == round((a_start - D) + both + lat + D)
    assert a_end == round(b_end + (25_000_000 / bw * 1e9 - both / 2))


@sim_only
def test_a_host_idle_outside_the_runtime_after_writing_a_word_leaves_its_wait_met(dev):
    # (an idle host lets the device move on by itself: it jumped to the value wait's deadline
    # without looking at the word, and the wait timed out, 107019; once looked at, it jumped
    # to the met wait's deadline, left behind in the heap, 20 virtual s on)
    s = dev.create_stream()
    word = art.malloc(8)
    art.memset(word, 0)
    dev.synchronize()
    took = []
    for idle in (0.0, 0.5):
        word.numpy(np.int64)[0] = 0
        t0 = dev.now_ns()
        s.wait_value(word, lambda v: v >= 1, "the word to be 1", timeout=20.0)
        art.launch_host_func(lambda: None, stream=s)
        word.numpy(np.int64)[0] = 1
        time.sleep(idle)  # (past the simulator's 0.2 s of an unattended device)
        s.synchronize(timeout=10)
        took.append(dev.now_ns() - t0)
    assert took[0] == took[1] < 1e6
    word.free()
    s.destroy()


# ---- a deadlock or stuck-work check costs no virtual time ------------------------------------
# (the check interval, ASCENTRT_DEADLOCK_CHECK_S, and a teardown's budget are the runtime's own
# real time: each once moved the device clock, 0.25 s per check, 2 s per teardown)

def _notify_cycle(dev):
    s1, s2 = dev.create_stream(), dev.create_stream()
    n1, n2 = art.Notify(dev), art.Notify(dev)
    s1.wait_notify(n1), s1.record_notify(n2)
    s2.wait_notify(n2), s2.record_notify(n1)
    return s1, s2


@sim_only
@pytest.mark.parametrize("wait", ["stream", "device", "event", "destroyed notify"])
def test_a_deadlock_is_found_where_the_device_went_idle_not_a_check_interval_later(dev, wait):
    busy = dev.create_stream()
    art.launch(art.kernels.noop, stream=busy, cost=50e-6)  # the device idles after 50 us
    t0 = dev.now_ns()
    if wait == "destroyed notify":
        stuck = [dev.create_stream()]
        n = art.Notify(dev)
        stuck[0].wait_notify(n)
        n.destroy()
    else:
        stuck = list(_notify_cycle(dev))
    with pytest.raises(art.DeadlockError):
        if wait == "event":
            stuck[0].record().synchronize()
        elif wait == "device":
            dev.synchronize()
        else:
            stuck[0].synchronize()
    spent = dev.now_ns() - t0
    assert 50_000 <= spent < 100_000, spent  # the kernel's 50 us, not 250 ms more
    for s in stuck + [busy]:
        s.destroy(force=True)
    art.get_last_error()


# (a program of its own: under pytest, pytest-timeout's signal handler might record a notify, so
# a wait only the host could end is no deadlock there, and a teardown no stuck wait)
STUCK_ALONE = r"""
import warnings
import ascentrt as art
import ascentrt.acl as acl
dev = art.Device(0)

def spent(what, fn):
    t0 = dev.now_ns()
    try:
        fn()
    except art.AscentError as exc:
        what += " " + type(exc).__name__
    print(what, dev.now_ns() - t0)

def host_notify(destroy):
    s = dev.create_stream()
    art.launch(art.kernels.noop, stream=s, cost=50e-6)
    s.wait_notify(art.Notify(dev))
    try:
        s.destroy() if destroy else s.synchronize()
    finally:
        s.destroy(force=True)

spent("host-notify-sync", lambda: host_notify(False))
spent("host-notify-destroy", lambda: host_notify(True))

def hf_cycle():
    s1, s3 = dev.create_stream(), dev.create_stream()
    with art.profile() as prof:
        art.launch(art.kernels.noop, stream=s3, cost=100e-6, name="slow")
        art.launch_host_func(s1.synchronize, stream=s3)
        s1.wait(s3.record())
        art.launch(art.kernels.noop, stream=s1, cost=5e-6, name="after_wait")
        try:
            dev.synchronize(timeout=5.0)
        except art.TaskError:  # (the host function's DeadlockError, passed on)
            pass
    (hf,) = [t for t in prof.snapshot().tasks if t.kind == "host_func"]
    print("hf-duration", hf.duration_ns)

spent("hf-cycle", hf_cycle)
art.get_last_error()

def acl_teardown(how):
    acl.rt.set_device(0)
    ctx, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    notify, _ = acl.rt.create_notify(0)
    acl.rt.wait_and_reset_notify(notify, stream, 0)  # nothing will record it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "destroy_stream":
            t0 = dev.now_ns()
            assert acl.rt.destroy_stream(stream) == 507046  # stuck: left for the force
            print("acl-destroy_stream-alone", dev.now_ns() - t0)
            acl.rt.destroy_stream_force(stream)
        elif how == "destroy_context":
            acl.rt.destroy_context(ctx)
        acl.rt.reset_device(0)

for how in ("destroy_stream", "destroy_context", "reset_device"):
    spent("acl-" + how, lambda: acl_teardown(how))
"""


@each_build_once
def test_a_stuck_wait_or_teardown_with_no_one_to_act_spends_no_virtual_time():
    r = _run_sim(STUCK_ALONE)
    assert r.returncode == 0, r.stderr
    spent = {line.rsplit(" ", 1)[0]: int(line.rsplit(" ", 1)[1]) for line in r.stdout.splitlines()}
    # found where the device idled (after the 50 us kernel), not a check interval (0.25 s) later
    assert 50_000 <= spent["host-notify-sync DeadlockError"] < 100_000, spent
    assert 50_000 <= spent["host-notify-destroy DeadlockError"] < 100_000, spent
    # the host function synchronizing its own stream's later work fails at once: it lasts its
    # preset cost, and the program about its kernels' 105 us
    assert spent["hf-duration"] < 50_000, spent
    assert spent["hf-cycle"] < 1_000_000, spent
    # a teardown's budget for stuck work (2 s) is real time, not the device's
    assert spent["acl-destroy_stream-alone"] < 1_000_000, spent
    for how in ("destroy_stream", "destroy_context", "reset_device"):
        assert spent["acl-" + how] < 1_000_000, spent


@sim_only
def test_a_record_stamped_after_a_waits_release_is_done_only_from_its_stamp(dev, tmp_path):
    # A record right after a wait happens the release's latency after the wait let its stream
    # go; it was marked done as it ran, so a query a moment later said done before its time,
    # and a profile of it held a negative "done for" that its own loader refused.
    a, b = dev.create_stream(), dev.create_stream()
    first, then = dev.create_event(timing=True), dev.create_event(timing=True)
    with art.profile(tmp_path / "p"):
        art.launch(lambda: None, stream=a, cost=20e-6)
        first.record(a)
        b.wait(first)
        then.record(b)
        seen = []
        while not seen or not seen[-1][0]:
            done = then.query()
            seen.append((done, dev.now_ns(), then.timestamp_ns if done else 0))
        assert seen[-1][2] >= first.timestamp_ns + P.event_latency_ns
        assert all(now >= stamp for done, now, stamp in seen if done), seen
        assert len(seen) > 1  # (the first query came before its time)
        then.record(b)  # (again, and the host synchronizes on it instead)
        b.wait(first)
        then.record(b)
        then.synchronize()
        assert dev.now_ns() >= then.timestamp_ns + P.host_sync_ns
        b.wait(then)  # (a stream waiting on it after its time: the profile's "done for")
    art.profiler.load(tmp_path / "p")  # (its own checks: no negative "done for")
    a.destroy(), b.destroy()
