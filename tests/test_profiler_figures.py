"""The profiler's figures are named for what they measure: time queued in a stream is not a
dispatch latency, task_time.csv's wait_us is msprof's gap, and one dispatch median per report."""

from ascentrt.profiler.analysis import diagnose
from ascentrt.profiler.metrics import dispatch_latencies, metrics
from ascentrt.profiler.csvexport import task_rows
from ascentrt.profiler.data import DeviceInfo, ProfileData, TaskRecord
from ascentrt.profiler.summary import sections


def _task(tid, enqueue, start, end, stream=1, kind="kernel", units=1):
    return TaskRecord(0, stream, tid, kind, f"k{tid}", 0, enqueue, start, end, 1, units=units)


def _profile(tasks, backend="cpu"):
    return ProfileData(duration_ns=max(t.end_ns for t in tasks), tasks=tasks,
                       devices=[DeviceInfo(0, "d", 2, 2, 1, 1 << 30, backend=backend)])


def test_each_devices_small_tasks_finding_quotes_its_own_dispatch_latency():
    # (four devices' findings each quoted the whole process's median dispatch latency)
    from dataclasses import replace
    tasks = [replace(_task(i, i * 100_000, i * 100_000 + (300 if dev == 0 else 900),
                           i * 100_000 + (500 if dev == 0 else 1100), stream=1 + dev), device=dev)
             for dev in (0, 1) for i in range(1, 201)]
    profile = ProfileData(duration_ns=max(t.end_ns for t in tasks), tasks=tasks,
                          devices=[DeviceInfo(d, "d", 2, 2, 1, 1 << 30) for d in (0, 1)])
    small = {f.title.split()[3]: f for f in diagnose(profile) if f.kind == "small_tasks"}
    assert small["0"].evidence["median dispatch latency"] == "0.3 us"
    assert small["1"].evidence["median dispatch latency"] == "0.9 us"


def test_queued_and_msprof_wait_columns():
    # Three tasks queued at once: the 2nd and 3rd wait behind the 1st (queued), yet each starts
    # right as the one before ends (wait 0); a 4th queued later starts 5 us after the 3rd ended.
    tasks = [_task(1, 0, 1000, 2000), _task(2, 0, 2000, 3000), _task(3, 0, 3000, 4000),
             _task(4, 8000, 9000, 9500)]
    rows = task_rows(_profile(tasks))
    head = rows[0]
    queued, wait = head.index("queued_us"), head.index("wait_us")
    assert [r[queued] for r in rows[1:]] == ["1.000", "2.000", "3.000", "1.000"]
    assert [r[wait] for r in rows[1:]] == ["0.000", "0.000", "0.000", "5.000"]


def test_dispatch_latency_counts_only_tasks_of_an_idle_stream():
    tasks = [_task(1, 0, 1000, 2000), _task(2, 0, 2000, 3000), _task(3, 5000, 5400, 6000),
             _task(4, 7000, 7300, 8000, kind="copy")]
    assert dispatch_latencies(_profile(tasks)) == [1000, 400, 300]
    m = metrics(_profile(tasks))
    assert m["dispatch_latency_ns"]["count"] == 3 and m["queued_ns"]["count"] == 4


def test_one_dispatch_median_in_the_summary_and_the_diagnosis():
    # Many tiny tasks: the small-tasks finding quotes the same median as the summary's table.
    tasks = [_task(i, i * 100_000, i * 100_000 + 300 + i * 100, i * 100_000 + 500 + i * 100)
             for i in range(1, 201)]  # (an even count: a median of two would differ)
    profile = _profile(tasks)
    p50 = metrics(profile)["dispatch_latency_ns"]["p50"]
    small = [f for f in diagnose(profile) if f.kind == "small_tasks"]
    assert small and small[0].evidence["median dispatch latency"] == f"{p50 / 1e3:.1f} us"
    title = [t for t, _, _ in sections(profile) if t.startswith("Device tasks")][0]
    assert "switch interval" not in title  # 0.4-20 us: nothing like the interpreter's 5 ms


def test_a_dispatch_latency_near_the_switch_interval_is_explained_on_cpu():
    tasks = [_task(i, i * 10_000_000, i * 10_000_000 + 4_900_000, i * 10_000_000 + 5_000_000)
             for i in range(1, 50)]
    title = [t for t, _, _ in sections(_profile(tasks)) if t.startswith("Device tasks")][0]
    assert "switch interval (5.0 ms" in title and "GIL" in title
    sim = [t for t, _, _ in sections(_profile(tasks, "sim")) if t.startswith("Device tasks")][0]
    assert "switch interval" not in sim  # virtual time has no GIL in it


def test_wait_us_of_a_replayed_graph_shows_the_idle_gap_before_it():
    # A graph's segment and its nodes share one task id: the gap before it is kept per row.
    seg = TaskRecord(0, 1, 2, "graph", "g", 0, 5000, 6000, 9000, 1)
    tasks = [_task(1, 0, 0, 1000), seg, _task(2, 5000, 6000, 7000), _task(2, 5000, 7000, 9000),
             _task(3, 9000, 9000, 9500)]
    rows = task_rows(_profile(tasks))
    wait = rows[0].index("wait_us")
    assert [r[wait] for r in rows[1:]] == ["0.000", "5.000", "0.000", "0.000", "0.000"]


def test_waiting_for_an_executor_another_stream_holds_is_not_dispatch_latency():
    # (kb waited 38 us each step for the cores ka held, and the report called it dispatch
    # latency, then found the tasks too small for it: dispatch itself was 1 us)
    tasks = []
    for i in range(150):
        t0 = i * 100_000
        tasks.append(_task(2 * i + 1, t0, t0 + 1000, t0 + 41_000, stream=1, units=2))      # ka
        tasks.append(_task(2 * i + 2, t0 + 500, t0 + 42_000, t0 + 82_000, stream=2, units=2))  # kb
    latencies = dispatch_latencies(_profile(tasks))
    assert sorted(set(latencies)) == [1000] and len(latencies) == 300
    assert "small_tasks" not in {f.kind for f in diagnose(_profile(tasks))}


def test_a_synchronize_on_another_thread_does_not_hide_a_starved_device():
    # (a thread waiting on device 1 made device 0's idle time count as "waiting on the device",
    # and the host-bound finding vanished)
    from ascentrt.profiler.data import ApiCall
    tasks = [TaskRecord(0, 1, i + 1, "kernel", "work", 0, i * 2_000_000, i * 2_000_000 + 1000,
                        i * 2_000_000 + 201_000, 7) for i in range(40)]
    calls = [ApiCall("launch", i * 2_000_000, i * 2_000_000 + 1000, 7) for i in range(40)]
    calls.append(ApiCall("Stream.synchronize", 0, 80_000_000, 8, target="stream 9"))
    prof = _profile(tasks)
    prof.api_calls = calls
    kinds = {f.kind for f in diagnose(prof)}
    assert "host_bound" in kinds


def test_the_critical_path_follows_executor_contention_and_a_replayed_graphs_nodes():
    # (a kernel waiting for the cores another stream's kernel held was blamed on the host, and
    # the nodes of a replayed graph, which share their task's id, collapsed into one)
    from ascentrt.profiler.critical import critical_path
    contended = [_task(1, 0, 0, 100_000, stream=2, units=2),             # b1: every core
                 _task(1, 0, 101_000, 2_101_000, stream=1, units=2),     # a1: waited for b1's cores
                 _task(2, 1_000, 2_102_000, 3_102_000, stream=2, units=2)]  # b2: waited for a1's
    path = critical_path(_profile(contended))
    assert path["tasks"] == 3 and path["by_kind"]["kernel"] == 3_100_000
    assert path["by_kind"].get("host", 0) == 0 and path["by_kind"]["dispatch"] == 2_000
    nodes = [_task(5, 0, i * 1_000_000, (i + 1) * 1_000_000) for i in range(3)]  # one task id
    path = critical_path(_profile(nodes))
    assert path["tasks"] == 3 and path["length_ns"] == 3_000_000


def test_the_critical_paths_first_task_splits_its_wait_into_host_and_dispatch():
    # (the gap before a task with no predecessor was all "host", its dispatch included: a
    # kernel enqueued at 3 us that started at 4 us gave host 4 us, dispatch none)
    from ascentrt.profiler.critical import critical_path
    path = critical_path(_profile([_task(1, 3_000, 4_000, 104_000)]))
    assert path["by_kind"] == {"kernel": 100_000, "host": 3_000, "dispatch": 1_000}
    # the nodes of a replayed graph share one enqueue: the first one's dispatch too
    nodes = [_task(7, 2_000, 5_000 + i * 10_000, 5_000 + (i + 1) * 10_000) for i in range(3)]
    path = critical_path(_profile(nodes))
    assert path["by_kind"] == {"kernel": 30_000, "host": 2_000, "dispatch": 3_000}
    assert sum(path["by_kind"].values()) == path["length_ns"]


def test_in_virtual_time_short_idle_stretches_count():
    # (on sim a driver malloc of 17 us before every 5 us kernel left the device 74% idle, and the
    # 20 us cut-off meant for real time's scheduling noise hid all of it)
    from ascentrt.profiler.data import ApiCall
    tasks, calls = [], []
    for i in range(250):
        t0 = i * 23_000
        calls.append(ApiCall("malloc", t0, t0 + 17_000, 7))
        calls.append(ApiCall("launch", t0 + 17_000, t0 + 18_000, 7))
        tasks.append(TaskRecord(0, 1, i + 1, "kernel", "work", 0, t0 + 18_000, t0 + 18_000,
                                t0 + 23_000, 7))
    for backend, found in (("sim", True), ("cpu", False)):
        prof = _profile(tasks, backend=backend)
        prof.api_calls = calls
        assert ("host_bound" in {f.kind for f in diagnose(prof)}) is found, backend


def test_a_device_sync_in_the_loop_costs_from_the_moment_the_device_ran_dry():
    # (it counted from the synchronize's return only: its own 10 us of latency were left out,
    # and the finding ranked below smaller ones)
    from ascentrt.profiler.data import ApiCall
    tasks, calls = [], []
    for i in range(50):
        t0 = i * 30_000
        calls.append(ApiCall("launch", t0, t0 + 3_000, 7))
        tasks.append(TaskRecord(0, 1, i + 1, "kernel", "k", 0, t0 + 3_000, t0 + 4_000,
                                t0 + 14_000, 7))
        calls.append(ApiCall("Device.synchronize", t0 + 3_000, t0 + 24_000, 7))  # dry at 14 us
    prof = _profile(tasks)
    prof.api_calls = calls
    (found,) = [f for f in diagnose(prof) if f.kind == "device_sync_in_loop"]
    assert found.impact_ns == 49 * (30_000 + 4_000 - 14_000)  # dry -> the next task's start


def test_a_task_on_units_that_were_free_held_by_no_one():
    # (a kernel on 1 of 2 units was taken for the holder of the other's: the critical path went
    # through it, not through the host time before the kernel, and dispatch latency halved)
    from ascentrt.profiler.critical import critical_path
    tasks = [_task(1, 0, 0, 1_000_000, stream=1),                       # ka
             _task(1, 0, 0, 8_999_000, stream=2),                       # unrelated, 1 unit
             _task(2, 9_000_000, 9_001_000, 10_001_000, stream=1)]      # kb: submitted late
    path = critical_path(_profile(tasks))
    assert path["by_kind"]["host"] == 8_000_000 and path["by_kind"]["kernel"] == 2_000_000
    assert sorted(dispatch_latencies(_profile(tasks))) == [0, 0, 1000]


def test_a_copy_on_its_directions_own_engine_is_held_by_no_copy_of_another_direction():
    # (an H2D copy that ended before a D2H started was taken for the holder of the D2H's engine
    # where each direction has engines of its own: the critical path ran through it)
    from ascentrt.profiler.critical import executor_holders, capacities

    def copy(tid, name, start, end, stream):
        return TaskRecord(0, stream, tid, "copy", name, 0, start, start, end, 1)
    h2d = copy(1, "host_to_device", 0, 1_000_000, 1)
    d2h = copy(1, "device_to_host", 1_500_000, 2_500_000, 2)
    d2h_2 = copy(1, "device_to_host", 1_000_000, 1_400_000, 3)  # the D2H engine's last user
    per_direction = DeviceInfo(0, "d", 2, 3, 1, 1 << 30, backend="sim", copy_engines_per_direction=[1, 1, 1])
    shared = DeviceInfo(0, "d", 2, 1, 1, 1 << 30)  # (cpu: one engine takes any copy)
    for devices, tasks, held_by in (([per_direction], [h2d, d2h], None),
                                    ([per_direction], [h2d, d2h, d2h_2], d2h_2),
                                    ([shared], [h2d, d2h], h2d)):
        prof = ProfileData(duration_ns=3_000_000, tasks=tasks, devices=devices)
        assert executor_holders(tasks, capacities(prof))(d2h) is held_by


def test_the_critical_path_goes_through_the_work_a_host_synchronize_waited_for():
    # (the host synchronized a 3 ms kernel's stream, then queued a copy: the path was the copy
    # plus 3 ms of "host", and the kernel that decided the run time was not on it)
    from ascentrt.profiler.critical import critical_path
    from ascentrt.profiler.data import ApiCall
    kernel = TaskRecord(0, 3, 1, "kernel", "long", 0, 0, 1_000, 3_001_000, 7)
    unrelated = TaskRecord(0, 1, 1, "copy", "host_to_device", 0, 0, 1_000, 1_001_000, 7)
    copy = TaskRecord(0, 2, 1, "copy", "device_to_host", 0, 3_020_000, 3_021_000, 4_021_000, 7)
    prof = _profile([kernel, unrelated, copy])
    prof.api_calls = [ApiCall("Stream.synchronize", 2_000, 3_011_000, 7, target="stream 3",
                              already_done=False)]
    path = critical_path(prof)
    assert path["by_kind"]["kernel"] == 3_000_000 and path["by_kind"]["copy"] == 1_000_000
    assert path["top"][0] == ("long", 3_000_000) and path["tasks"] == 2
    prof.api_calls = [ApiCall("Stream.synchronize", 2_000, 3_011_000, 7, target="stream 3",
                              already_done=True)]  # it did not wait: the host was just late
    assert "kernel" not in critical_path(prof)["by_kind"]


def test_a_device_idle_with_work_ready_is_dispatch_bound_not_host_bound():
    # (on cpu, 3000 tiny launches queued far ahead of an executor waiting for the GIL read as
    # "starved by the host's launch calls": the host had given it all the work it needed)
    from ascentrt.profiler.data import ApiCall
    tasks, calls = [], []
    for i in range(300):
        calls.append(ApiCall("launch", i * 4_000, i * 4_000 + 3_000, 7))
        start = 2_000_000 + i * 40_000  # every task queued long before an executor ran it
        tasks.append(TaskRecord(0, 1, i + 1, "kernel", "tiny", 0, i * 4_000 + 3_000, start,
                                start + 1_000, 7))
    prof = _profile(tasks)
    prof.api_calls = calls
    kinds = {f.kind for f in diagnose(prof)}
    assert "dispatch_bound" in kinds and "host_bound" not in kinds


def test_a_rank_that_reaches_its_collective_last_is_named_with_the_work_that_held_it():
    # (three ranks idled 0.9 ms each in an all_reduce waiting for rank 2, whose 1 ms kernel
    # came first: "no problems found", and the trace named only the late rank's stream)
    from ascentrt.profiler.data import CollectiveRecord
    tasks, parts = [], []
    for rank in range(4):
        work = 1_000_000 if rank == 2 else 100_000
        tasks.append(TaskRecord(rank, 10 + rank, 1, "kernel", f"work{rank}", 0, 0, 0, work, 7))
        tasks.append(TaskRecord(rank, 10 + rank, 2, "event_wait", "all_reduce #0 of communicator 1",
                                0, 0, work, 1_900_000, 7))
        parts.append([rank, rank, 10 + rank, 2])
    prof = ProfileData(duration_ns=1_900_000, tasks=tasks,
                       devices=[DeviceInfo(d, "d", 2, 2, 1, 1 << 30, backend="sim") for d in range(4)])
    prof.collectives = [CollectiveRecord(1, 0, "all_reduce", 4096, "done", parts, [], "")]
    (found,) = [f for f in diagnose(prof) if f.kind == "straggler"]
    assert found.title.startswith("Rank 2 (device 2)") and "work2 1.00 ms" in found.cause
    assert found.evidence["waited per other rank"] == "0.90 ms" and found.task_ids == ["2/12/1"]
    even = [TaskRecord(t.device, t.stream, t.task_id, t.kind, t.name, 0, 0,
                       100_000 if t.kind == "event_wait" else 0,
                       1_000_000 if t.kind == "event_wait" else 100_000, 7) for t in tasks]
    prof.tasks = even  # (every rank arrives at once: nobody waits)
    assert "straggler" not in {f.kind for f in diagnose(prof)}


def test_a_straggler_s_wait_and_work_are_both_totals_or_both_per_collective():
    # (six collectives: "waited 162.00 ms each on average ... before it, rank 1's stream ran
    # work 30.00 ms": the sum of six waits set against the first collective's work)
    from ascentrt.profiler.data import CollectiveRecord
    tasks, colls = [], []
    for seq in range(3):
        base = seq * 2_000_000
        for rank in range(4):
            work = 1_000_000 if rank == 2 else 100_000
            tasks.append(TaskRecord(rank, 10 + rank, 2 * seq + 1, "kernel", f"work{rank}", 0, 0,
                                    base, base + work, 7))
            tasks.append(TaskRecord(rank, 10 + rank, 2 * seq + 2, "event_wait",
                                    f"all_reduce #{seq} of communicator 1", 0, 0, base + work,
                                    base + 1_900_000, 7))
        colls.append(CollectiveRecord(1, seq, "all_reduce", 4096, "done",
                                      [[r, r, 10 + r, 2 * seq + 2] for r in range(4)], [], ""))
    prof = ProfileData(duration_ns=6_000_000, tasks=tasks,
                       devices=[DeviceInfo(d, "d", 2, 2, 1, 1 << 30, backend="sim") for d in range(4)])
    prof.collectives = colls
    (found,) = [f for f in diagnose(prof) if f.kind == "straggler"]
    assert "waited 2.70 ms each on average in all (0.90 ms per collective)" in found.cause, found.cause
    assert "before each, on average, rank 2's stream ran work2 1.00 ms" in found.cause, found.cause
    assert found.task_ids == ["2/12/1", "2/12/3", "2/12/5"]


def test_a_rank_whose_part_the_host_submitted_late_blames_the_host_not_its_stream():
    # (one host thread submits rank 0's kernel and all_reduce, then rank 1's: on cpu rank 1's
    # part was enqueued ~0.65 ms after rank 0's had started, behind a kernel of no time, and
    # the finding said "rank 1's stream has more, or slower, work")
    from ascentrt.profiler.data import CollectiveRecord
    tasks, colls = [], []
    for seq in range(3):
        base = seq * 1_000_000
        for rank in range(2):
            late = 650_000 if rank else 0
            tasks.append(TaskRecord(rank, 10 + rank, 2 * seq + 1, "kernel", f"fwd{rank}", 0,
                                    base + late, base + late, base + late + 5_000, 7))
            tasks.append(TaskRecord(rank, 10 + rank, 2 * seq + 2, "event_wait",
                                    f"all_reduce #{seq} of communicator 1", 0, base + late + 8_000,
                                    base + late + 8_000, base + 700_000, 7))
        colls.append(CollectiveRecord(1, seq, "all_reduce", 4096, "done",
                                      [[r, r, 10 + r, 2 * seq + 2] for r in range(2)], [], ""))
    prof = ProfileData(duration_ns=3_000_000, tasks=tasks,
                       devices=[DeviceInfo(d, "d", 2, 2, 1, 1 << 30) for d in range(2)])
    prof.collectives = colls
    (found,) = [f for f in diagnose(prof) if f.kind == "straggler"]
    assert "the host submits its work late" in found.title
    assert "more, or slower, work" not in found.advice
    assert found.evidence["of it, before the late part was submitted"] == "1.95 ms"  # (3 x 0.65)


def test_the_critical_path_goes_through_a_copy_the_host_waited_out_in_its_call():
    # (a pageable memcpy_async returns only once its copy is done: the kernel the host queued
    # next on another stream, with no event between them, followed 1.7 ms of "host", and a
    # run of such copies read as "no problems found")
    from ascentrt.profiler.critical import critical_path
    from ascentrt.profiler.data import ApiCall
    copy = TaskRecord(0, 2, 1, "copy", "host_to_device", 16 << 20, 44_000, 45_000, 1_725_000, 7)
    kernel = TaskRecord(0, 3, 1, "kernel", "compute", 0, 1_738_000, 1_739_000, 2_039_000, 7)
    prof = _profile([copy, kernel])
    prof.api_calls = [ApiCall("memcpy_async", 41_000, 1_734_000, 7),
                      ApiCall("launch", 1_735_000, 1_738_000, 7)]
    path = critical_path(prof)
    assert path["by_kind"]["copy"] == 1_680_000 and path["by_kind"]["kernel"] == 300_000
    prof.api_calls[0] = ApiCall("memcpy_async", 41_000, 44_000, 7)  # (pinned: returned at once)
    assert "copy" not in critical_path(prof)["by_kind"]


def _copies_and_kernels(copy_ns: int, kernel_ns: int) -> ProfileData:
    """One stream: 8 x (a 16 MiB copy, a kernel), in turn, each copy's call returning at once."""
    from ascentrt.profiler.data import ApiCall
    tasks, calls, t = [], [], 0
    for i in range(8):
        tasks.append(TaskRecord(0, 1, 2 * i + 1, "copy", "host_to_device", 16 << 20, t, t, t + copy_ns, 7))
        tasks.append(TaskRecord(0, 1, 2 * i + 2, "kernel", "k", 0, t, t + copy_ns, t + copy_ns + kernel_ns, 7))
        calls += [ApiCall("memcpy_async", t, t, 7), ApiCall("launch", t, t, 7)]
        t += copy_ns + kernel_ns
    prof = _profile(tasks, backend="sim")
    prof.api_calls = calls
    return prof


def test_copy_bound_advice_follows_the_overlap_and_names_a_saturated_engine():
    # (the advice said "put the copies on streams of their own" to a pipeline whose copies ran
    # on 3 streams beside the kernels, and not that one H2D engine was busy the whole run)
    from dataclasses import replace
    from ascentrt.profiler.data import ApiCall
    tasks, calls, t = [], [], 0
    for i in range(8):  # stream i % 3: its copy (the H2D engine: back to back), then its kernel
        s = 2 + i % 3
        tasks.append(TaskRecord(0, s, 2 * i + 1, "copy", "host_to_device", 16 << 20, t, t, t + 1_000_000, 7))
        tasks.append(TaskRecord(0, s, 2 * i + 2, "kernel", "k", 0, t, t + 1_000_000, t + 1_200_000, 7))
        calls += [ApiCall("memcpy_async", 0, 0, 7), ApiCall("launch", 0, 0, 7)]
        t += 1_000_000
    prof = _profile(tasks, backend="sim")
    prof.devices = [replace(prof.devices[0], copy_engines_per_direction=[1, 1, 1])]
    prof.api_calls = calls
    (found,) = [f for f in diagnose(prof) if f.kind == "copy_bound"]
    assert found.evidence["compute time overlapped by copies"] == "88%"
    assert found.evidence["device 0's H2D copy engine busy"] == "98% of the run"
    assert "streams of their own" not in found.advice
    assert "device 0's H2D copy engine" in found.advice
    # One stream, copies and kernels in turn: the copies overlap nothing, and that is the advice
    (alone,) = [f for f in diagnose(_copies_and_kernels(1_600_000, 10_000)) if f.kind == "copy_bound"]
    assert alone.evidence["compute time overlapped by copies"] == "0%"
    assert "put the copies on streams of their own" in alone.advice


def test_copies_that_make_most_of_the_critical_path_are_a_copy_bound_finding():
    (found,) = [f for f in diagnose(_copies_and_kernels(1_600_000, 10_000)) if f.kind == "copy_bound"]
    assert found.evidence["copies' share of it"] == "99%"
    assert "pageable" not in found.cause  # (the copies did not block their calls)
    assert found.task_ids[0] == "0/1/1"
    # (copies a third of the path: the kernels decide as much)
    assert "copy_bound" not in {f.kind for f in diagnose(_copies_and_kernels(500_000, 1_000_000))}
