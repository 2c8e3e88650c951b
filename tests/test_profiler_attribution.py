"""The host's time while the device sat idle is attributed (own code, named runtime calls,
waiting), and the diagnosis can be limited to a user range. Profiles are built by hand."""

import sys
import textwrap

import pytest

import ascentrt as art
from ascentrt.cli import main
from ascentrt.profiler import ApiCall, Profile, RangeRecord, TaskRecord
from ascentrt.profiler.data import DeviceInfo, MemorySample
from ascentrt.profiler.hosttime import attribute
from ascentrt.profiler.critical import critical_path
from ascentrt.profiler.finding import MIN_SMALL_TASKS
from ascentrt.profiler.scope import within

MS, US = 1_000_000, 1_000
HOST = 1  # the host thread's ident in the hand-made profiles


def _kernel(task_id, start, length, stream=1):
    return TaskRecord(0, stream, task_id, "kernel", "k", 0, start, start, start + length, HOST)


def _loop(t0, steps, busy, gap, calls_in_gap=(), tasks=None):
    """`steps` kernels of `busy` ns, each after a `gap` of idle device in which the host makes
    `calls_in_gap` ((name, offset, length) each) and then launches the kernel."""
    tasks, calls = [] if tasks is None else tasks, []
    t = t0
    for i in range(steps):
        for name, offset, length in calls_in_gap:
            calls.append(ApiCall(name, t + offset, t + offset + length, HOST))
        t += gap
        calls.append(ApiCall("launch", t - 10 * US, t, HOST))
        tasks.append(_kernel(len(tasks) + 1, t, busy))
        t += busy
    return tasks, calls, t


def _profile(tasks, calls, ranges=(), memory=()):
    return Profile(duration_ns=max(t.end_ns for t in tasks), tasks=tasks, api_calls=calls,
                   ranges=list(ranges), memory=list(memory),
                   devices=[DeviceInfo(0, "cpu", 2, 2, 1, 1 << 30)])


def _host_bound(findings):
    return [f for f in findings if f.kind == "host_bound"]


def test_idle_time_splits_into_own_code_runtime_calls_and_waiting():
    calls = [ApiCall("malloc_host", 100, 400, HOST), ApiCall("malloc_host", 1100, 1300, HOST),
             ApiCall("launch", 500, 550, HOST), ApiCall("Stream.synchronize", 600, 700, HOST),
             ApiCall("launch", 5000, 5100, HOST)]  # outside the stretches: not counted
    host = attribute([(0, 1000), (1000, 2000)], calls)
    assert host.stretch_ns == 2000
    assert host.calls == {"malloc_host": (500, 2), "launch": (50, 1)}  # costliest first
    assert host.waiting_ns == 100
    assert host.own_ns == 2000 - 550 - 100
    assert host.largest == "own"
    # (times under 10 us in us: "0.00 ms" said nothing)
    assert host.calls_text() == "malloc_host 0.50 us in 2 calls, launch 0.05 us in 1 call"


def test_nested_and_concurrent_calls_are_counted_once():
    calls = [ApiCall("Graph.launch", 0, 600, HOST),
             ApiCall("launch", 100, 200, HOST),          # nested in the graph launch
             ApiCall("memcpy_async", 500, 900, 2),       # another thread, overlapping it
             ApiCall("Stream.synchronize", 800, 1000, 3)]  # waiting wins over a call
    host = attribute([(0, 1000)], calls)
    assert host.calls == {"Graph.launch": (600, 1), "memcpy_async": (200, 1)}
    assert host.waiting_ns == 200
    assert host.own_ns == 0


def test_a_costly_runtime_call_is_named_with_its_total_and_what_to_do():
    tasks, calls, _ = _loop(0, 30, 100 * US, 1 * MS, [("malloc_host", 50 * US, 800 * US)])
    [found] = _host_bound(_profile(tasks, calls).diagnose())
    assert "malloc_host" in found.title
    # 29 idle stretches: the device's window opens with the first kernel's launch
    assert found.evidence["runtime calls while idle"] == ("malloc_host 23.20 ms in 29 calls, "
                                                          "launch 0.29 ms in 29 calls")
    assert found.evidence["host in runtime calls while idle"] == "23.49 ms (81%)"
    assert found.advice.startswith("malloc_host (23.20 ms in 29 calls): pinning host memory")
    assert "allocate the pinned buffers once before the loop" in found.advice


def test_host_bound_by_its_own_code_advises_moving_preparation_out_of_the_loop():
    tasks, calls, _ = _loop(0, 30, 100 * US, 1 * MS)
    [found] = _host_bound(_profile(tasks, calls).diagnose())
    assert "own code" in found.title
    assert found.evidence["host's own code while idle"] == "28.71 ms (99%)"  # 29 x (1 ms - launch)
    assert found.evidence["runtime calls while idle"] == "launch 0.29 ms in 29 calls"
    assert found.advice.startswith("the program's own code: move host-side preparation out of "
                                   "the loop")
    assert "malloc_host" not in found.advice


def test_an_idle_device_while_the_host_waits_on_it_is_not_host_bound():
    tasks, calls, _ = _loop(0, 30, 100 * US, 1 * MS, [("Event.synchronize", 0, 900 * US)])
    assert _host_bound(_profile(tasks, calls).diagnose()) == []


def _two_phases():
    """'step': three instances, each a queued-ahead burst, with long pauses between them;
    'eval': a host-bound loop after them."""
    tasks, calls, ranges, t = [], [], [], 0
    for _ in range(3):
        start = t
        for _ in range(10):
            tasks.append(_kernel(len(tasks) + 1, t, 1 * MS))
            calls.append(ApiCall("launch", t - 5 * US, t, HOST))
            t += 1 * MS
        ranges.append(RangeRecord("step", start, t, HOST))
        t += 20 * MS  # between steps: the device idles outside the range
    eval_start = t
    _, eval_calls, end = _loop(t, 30, 100 * US, 1 * MS, [("malloc", 0, 600 * US)], tasks)
    ranges.append(RangeRecord("eval", eval_start, end, HOST))
    return _profile(tasks, calls + eval_calls, ranges,
                    [MemorySample(2 * MS, 0, 1, 1), MemorySample(15 * MS, 0, 2, 2)])


def test_the_whole_profile_is_host_bound_but_its_steps_are_not():
    prof = _two_phases()
    assert _host_bound(prof.diagnose())
    # Inside 'step' the device was busy throughout: the pauses between instances do not count.
    assert _host_bound(prof.diagnose(range="step")) == []


def test_a_range_is_diagnosed_from_what_happened_inside_it():
    [found] = _host_bound(_two_phases().diagnose(range="eval"))
    assert "malloc first" in found.title
    assert found.evidence["device tasks"] == 30
    assert found.evidence["runtime calls while idle"].startswith("malloc 17.40 ms in 29 calls")
    assert "allocate the buffers once before the loop" in found.advice


def test_a_range_cuts_tasks_and_calls_to_its_windows():
    prof = _two_phases()
    first_step = prof.ranges[0]
    prof.tasks.append(_kernel(999, first_step.end_ns - 1 * MS, 3 * MS, stream=2))  # runs past it
    prof.api_calls.append(ApiCall("malloc", first_step.end_ns + 1 * MS, first_step.end_ns + 2 * MS,
                                  HOST))  # between two steps
    scope = within(prof, "step")
    assert scope.instances == 3 and scope.label() == "range 'step' (3 instances, 30.00 ms)"
    [straddling] = [t for t in scope.profile.tasks if t.task_id == 999]
    assert (straddling.start_ns, straddling.end_ns) == (first_step.end_ns - 1 * MS, first_step.end_ns)
    assert len(scope.profile.tasks) == 31
    # The launch of each step's first kernel ends as the step begins: only touching, it is out,
    # and so is the malloc between two steps.
    assert len(scope.profile.api_calls) == 27
    assert {c.name for c in scope.profile.api_calls} == {"launch"}
    assert [s.ts_ns for s in scope.profile.memory] == [2 * MS]  # the other was between steps


def test_a_task_spanning_two_instances_keeps_only_its_time_inside_them():
    prof = _two_phases()
    first, second = prof.ranges[0], prof.ranges[1]
    prof.tasks.append(_kernel(999, first.end_ns - 1 * MS, second.start_ns - first.end_ns + 3 * MS,
                              stream=2))  # from 1 ms before the end of one step into the next
    scope = within(prof, "step")
    pieces = [t for t in scope.profile.tasks if t.task_id == 999]
    assert [(t.start_ns, t.end_ns) for t in pieces] == [
        (first.end_ns - 1 * MS, first.end_ns), (second.start_ns, second.start_ns + 2 * MS)]
    # (the 20 ms between the steps is not the range's: its critical path is its windows)
    assert critical_path(scope.profile, scope.windows)["length_ns"] <= 30 * MS


def test_a_long_task_that_starts_at_the_end_of_each_instance_is_no_small_task():
    tasks, calls, ranges = [], [], []
    for i in range(MIN_SMALL_TASKS + 20):  # a 1 ms kernel launched as each short step ends
        t = i * 2 * MS
        calls.append(ApiCall("launch", t, t + 10 * US, HOST))
        tasks.append(_kernel(i + 1, t + 11 * US, 1 * MS))
        ranges.append(RangeRecord("step", t, t + 12 * US, HOST))
    prof = _profile(tasks, calls, ranges)
    assert [t.duration_ns for t in within(prof, "step").profile.tasks][:2] == [1 * US, 1 * US]
    assert [f.kind for f in prof.diagnose(range="step") if f.kind == "small_tasks"] == []


def test_ranges_nested_in_one_of_their_name_are_part_of_its_instance():
    tasks, calls, _ = _loop(0, 3, 1 * MS, 1 * MS)
    outer = RangeRecord("step", 0, 6 * MS, HOST)
    inner = [RangeRecord("step", 1 * MS, 2 * MS, HOST), RangeRecord("step", 3 * MS, 4 * MS, HOST)]
    again = RangeRecord("step", 6 * MS, 7 * MS, HOST)  # (right after it: an instance of its own)
    scope = within(_profile(tasks, calls, [outer, *inner, again]), "step")
    assert scope.instances == 2 and scope.label() == "range 'step' (2 instances, 7.00 ms)"


def test_an_unknown_range_is_refused_naming_the_known_ones():
    with pytest.raises(art.InvalidArgumentError, match="no range 'stpe'; its ranges: 'eval', 'step'"):
        _two_phases().diagnose(range="stpe")
    tasks, calls, _ = _loop(0, 3, 1 * MS, 1 * MS)
    with pytest.raises(art.InvalidArgumentError, match="no user ranges"):
        _profile(tasks, calls).diagnose(range="step")


def test_a_live_session_diagnoses_a_range(stream):
    with art.profile() as prof:
        with art.profiler.range("step"):
            art.launch(art.kernels.noop, stream=stream)
            stream.synchronize(timeout=10)
        assert prof.diagnose(range="step") == []  # while running
        with pytest.raises(art.InvalidArgumentError, match="its ranges: 'step'"):
            prof.diagnose(range="warmup")
    assert prof.diagnose(range="step") == []


PROGRAM = textwrap.dedent("""
    import ascentrt as art
    s = art.set_device(0).create_stream()
    for _ in range(3):
        with art.profiler.range("step"):
            art.launch(art.kernels.noop, stream=s)
            s.synchronize(timeout=30)
""")


def test_prof_and_report_print_the_diagnosis_of_a_range(tmp_path, capsys):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    out = str(tmp_path / "p")
    assert main(["prof", "-q", "-o", out, "--range", "step", "--", sys.executable, str(prog)]) == 0
    assert "Diagnosis of range 'step' (3 instances," in capsys.readouterr().out
    assert main(["report", out, "--range", "eval"]) == 1
    assert "no range 'eval'; its ranges: 'step'" in capsys.readouterr().err
    # A mistyped range after a run: the whole profile's summary, the error, and exit code 1.
    assert main(["prof", "-q", "--force", "-o", out, "--range", "stpe", "--", sys.executable,
                 str(prog)]) == 1
    printed = capsys.readouterr()
    assert "Diagnosis of the whole run (no range 'stpe' in it)" in printed.out and "outputs in" in printed.out
    assert "no range 'stpe'; its ranges: 'step'" in printed.err


def test_a_query_that_finds_the_work_not_done_is_waiting_not_a_runtime_call():
    # (a poll loop, `while not e.query()`, was a host "starved by its runtime calls" with the
    # advice to call Event.query less often: the host was waiting for the device)
    calls = [ApiCall("Event.query", 0, 400 * US, HOST, already_done=False),
             ApiCall("Event.query", 400 * US, 401 * US, HOST, already_done=True),
             ApiCall("launch", 401 * US, 500 * US, HOST)]
    host = attribute([(0, 1 * MS)], calls)
    assert host.waiting_ns == 400 * US
    assert list(host.calls) == ["launch", "Event.query"] and host.calls["Event.query"] == (1 * US, 1)


SYNC_THEN_MALLOC = textwrap.dedent("""
    import ascentrt as art
    dev = art.set_device(0)
    a = dev.create_stream()
    with art.profile(None) as prof:
        for i in range(30):
            art.launch(lambda: None, stream=a, cost=100e-6)
            dev.synchronize()
            for j in range(50):
                art.malloc(4096).free()  # (driver allocations: the device idles here)
    found = {f.kind: f.impact_ns for f in prof.diagnose()}
    print(found["host_bound"] > 20 * found["device_sync_in_loop"] > 0)
""")


def test_a_sync_loop_finding_leaves_the_idle_of_other_runtime_calls_to_the_host_bound_one():
    # (both claimed the same 30 ms of a 34 ms run: the synchronizations cost 3 ms)
    from subprocess_util import run_program
    out = run_program(SYNC_THEN_MALLOC, env={"ASCENTRT_BACKEND": "sim",
                                             "ASCENTRT_MEM_POOL_ENABLE": "0"}, timeout=60)
    assert out.strip() == "True"
