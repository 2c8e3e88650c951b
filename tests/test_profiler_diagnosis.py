"""Each diagnosis is produced by a small program written to cause it, and not by a good one."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ascentrt as art
from ascentrt.demo import run_pipeline
from ascentrt.profiler.trace import trace_events


def _spin_host(seconds: float) -> None:
    """Keep the host thread busy (preparing the next batch) for about `seconds`."""
    x = np.linspace(0.0, 1.0, 20_000)
    end = art.profiler.clock.now_ns() + int(seconds * 1e9)
    while art.profiler.clock.now_ns() < end:
        np.sin(x, out=x)


def _kernel_work(out):
    """A kernel of a few hundred microseconds."""
    np.sin(out, out=out)


def _noop(out):
    pass


def kinds(prof) -> set[str]:
    return {f.kind for f in prof.diagnose()}


def test_host_bound_program_is_diagnosed_as_starving_the_device(stream, buf):
    with art.profile() as prof:
        for _ in range(20):
            art.launch(_kernel_work, buf.view(np.float64), stream=stream)
            _spin_host(0.004)  # the host prepares each batch far slower than the device runs it
        stream.synchronize(timeout=30)
    found = [f for f in prof.diagnose() if f.kind == "host_bound"]
    assert found, prof.diagnose()
    assert float(found[0].evidence["device utilization"].rstrip("%")) < 50
    assert found[0].task_ids  # tasks that started after the longest idle stretches


def _long_kernel(out):
    """A kernel of a millisecond or more."""
    for _ in range(5):
        np.sin(out, out=out)


def test_queued_ahead_program_is_not_host_bound(stream, buf):
    with art.profile() as prof:
        for _ in range(25):
            art.launch(_long_kernel, buf.view(np.float64), stream=stream)
        stream.synchronize(timeout=30)
    assert "host_bound" not in kinds(prof)


def test_tiny_kernels_are_diagnosed_as_overhead_dominated(stream, buf):
    view = buf[:64].view(np.float64)
    with art.profile() as prof:
        for _ in range(300):
            art.launch(_noop, view, stream=stream)
        stream.synchronize(timeout=30)
    found = [f for f in prof.diagnose() if f.kind == "small_tasks"]
    assert found, prof.diagnose()
    assert found[0].evidence["tasks"] == 300


def test_large_kernels_are_not_small_tasks(stream, buf):
    with art.profile() as prof:
        for _ in range(110):
            art.launch(_kernel_work, buf.view(np.float64), stream=stream)
        stream.synchronize(timeout=30)
    assert "small_tasks" not in kinds(prof)


def test_a_stream_per_task_is_diagnosed_as_too_many_streams(dev, buf):
    view = buf[:64].view(np.float64)
    with art.profile() as prof:
        for _ in range(40):
            s = dev.create_stream()
            art.launch(_noop, view, stream=s)
            s.destroy()
    found = [f for f in prof.diagnose() if f.kind == "too_many_streams"]
    assert found, prof.diagnose()
    assert found[0].evidence["streams with work"] == 40
    assert found[0].evidence["stream create/destroy calls"] == 80


@pytest.mark.cpu_only
@pytest.mark.serial  # (diagnoses of runs timed in real time: alone, after the rest)
def test_streams_made_once_and_kept_are_said_to_be_kept_when_their_making_costs(dev, buf):
    # One stream per task, never destroyed: the cause counts what happened (once: "created and
    # destroyed", of streams that never were).
    view = buf[:64].view(np.float64)
    with art.profile() as prof:
        streams = []
        for _ in range(40):
            s = dev.create_stream()
            art.launch(_noop, view, stream=s)
            s.synchronize(timeout=30)  # (one at a time: churn, not crowding)
            streams.append(s)
    for s in streams:
        s.destroy()
    found = [f for f in prof.diagnose() if f.kind == "too_many_streams"]
    assert found, prof.diagnose()
    assert "40 stream(s) created (none destroyed)" in found[0].cause
    assert "destroyed for" not in found[0].cause
    assert f"tasks (device/stream/task): {dev.id}/" in str(found[0])  # (what 0/2/452 means, said)


@pytest.mark.cpu_only
@pytest.mark.serial  # (diagnoses of runs timed in real time: alone, after the rest)
def test_long_lived_streams_whose_making_is_free_on_sim_are_not_too_many():
    # (on sim a stream costs 0 ns to make and a small memset 0 ns to run: 0 >= 10% of 0 fired,
    # advising "27 executors" for memsets)
    code = textwrap.dedent("""
        import ascentrt as art
        dev = art.set_device(0)
        b = art.malloc(4096)
        with art.profile() as prof:
            streams = [dev.create_stream() for _ in range(10)]
            for s in streams:
                art.memset_async(b, 1, 64, stream=s)
            dev.synchronize()
        print(sorted(f.kind for f in prof.diagnose()))
        b.free()
    """)
    env = dict(os.environ, ASCENTRT_BACKEND="sim")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "too_many_streams" not in r.stdout


def test_the_streams_advised_count_what_can_run_at_once_not_every_executor():
    from ascentrt.profiler.analysis import _useful_streams
    from ascentrt.profiler.data import DeviceInfo, TaskRecord
    info = DeviceInfo(0, "sim0", compute_units=24, copy_engines=3, host_func_threads=1, capacity=1 << 30)
    whole = [TaskRecord(0, s, 1, "kernel", "k", 0, 0, 0, 10, 0, units=24) for s in range(10)]
    one_core = [TaskRecord(0, s, 1, "memset", "m", 64, 0, 0, 10, 0) for s in range(10)]
    copies = [TaskRecord(0, s, 2, "copy", "c", 64, 0, 0, 10, 0) for s in range(10)]
    assert _useful_streams(whole, info) == 1  # a kernel on every core: one at a time
    assert _useful_streams(one_core, info) == 24
    assert _useful_streams(whole + copies, info) == 1 + 3


def _waves_profile(block_dim, tail_ns, runs=50, duration=1_920_000):
    from ascentrt.profiler.data import DeviceInfo, ProfileData, TaskRecord
    tasks = [TaskRecord(0, 1, i, "kernel", "k", 0, i * duration, i * duration, (i + 1) * duration, 0,
                        units=24, block_dim=block_dim, tail_ns=tail_ns) for i in range(runs)]
    return ProfileData(duration_ns=runs * duration, tasks=tasks, devices=[DeviceInfo(
        0, "sim0", compute_units=24, copy_engines=3, host_func_threads=1, capacity=1 << 30,
        backend="sim")])


def test_a_block_dim_that_leaves_a_partial_last_wave_is_diagnosed():
    from ascentrt.profiler.analysis import diagnose
    from ascentrt.profiler.metrics import metrics
    # 25 blocks on 24 cores: two waves of 960 us, the 2nd holding 1 core while 23 idle
    prof = _waves_profile(25, 960_000)
    (f,) = [f for f in diagnose(prof) if f.kind == "tail_wave"]
    assert "25 blocks on 24 cores: 2 waves, the 2nd 1/24 full" in f.title
    assert f.impact_ns == 50 * 960_000 * 23 // 24  # what full waves would save: 46 ms
    assert "multiple of the 24 cores (48 blocks" in f.advice and "at most 24" in f.advice
    assert f.evidence["lost to idle cores"] == "46.00 ms" and f.task_ids[0] == "0/1/0"
    # the cores' unit-time: 24 for the 1st wave, 1 for the 2nd
    assert metrics(prof)["executors"]["0/compute"]["busy_ns"] == 50 * 960_000 * 25
    # full waves (48 blocks), or a tail too short to matter: nothing to say
    assert not [f for f in diagnose(_waves_profile(48, 0)) if f.kind == "tail_wave"]
    assert not [f for f in diagnose(_waves_profile(25, 960_000, runs=1, duration=100_000_000))
                if f.kind == "tail_wave"]


def test_profiles_without_block_dims_load_and_cpu_kernels_have_no_waves(stream):
    from ascentrt.profiler.data import ProfileData
    with art.profile() as prof:
        art.launch(lambda: None, stream=stream, cost=1e-4, block_dim=25)
        stream.synchronize(timeout=30)
    data = json.loads(json.dumps(prof.profile.to_json()))
    (k,) = [t for t in ProfileData.from_json(data).tasks if t.kind == "kernel"]
    assert k.block_dim == 25  # what it asked for, recorded on every backend
    if stream.device.properties.backend == "cpu":  # (one compute thread runs it: no waves)
        assert k.tail_ns == 0
    table = data["tasks"]
    for column in ("tail_ns", "block_dim"):  # (a profile written before these columns)
        at = table["columns"].index(column)
        table["columns"].pop(at)
        for row in table["rows"]:
            row.pop(at)
    (k,) = [t for t in ProfileData.from_json(data).tasks if t.kind == "kernel"]
    assert (k.block_dim, k.tail_ns, k.unit_ns) == (0, 0, k.duration_ns * k.units)


def test_many_streams_at_once_with_little_work_are_diagnosed(dev, buf):
    view = buf[:64].view(np.float64)
    streams = [dev.create_stream() for _ in range(24)]
    gate = __import__("threading").Event()
    with art.profile() as prof:
        art.launch_host_func(gate.wait, 10, stream=streams[0])
        opened = streams[0].record()  # completes once the host opens the gate ...
        for s in streams[1:]:
            s.wait(opened)
            art.launch(_noop, view, stream=s)  # ... so every stream holds its task until then
        gate.set()
        for s in streams:
            s.synchronize(timeout=30)
    for s in streams:
        s.destroy()
    found = [f for f in prof.diagnose() if f.kind == "too_many_streams"]
    assert found, prof.diagnose()
    assert found[0].evidence["most at once"] > 8


def test_few_reused_streams_are_not_too_many(dev, buf):
    view = buf[:64].view(np.float64)
    streams = [dev.create_stream() for _ in range(3)]
    with art.profile() as prof:
        for i in range(40):
            art.launch(_noop, view, stream=streams[i % 3])
        for s in streams:
            s.synchronize(timeout=30)
    for s in streams:
        s.destroy()
    assert "too_many_streams" not in kinds(prof)


def test_device_sync_every_iteration_is_diagnosed(stream, buf):
    with art.profile() as prof:
        for _ in range(8):
            art.launch(_kernel_work, buf.view(np.float64), stream=stream)
            art.synchronize(timeout=30)
    found = [f for f in prof.diagnose() if f.kind == "device_sync_in_loop"]
    assert found, prof.diagnose()
    assert found[0].evidence["device synchronizations"] == 8


def test_stream_sync_every_iteration_is_diagnosed(stream, buf):
    with art.profile() as prof:
        for _ in range(8):
            art.launch(_kernel_work, buf.view(np.float64), stream=stream)
            stream.synchronize(timeout=30)
    found = [f for f in prof.diagnose() if f.kind == "stream_sync_in_loop"]
    assert found, prof.diagnose()
    assert found[0].evidence["synchronizations"] == 8
    assert f"stream {stream.id}" in found[0].title
    assert found[0].impact_ns > 0


def test_an_event_synchronized_every_iteration_is_diagnosed(stream, buf):
    with art.profile() as prof:
        for _ in range(8):
            art.launch(_kernel_work, buf.view(np.float64), stream=stream)
            stream.record().synchronize(timeout=30)
    found = [f for f in prof.diagnose() if f.kind == "stream_sync_in_loop"]
    assert found and found[0].title.startswith("Event synchronization"), prof.diagnose()


def test_a_stream_sync_while_another_stream_keeps_the_device_busy_costs_nothing(dev, stream, buf):
    # (the synchronized stream waits, but the device never runs dry: no idle time to report)
    other = dev.create_stream()
    view = buf[:64].view(np.float64)
    with art.profile() as prof:
        art.launch(_spin_host, 0.3, stream=other)
        for _ in range(8):
            art.launch(_noop, view, stream=stream)
            stream.synchronize(timeout=30)
        other.synchronize(timeout=30)
    other.destroy()
    assert "stream_sync_in_loop" not in kinds(prof)


def test_one_sync_at_the_end_is_not_a_sync_in_the_loop(stream, buf):
    with art.profile() as prof:
        for _ in range(8):
            art.launch(_kernel_work, buf.view(np.float64), stream=stream)
        art.synchronize(timeout=30)
        stream.synchronize(timeout=30)
    assert "device_sync_in_loop" not in kinds(prof)
    assert "stream_sync_in_loop" not in kinds(prof)


def test_syncing_long_completed_events_is_diagnosed(stream, buf):
    with art.profile() as prof:
        events = []
        for _ in range(12):
            art.launch(_noop, buf.view(np.float64), stream=stream)
            events.append(stream.record())
        stream.synchronize(timeout=30)
        _spin_host(0.006)  # long after the work completed ...
        for ev in events:
            ev.synchronize(timeout=30)  # ... the host still waits on each event
    found = [f for f in prof.diagnose() if f.kind == "needless_sync"]
    assert found, prof.diagnose()
    assert found[0].evidence["needless synchronizations"] == 12
    assert found[0].evidence["on"] == "events (12)"  # (words, once a Python dict: {'event': 12})


def test_waiting_on_own_event_is_diagnosed(stream, buf):
    with art.profile() as prof:
        art.launch(_kernel_work, buf.view(np.float64), stream=stream)
        stream.wait(stream.record())
        stream.synchronize(timeout=30)
    assert "needless_wait" in kinds(prof)


def test_single_stream_pipeline_does_not_overlap_copies_and_compute(dev):
    run_pipeline(1, 2, elements=1 << 19)  # warm-up: first-touch page faults
    with art.profile() as prof:
        run_pipeline(1, 8, elements=1 << 20)
    found = [f for f in prof.diagnose() if f.kind == "no_overlap"]
    assert found, prof.diagnose()
    assert found[0].evidence["copy streams"] == found[0].evidence["compute streams"]


def test_copies_beside_memsets_only_are_not_said_to_be_beside_kernels(dev):
    # (a program of memsets and copies on one stream was told its "20 kernels" did not overlap)
    s = dev.create_stream()
    n = 8 << 20
    h, d = art.malloc_host(n), art.malloc(n)
    with art.profile() as prof:
        for i in range(8):
            art.memset_async(d, i, stream=s)
            art.memcpy_async(h, d, stream=s)
        s.synchronize()
    found = [f for f in prof.diagnose() if f.kind == "no_overlap"]
    assert found, prof.diagnose()
    assert "8 fills (memsets)" in found[0].cause and "kernel" not in found[0].cause
    h.free()
    d.free()
    s.destroy()


def _well_behaved_pipeline(dev, batches=6, elements=1 << 19):
    """Inputs staged in pinned memory up front, every batch queued ahead on 3 streams with
    events between stages, one synchronization at the end, everything freed."""
    nbytes = elements * 4
    hosts = [art.malloc_host(nbytes) for _ in range(2 * batches)]
    devs = [art.malloc(nbytes) for _ in range(2 * batches)]
    for h in hosts[:batches]:
        h.numpy(np.float32)[:] = 1.5
    s_in, s_comp, s_out = (dev.create_stream() for _ in range(3))
    with art.profile() as prof:
        for b in range(batches):
            src, dst = devs[b], devs[batches + b]
            art.memcpy_async(src, hosts[b], stream=s_in)
            s_comp.wait(s_in.record())
            for _ in range(3):
                art.launch(_kernel_work, src.view(np.float32), stream=s_comp)
            art.launch(art.kernels.scale, dst.view(np.float32), src.view(np.float32), 2.0,
                       stream=s_comp)
            s_out.wait(s_comp.record())
            art.memcpy_async(hosts[batches + b], dst, stream=s_out)
        s_out.synchronize(timeout=60)
        for s in (s_in, s_comp, s_out):
            s.destroy()
        for x in hosts + devs:
            x.free()
    return prof


def test_well_behaved_pipeline_has_no_findings(dev):
    _well_behaved_pipeline(dev, 2)  # warm-up: first-touch page faults
    found = _well_behaved_pipeline(dev).diagnose()
    # (on cpu, a machine busier than its cores keeps executors from the GIL: a dispatch-bound
    # finding is then true of that run; a quiet run must have none, so a busy one runs again)
    for _ in range(2):
        if not found or os.getloadavg()[0] <= (os.cpu_count() or 1) \
                or {f.kind for f in found} - {"dispatch_bound", "host_bound"}:
            break
        found = _well_behaved_pipeline(dev).diagnose()
    assert found == []


def test_unfreed_buffer_is_diagnosed_with_its_allocation_site(dev):
    with art.profile() as prof:
        leaked = art.malloc(4096)
        kept = art.malloc(4096)
        kept.free()
    leaked.free()
    found = [f for f in prof.diagnose() if f.kind == "never_freed"]
    assert found and found[0].evidence["buffers"] == 1
    assert "test_profiler_diagnosis.py" in found[0].evidence["allocated at"]


MEMORY_PROGRAM = textwrap.dedent("""
    import json, sys
    import ascentrt as art
    MiB = 1 << 20
    with art.profile() as prof:
        if sys.argv[1] == "peak":
            bufs = [art.malloc(15 * MiB) for _ in range(4)]   # 60 of 64 MiB
            for b in bufs:
                b.free()
        elif sys.argv[1] == "fragment":
            bufs = [art.malloc(4 * MiB) for _ in range(15)]
            for b in bufs[::2]:
                b.free()                                     # holes of 4 MiB
            try:
                art.malloc(16 * MiB)                         # 32 MiB free, none of it in one piece
            except art.OutOfMemoryError:
                pass
            for b in bufs[1::2]:
                b.free()
        elif sys.argv[1] == "cache":
            pool = art.MemPool(release_threshold=None)
            bufs = [pool.malloc_async(10 * MiB) for _ in range(4)]  # 40 of 64 MiB, all freed:
            for b in bufs:
                b.free()                     # the MemPool keeps them, its own
            try:
                art.malloc(30 * MiB)         # 24 MiB left beside that cache
            except art.OutOfMemoryError:
                pass
        elif sys.argv[1] == "cache_at_end":
            bufs = [art.malloc(10 * MiB) for _ in range(4)]  # 40 of 64 MiB, then all freed:
            for b in bufs:
                b.free()                                     # the pool keeps them cached
        else:
            bufs = [art.malloc(4 * MiB) for _ in range(4)]
            for b in bufs:
                b.free()
    print(json.dumps(sorted({f.kind for f in prof.diagnose()})))
""")


def _memory_run(mode: str, release_threshold: str = "0") -> list[str]:
    env = dict(os.environ, ASCENTRT_DEVICE_MEMORY="64M",
               ASCENTRT_MEM_POOL_RELEASE_THRESHOLD=release_threshold)
    out = subprocess.run([sys.executable, "-c", MEMORY_PROGRAM, mode], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_memory_near_capacity_is_diagnosed_as_peak():
    assert "memory_peak" in _memory_run("peak")


def test_holes_between_buffers_are_diagnosed_as_fragmentation():
    assert "fragmentation" in _memory_run("fragment")


def test_pool_caching_half_the_device_is_diagnosed_when_it_fails_a_request():
    assert "pool_cache" in _memory_run("cache", release_threshold="none")


def test_a_cache_that_nothing_needed_afterwards_is_no_finding():
    # (every run that frees all it allocated ends with a cache: that is what a pool is for)
    assert "pool_cache" not in _memory_run("cache_at_end", release_threshold="none")


def test_modest_memory_use_has_no_memory_findings():
    assert _memory_run("modest", release_threshold="none") == []


def test_a_failed_task_is_named_in_the_diagnosis_summary_report_and_trace(tmp_path):
    s = art.Device(0).create_stream()

    def broken_kernel():
        raise ValueError("bad shape 3x4")
    with art.profile(tmp_path / "prof") as prof:
        art.launch(art.kernels.noop, stream=s)
        art.launch(broken_kernel, stream=s)
        with pytest.raises(art.TaskError):
            s.synchronize(timeout=10)
    first = prof.diagnose()[0]
    assert first.kind == "failed_tasks"
    assert "broken_kernel" in first.cause and "ValueError: bad shape 3x4" in first.cause
    assert first.task_ids == [f"0/{s.id}/2"]
    for name in ("summary.txt", "report.html", "trace.json"):
        assert "bad shape 3x4" in (tmp_path / "prof" / name).read_text(), name
    s.destroy()


# ---- work that never finished ------------------------------------------------------------------
# (a hung pipeline had no trace of its blocked stream and its diagnosis read "no problems
# found"; after a deadlock, the record that force-destroying a stream dropped showed as having
# run and released the other stream)

def test_a_stream_blocked_to_the_end_is_shown_and_diagnosed(dev):
    a, b = dev.create_stream(), dev.create_stream()
    right, wrong = art.Notify(dev), art.Notify(dev)
    try:
        with art.profile() as prof:
            art.launch(lambda: None, stream=a, name="producer")
            a.record_notify(wrong)  # (the bug: the consumer waits on `right`)
            b.wait_notify(right)
            art.launch(lambda: None, stream=b, name="consumer")
            a.synchronize(timeout=10)
            with pytest.raises(art.AscentError) as err:
                b.synchronize(timeout=0.3)
        assert err.value.code == art.ErrorCode.RT_STREAM_SYNC_TIMEOUT
        data = prof.snapshot()
        stuck = [t for t in data.tasks if t.fate == "unfinished"]
        assert [(t.stream, t.kind, t.name) for t in stuck] == [(b.id, "notify_wait", "notify_wait"),
                                                               (b.id, "kernel", "consumer")]
        assert stuck[0].end_ns - stuck[0].start_ns >= 0.25e9
        assert stuck[1].start_ns == stuck[1].end_ns  # the consumer never started
        first = prof.diagnose()[0]
        assert first.kind == "never_finished" and first.task_ids == [f"0/{b.id}/{stuck[0].task_id}"]
        assert "notify_wait" in first.cause and "timed out (507046)" in first.cause
        assert "1 task(s) queued behind it never started" in first.cause
        names = {e["name"] for e in trace_events(data)}
        assert "notify_wait (unfinished)" in names
    finally:
        right.record(a)  # (lets the consumer go)
        b.synchronize(timeout=10)
        a.destroy(), b.destroy()


def test_a_deadlock_shows_the_dropped_wait_and_the_record_that_never_ran(dev):
    a, b = dev.create_stream(), dev.create_stream()
    ab, ba = art.Notify(dev), art.Notify(dev)
    with art.profile() as prof:
        a.wait_notify(ba)
        a.record_notify(ab)
        b.wait_notify(ab)
        b.record_notify(ba)
        with pytest.raises(art.DeadlockError):
            dev.synchronize(timeout=30)
        a.destroy(force=True)
        b.destroy(force=True)
    by_key = {(t.stream, t.kind): t for t in prof.snapshot().tasks}
    assert by_key[a.id, "notify_wait"].fate == "dropped"   # cut short by the destroy
    assert by_key[a.id, "notify_record"].fate == "dropped"  # never ran
    released = by_key[b.id, "notify_wait"].released_by
    assert released == (0, a.id, by_key[a.id, "notify_record"].task_id)
    first = prof.diagnose()[0]
    assert first.kind == "never_finished" and "found a deadlock (507950)" in first.cause


PING_PONG = """
import ascentrt as art
dev = art.set_device(0)
cp, kc = dev.create_stream(), dev.create_stream()
host, buf = art.malloc_host(8_000_000), art.malloc(8_000_000)
with art.profile(None) as prof:
    done = None
    for i in range(40):  # one buffer: each copy waits for the kernel before it, and back
        if done is not None:
            cp.wait(done)
        art.memcpy_async(buf, host, stream=cp)
        kc.wait(cp.record())
        art.launch(lambda: None, stream=kc, cost=150e-6)
        done = kc.record()
    dev.synchronize()
found = [f for f in prof.diagnose() if f.kind == "no_overlap"]
print(len(found), "each copy waits for the kernel before it" in found[0].cause if found else "")
buf.free(); host.free()
"""


def test_copies_and_kernels_on_two_streams_that_wait_on_each_other_in_turn_are_found():
    # (one buffer ordered by events both ways: 0 overlap, yet no finding; the same work on
    # one stream got one)
    from subprocess_util import run_program
    out = run_program(PING_PONG, env={"ASCENTRT_BACKEND": "sim"}, timeout=60)
    assert out.split() == ["1", "True"]


def test_a_submit_held_by_a_full_queue_is_waiting_not_submitting_cost():
    # (150 kernels of 10 us on a 1-deep queue: each launch waited ~18 us for room and was read
    # as a 21 us submit, "tasks too small: submitting one costs 21.0 us" with 3 us launches)
    from subprocess_util import run_program
    out = run_program('''
        import json, ascentrt as art
        s = art.Stream()
        with art.profile(None) as prof:
            for _ in range(150):
                art.launch(lambda: None, stream=s, cost=10e-6, block_dim=1)
            s.synchronize()
        from ascentrt.profiler.metrics import metrics
        calls = prof.profile.api_calls
        full = [c for c in calls if c.name == "waiting for room in a full stream queue"]
        api = metrics(prof.profile)["api"]  # (calls the program made, each its own time)
        print(json.dumps([len(full) > 100, sorted({f.kind for f in prof.diagnose()}),
                          api["launch"]["count"], api["launch"]["mean_ns"], sorted(api)]))
    ''', env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_VARY": '{"queue_depth": 1}'}, timeout=60)
    waited, kinds, launches, mean_ns, names = json.loads(out.strip().splitlines()[-1])
    assert waited and "small_tasks" not in kinds and "host_bound" not in kinds
    assert launches == 150 and mean_ns <= 5000
    assert names == ["Stream.synchronize", "launch", "waiting for room in a full stream queue"]


def test_time_blocked_on_a_full_queue_has_its_row_and_a_finding_when_it_dominates(tmp_path):
    # (the host blocked 35.9 of 40 ms in full-queue waits: the Host API table and
    # api_statistic.csv summed to 4.1 ms, and the diagnosis found nothing)
    import csv
    from subprocess_util import run_program
    out = run_program(f'''
        import json, ascentrt as art
        s = art.Stream()
        with art.profile({str(tmp_path / "p")!r}) as prof:
            for _ in range(40):
                art.launch(lambda: None, stream=s, cost=1e-3, block_dim=1)
            s.synchronize()
        print(json.dumps([[f.kind, f.title, f.evidence] for f in prof.diagnose()]))
    ''', env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_VARY": '{"queue_depth": 4}'}, timeout=60)
    [[kind, title, evidence]] = json.loads(out.strip().splitlines()[-1])
    assert kind == "full_queue" and "blocked on the full queue of stream" in title
    assert evidence["blocked submits"] == 36
    rows = {r["api"]: r for r in csv.DictReader(open(tmp_path / "p" / "api_statistic.csv"))}
    wait = rows["waiting for room in a full stream queue"]
    assert wait["count"] == "36" and 35_000 < float(wait["total_us"]) < 36_000
    assert float(rows["launch"]["total_us"]) < 200  # (the launches' own time, as before)
    assert "waiting for room in a full stream queue  36" in open(tmp_path / "p" / "summary.txt").read()


def test_a_device_starved_by_another_devices_full_queue_is_named_with_that_queue():
    # (one host thread feeds two devices; device 0's 2-deep queue holds it ~490 us per launch
    # while device 1 idles: "host-bound, launch first: fuse kernels" once, then nothing)
    from subprocess_util import run_program
    out = run_program('''
        import json, ascentrt as art
        a, b = art.Device(0).create_stream(), art.Device(1).create_stream()
        with art.profile(None) as prof:
            for _ in range(40):
                art.launch(lambda: None, stream=a, cost=500e-6, block_dim=1)
                art.launch(lambda: None, stream=b, cost=20e-6, block_dim=1)
            art.synchronize()
        print(json.dumps([[f.kind, f.title] for f in prof.diagnose()]))
    ''', env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_DEVICES": "2",
                "ASCENTRT_SIM_VARY": '{"queue_depth": 2}'}, timeout=60)
    findings = json.loads(out.strip().splitlines()[-1])
    assert [k for k, _ in findings] == ["held_by_full_queue"]
    assert findings[0][1].startswith("Device 1 is starved") and "of device 0" in findings[0][1]


def test_a_warm_up_run_of_the_pipeline_is_no_instance_of_its_range(dev):
    # (examples/pipeline.py said only its timed part was the range `pipeline`; its warm-up was a
    # third instance, page faults and all)
    with art.profile() as prof:
        run_pipeline(1, 2, elements=1 << 16, warm_up=True)
        run_pipeline(1, 2, elements=1 << 16)
    assert [r.name for r in prof.snapshot().ranges] == ["pipeline"]


@pytest.mark.cpu_only
@pytest.mark.serial  # (diagnoses of runs timed in real time: alone, after the rest)
def test_a_sync_in_the_loop_that_never_blocked_is_needless_not_draining():
    # (stream t's work ended long before each t.synchronize(): the device ran dry in s's sync
    # before it, yet t's syncs were "inside the loop" too, claiming the same idle)
    from subprocess_util import run_program
    out = run_program("""
        import ascentrt as art
        dev = art.set_device(0)
        s, t = dev.create_stream(), dev.create_stream()
        with art.profile() as prof:
            for i in range(30):
                art.launch(art.kernels.noop, stream=s, cost=200e-6, name="k")
            art.launch(art.kernels.noop, stream=t, cost=10e-6, name="short")
            for i in range(15):
                art.launch(art.kernels.noop, stream=s, cost=1e-3, name="long")
                s.synchronize(); t.synchronize()
            dev.synchronize()
        for f in prof.diagnose():
            print(f.kind, "|", f.title, "|", f.evidence.get("needless synchronizations"))
        print("s", s.id, "t", t.id)
    """, env={"ASCENTRT_BACKEND": "sim"}, timeout=60)
    lines = out.splitlines()
    s_id, t_id = lines[-1].split()[1], lines[-1].split()[3]
    loops = [line for line in lines if line.startswith("stream_sync_in_loop")]
    assert loops == [f"stream_sync_in_loop | Synchronization of stream {s_id} inside the loop | None"]
    assert any(line.startswith("needless_sync") and line.endswith("| 15") for line in lines), out
    assert t_id != s_id


@pytest.mark.cpu_only
@pytest.mark.serial  # (diagnoses of runs timed in real time: alone, after the rest)
def test_a_double_buffered_pipeline_synced_every_batch_is_the_sync_not_one_buffer():
    # (three streams H2D / compute / D2H, two buffers, dev.synchronize() after each batch: the
    # D2H stream's wait for its kernel and the H2D waits on long-done kernels counted as "each
    # copy waits for the kernel before it ... one buffer, used in turn", given first)
    from subprocess_util import run_program
    out = run_program("""
        import ascentrt as art
        dev = art.set_device(0)
        h2d, comp, d2h = dev.create_stream(), dev.create_stream(), dev.create_stream()
        N = 8 << 20
        hin = [art.malloc_host(N) for _ in range(2)]; hout = [art.malloc_host(N) for _ in range(2)]
        din = [art.malloc(N) for _ in range(2)]; dout = [art.malloc(N) for _ in range(2)]
        freed = [None, None]
        with art.profile(None) as prof:
            for i in range(12):
                j = i % 2
                if freed[j] is not None:
                    h2d.wait(freed[j])
                art.memcpy_async(din[j], hin[j], stream=h2d)
                comp.wait(h2d.record())
                art.launch(art.kernels.noop, stream=comp, cost=170e-6, block_dim=24)
                freed[j] = comp.record()
                d2h.wait(freed[j])
                art.memcpy_async(hout[j], dout[j], stream=d2h)
                dev.synchronize()
        print(" ".join(f.kind for f in prof.diagnose()))
        for b in hin + hout + din + dout: b.free()
    """, env={"ASCENTRT_BACKEND": "sim"}, timeout=60)
    kinds = out.split()
    assert kinds[0] == "device_sync_in_loop" and "no_overlap" not in kinds, kinds


@pytest.mark.cpu_only
@pytest.mark.serial  # (diagnoses of runs timed in real time: alone, after the rest)
def test_pageable_copies_that_make_the_run_are_copy_bound_with_the_pinned_saving():
    # (8 x 16 MiB from a numpy array, each staged in its memcpy_async, then a 300 us kernel on
    # another stream: 97% of the run in copies, "Diagnosis: no problems found")
    from subprocess_util import run_program
    out = run_program("""
        import numpy as np, ascentrt as art
        dev = art.set_device(0)
        cs, ks = dev.create_stream(), dev.create_stream()
        src = np.ones(16 << 20, np.uint8)
        d = [art.malloc(16 << 20), art.malloc(16 << 20)]
        with art.profile(None) as prof:
            for i in range(8):
                art.memcpy_async(d[i % 2], src, stream=cs)
                ks.wait(cs.record())
                art.launch(art.kernels.noop, stream=ks, cost=300e-6, name="compute")
            dev.synchronize()
        found = prof.diagnose()
        print(" ".join(f.kind for f in found))
        print(found[0].evidence.get("copies from pageable host memory"))
        print(found[0].evidence.get("pinned memory could save about"))
        for b in d: b.free()
    """, env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend910b"}, timeout=60)
    kinds, pageable, saving = out.splitlines()
    assert kinds.split()[0] == "copy_bound", out
    assert pageable.startswith("8 (")
    assert float(saving.split()[0]) > 5  # ms: 13.4 ms at 10 GB/s staged, ~2.7 at 50 GB/s pinned


def test_a_device_side_wait_that_timed_out_is_a_failed_task_not_a_host_wait_that_gave_up(dev):
    # (the synchronize that passed the wait's 107019 on was said to have timed out itself, and
    # the wait was in no finding)
    s = dev.create_stream()
    word = art.malloc(8)
    art.memset(word, 0)
    with art.profile() as prof:
        s.wait_value(word, lambda w: w == 1, "the word to be 1", timeout=0.05)
        with pytest.raises(art.AscentError):
            s.synchronize(10)
    found = {f.kind: f for f in prof.diagnose()}
    assert "never_finished" not in found, found
    assert "value_wait" in found["failed_tasks"].cause and "107019" in found["failed_tasks"].cause
    s.destroy()
    word.free()


def test_a_snapshot_of_a_deadlocked_run_names_the_streams_stuck_at_their_waits():
    # (snapshot() and a running session's diagnose() said no stream was stopped; only stop()
    # recorded where each stream was held up)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import json, ascentrt as art
        dev = art.set_device(0)
        s1, s2 = dev.create_stream(), dev.create_stream()
        n1, n2 = art.Notify(dev), art.Notify(dev)
        sess = art.profile(); sess.start()
        s1.wait_notify(n1); s1.record_notify(n2)
        s2.wait_notify(n2); s2.record_notify(n1)
        try:
            dev.synchronize(timeout=5)
        except art.AscentError:
            pass
        snap = sess.snapshot()
        found = {f.kind: f.evidence for f in sess.diagnose()}
        stuck = sorted((t.stream, t.kind, t.fate) for t in snap.tasks)
        after = {f.kind: f.evidence for f in sess.stop().diagnose()}
        print(json.dumps({"stuck": stuck, "snapshot": found, "stop": after}))
        for s in (s1, s2):
            s.destroy(force=True)
    """)], env=dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_LEAK_CHECK="off"),
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    # (each stream stopped at its wait; the record queued behind it never started)
    assert sorted(k for _, k, f in got["stuck"] if f == "unfinished") == \
        ["notify_record", "notify_record", "notify_wait", "notify_wait"]
    (kind,) = [k for k, ev in got["stop"].items() if ev.get("of them at a wait") == 2]
    assert got["snapshot"][kind]["streams stopped"] == 2
    assert got["snapshot"][kind]["of them at a wait"] == 2


def test_an_unfinished_non_blocking_host_function_is_on_its_programs_stream(dev):
    # (it was reported on the hidden stream that ran it, with that stream's task id)
    import threading
    s = dev.create_stream()
    go = threading.Event()
    with art.profile() as sess:
        tid = art.launch_host_func(lambda: go.wait(10), stream=s, blocking=False)
        s.synchronize(timeout=10)
        for _ in range(1000):  # (until it runs: the detached stream has taken it)
            if any(x._running is not None for x in dev._dq.streams.values() if x is not s):
                break
            threading.Event().wait(0.005)
        prof = sess.stop()
    go.set()
    dev.synchronize(timeout=10)
    (t,) = [t for t in prof.tasks if t.fate == "unfinished"]
    assert (t.stream, t.task_id, t.kind) == (s.id, tid, "host_func_nonblocking")
    s.destroy()


@pytest.mark.cpu_only  # (a kernel that blocks on a host gate)
@pytest.mark.serial  # (diagnoses of runs timed in real time: alone, after the rest)
def test_a_profile_that_ends_lists_every_task_queued_behind_an_unfinished_one(dev, tmp_path):
    # (only each stream's head was recorded: the tasks queued behind it, and those its
    # executor had taken in the same batch, were missing from the counts and CSVs)
    import threading
    a, b = dev.create_stream(), dev.create_stream()
    gate, started = threading.Event(), threading.Event()

    def held():
        started.set()
        gate.wait(10)
    try:
        with art.profile(str(tmp_path / "p")) as sess:
            art.launch_host_func(held, stream=a)
            for _ in range(3):
                art.launch(lambda: None, stream=a, name="after_the_host_function")
            art.launch(lambda: (started.set(), gate.wait(10)), stream=b, name="held_kernel")
            for _ in range(3):  # (taken with it in one batch by its executor)
                art.launch(lambda: None, stream=b, name="in_its_batch")
            assert started.wait(10)
            threading.Event().wait(0.05)
            prof = sess.stop()
    finally:
        gate.set()
        dev.synchronize(timeout=10)
    names = sorted((t.stream, t.name, t.fate) for t in prof.tasks)
    assert names == sorted([(a.id, "held", "unfinished")] + [(a.id, "after_the_host_function", "unfinished")] * 3
                           + [(b.id, "held_kernel", "unfinished")] + [(b.id, "in_its_batch", "unfinished")] * 3)
    assert sum(t.start_ns == t.end_ns for t in prof.tasks) == 6  # the queued ones never started
    rows = (tmp_path / "p" / "task_time.csv").read_text().splitlines()
    assert len(rows) == 1 + 8
    a.destroy(), b.destroy()


@pytest.mark.cpu_only  # (a host function that blocks on a host gate)
@pytest.mark.serial  # (diagnoses of runs timed in real time: alone, after the rest)
def test_tasks_that_never_started_are_no_work_to_the_analyses(dev):
    # (queued behind an unfinished host function when the profile ended, 200 kernels of no
    # duration made a "too-small tasks" finding, and counted as queued and as copied bytes)
    import threading
    from ascentrt.profiler.metrics import metrics
    s = dev.create_stream()
    gate, started = threading.Event(), threading.Event()
    buf = art.malloc(1 << 20)
    host = art.malloc_host(1 << 20)
    try:
        with art.profile() as sess:
            art.launch_host_func(lambda: (started.set(), gate.wait(10)), stream=s)
            for _ in range(200):
                art.launch(lambda: None, stream=s, name="queued")
            art.memcpy_async(buf, host, stream=s)
            assert started.wait(10)
            prof = sess.stop()
    finally:
        gate.set()
        s.synchronize(timeout=10)
    assert sum(t.name == "queued" and t.start_ns == t.end_ns for t in prof.tasks) == 200
    assert "small_tasks" not in {f.kind for f in prof.diagnose()}
    m = metrics(prof)
    assert m["queued_ns"]["count"] == 0 and m["copy_bandwidth"] == {}
    s.destroy()
    buf.free(), host.free()


# ---- a failed task's error passed on by a synchronize is no wait that gave up ----------------
# (a host function that found a deadlock made the main thread's Device.synchronize, which waited
# for all the work, read "found a deadlock (507950)", "gave up"; the wait advice said "a record
# nothing makes" for an event wait whose record was made)

def _calls_profile(calls, tasks=()):
    from ascentrt.profiler.data import DeviceInfo, ProfileData
    return ProfileData(duration_ns=10_000_000, tasks=list(tasks), api_calls=list(calls),
                       devices=[DeviceInfo(0, "d", 2, 2, 1, 1 << 30, backend="sim")])


def test_a_task_error_passed_on_by_a_synchronize_is_not_that_call_giving_up():
    from ascentrt.profiler.data import ApiCall, ProfileData, TaskRecord
    from ascentrt.profiler.diagnose_failures import never_finished
    deadlock = ApiCall("Stream.synchronize", 0, 1000, 7, error=507950, target="stream 2")
    passed = [ApiCall("Device.synchronize", 0, 5000, 8, error=code, target="device 0", task_error=True)
              for code in (507950, 507046, 207001)]
    found = never_finished(_calls_profile([deadlock, *passed]))
    assert len(found) == 1 and found[0].evidence["host waits that gave up"] == 1
    assert "Stream.synchronize of stream 2 found a deadlock" in found[0].cause
    assert "Device.synchronize" not in found[0].cause
    assert never_finished(_calls_profile(passed)) == []
    # it round-trips through profile.json
    back = ProfileData.from_json(json.loads(json.dumps(_calls_profile([deadlock, *passed]).to_json())))
    assert [c.task_error for c in back.api_calls] == [False, True, True, True]
    # the host waited for the work in it: the critical path goes through the task it waited for
    from ascentrt.profiler.critical import host_waits
    k1 = TaskRecord(0, 1, 1, "kernel", "K1", 0, 0, 100, 2000, 8)
    k2 = TaskRecord(0, 1, 2, "kernel", "K2", 0, 6000, 6100, 7000, 8)
    prof = _calls_profile([ApiCall("Device.synchronize", 50, 2000, 8, error=507950, target="device 0",
                                   already_done=False, task_error=True)], [k1, k2])
    assert host_waits(prof, prof.tasks)(k2) is k1


def test_a_recorded_synchronize_knows_a_passed_on_task_error_from_its_own():
    def bad():
        raise ValueError("boom")
    dev = art.set_device(0)
    s = dev.create_stream()
    with art.profile() as prof:
        art.launch(bad, stream=s)
        with pytest.raises(art.TaskError):
            s.synchronize(timeout=10)
        with pytest.raises(art.AscentError):
            art.Event(dev).synchronize(timeout=-1)  # its own error: a bad argument
    calls = [c for c in prof.snapshot().api_calls if c.error]
    assert [(c.name, c.task_error) for c in calls] == [("Stream.synchronize", True),
                                                       ("Event.synchronize", False)]
    s.destroy()
    art.get_last_error()


@pytest.mark.parametrize("wait", ["event_wait", "notify_wait"])
def test_the_advice_for_a_stuck_wait_says_a_record_is_missing_only_where_it_may_be(wait):
    from ascentrt.profiler.data import TaskRecord
    from ascentrt.profiler.diagnose_failures import never_finished
    running = TaskRecord(0, 1, 1, "kernel", "B", 0, 3000, 4000, 10_000, 7, fate="unfinished")
    blocked = TaskRecord(0, 2, 1, wait, wait, 0, 5000, 5000, 10_000, 7, fate="unfinished")
    (found,) = never_finished(_calls_profile([], [running, blocked]))
    missing = "record nothing makes" in found.advice
    assert missing == (wait == "notify_wait"), found.advice
    if wait == "event_wait":  # (its record was made: the stream that holds it is the lead)
        assert found.advice.startswith("work still queued or running"), found.advice
        assert "record was made" in found.advice


SERIAL_SYNCS = '''
import json, sys, ascentrt as art
dev = art.set_device(0)
a, b = dev.create_stream(), dev.create_stream()
with art.profile(None) as prof:
    for i in range(20):
        for s in (a, b):
            art.launch(lambda: None, stream=s, cost=1e-3, block_dim=int(sys.argv[1]))
            s.synchronize()
print(json.dumps([[f.kind, f.evidence] for f in prof.diagnose()]))
'''


def test_syncs_that_keep_independent_streams_apart_are_found_where_they_could_overlap():
    # (two streams of 1 ms single-core kernels, each synchronized after its launch: 40.56 ms
    # where overlapped they take 20.3 ms, and "no problems found"; with kernels that take all
    # 24 cores nothing could overlap, and nothing is found)
    from subprocess_util import run_program
    found = {}
    for block_dim in (1, 24):
        out = run_program(SERIAL_SYNCS.replace("sys.argv[1]", str(block_dim)),
                          env={"ASCENTRT_BACKEND": "sim"}, timeout=60)
        found[block_dim] = [e for k, e in json.loads(out.strip().splitlines()[-1])
                            if k == "serializing_sync"]
    [evidence] = found[1]
    assert evidence["synchronizations"] == 39 and evidence["could save up to"] == "20.56 ms"
    assert evidence["called at"] == "<string>:9 (39 calls)"
    assert found[24] == []


def test_a_sync_that_ends_one_instance_of_a_range_serializes_nothing_with_the_next():
    # (the demo's timed pipelines, one stream then three, each ending in a synchronize, were
    # "synchronizations that keep independent streams from overlapping, could save 265 ms of
    # 445 ms": the next instance's streams sat empty during the sync that ended the one before.
    # The same shape inside one instance is still found.)
    from subprocess_util import run_program
    code = '''
import json, ascentrt as art
from ascentrt import profiler
dev = art.set_device(0)
streams = [dev.create_stream() for _ in range(40)]
with art.profile(None) as prof:
    for i in range(0, 40, 2):
        with profiler.range("step"):
            for s in streams[i:i + 2] if SAME else streams[i:i + 1]:
                art.launch(lambda: None, stream=s, cost=1e-3, block_dim=1)
                s.synchronize()
print(json.dumps([f.kind for f in prof.diagnose(range="step")]))
'''
    kinds = {same: json.loads(run_program(code.replace("SAME", str(same)),
                                          env={"ASCENTRT_BACKEND": "sim"}, timeout=60).splitlines()[-1])
             for same in (False, True)}
    assert "serializing_sync" not in kinds[False], kinds
    assert "serializing_sync" in kinds[True], kinds
