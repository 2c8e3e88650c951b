"""Graph replay: identical to eager submission, in order across launches, updatable, inspectable."""

import json
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ascentrt as art
from ascentrt import ErrorCode
from ascentrt.engine.scheduler import Hooks

T = 10.0
N_BUFFERS, FLOATS = 4, 64


def affine(out, x, a, b):
    """out = x * a + b (a deterministic kernel: replay and eager give identical bits)."""
    np.multiply(x, a, out=out)
    out += b


affine.access = ("w", "r", "", "")  # what it touches, for the race sanitizer


@pytest.fixture
def streams(dev):
    made = [dev.create_stream() for _ in range(4)]
    yield made
    for s in made:
        s.destroy(force=True)


@pytest.fixture
def buffers(dev):
    made = [art.malloc(FLOATS * 4) for _ in range(N_BUFFERS)]
    yield made
    for b in made:
        b.free()


# ---- random programs: kernels and copies on 3-4 streams, fork/join, no data races -------------

op_strategy = st.tuples(st.sampled_from(["kernel", "copy"]), st.integers(0, 3),
                        st.integers(0, N_BUFFERS - 1), st.integers(0, N_BUFFERS - 1),
                        st.integers(-3, 3), st.integers(-2, 2))


def _build_program(ops, nstreams):
    """A race-free program: a record/wait pair wherever an op conflicts with another stream."""
    program = [("fork",)]
    last_writer = {}         # buffer -> stream of its last writer
    readers = {}             # buffer -> streams that read it since
    for kind, s, dst, src, a, b in ops:
        s %= nstreams
        if kind == "copy" and dst == src:
            continue
        waits = {last_writer[src]} if src in last_writer else set()
        waits |= {last_writer[dst]} if dst in last_writer else set()
        waits |= readers.get(dst, set())
        for t in sorted(waits - {s}):
            program.append(("sync", t, s))
        program.append((kind, s, dst, src, float(a), float(b)))
        readers.setdefault(src, set()).add(s)
        last_writer[dst] = s
        readers[dst] = set()
    program.append(("join",))
    return program


def _submit(program, streams, bufs):
    views = [b.view(np.float32) for b in bufs]
    for step in program:
        if step[0] == "fork":
            ev = streams[0].record()
            for s in streams[1:]:
                s.wait(ev)
        elif step[0] == "join":
            for s in streams[1:]:
                streams[0].wait(s.record())
        elif step[0] == "sync":
            streams[step[2]].wait(streams[step[1]].record())
        elif step[0] == "kernel":
            _, s, dst, src, a, b = step
            art.launch(affine, views[dst], views[src], a, b, stream=streams[s])
        else:
            _, s, dst, src, _, _ = step
            art.memcpy_async(bufs[dst], bufs[src], stream=streams[s])


def _reset(bufs):
    for i, b in enumerate(bufs):
        b.numpy(np.float32)[:] = np.arange(FLOATS, dtype=np.float32) * (i + 1) / 7


def _state(bufs):
    return [b.numpy(np.float32).copy() for b in bufs]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_strategy, min_size=1, max_size=25), nstreams=st.integers(3, 4))
def test_replay_matches_eager_for_random_fork_join_programs(streams, buffers, ops, nstreams):
    used = streams[:nstreams]
    program = _build_program(ops, nstreams)
    _reset(buffers)
    _submit(program, used, buffers)
    used[0].synchronize(T)
    eager1 = _state(buffers)
    _submit(program, used, buffers)
    for s in used:
        s.synchronize(T)
    eager2 = _state(buffers)

    _reset(buffers)
    used[0].begin_capture()
    _submit(program, used, buffers)
    graph = used[0].end_capture()
    assert _state(buffers)[0].tolist() == (np.arange(FLOATS, dtype=np.float32) / 7).tolist()
    graph.launch(used[0])
    used[0].synchronize(T)
    for got, want in zip(_state(buffers), eager1):
        assert np.array_equal(got, want)
    graph.execute(T)  # a second launch on another stream continues from the first
    for got, want in zip(_state(buffers), eager2):
        assert np.array_equal(got, want)
    graph.destroy()


def test_redundant_waits_are_dropped_at_instantiation(streams):
    s0, s1, _, _ = streams
    s0.begin_capture()
    s1.wait(s0.record())
    art.launch(art.kernels.noop, stream=s1)
    e = s1.record()
    s0.wait(e)
    s0.wait(e)                       # implied by the previous wait
    s0.wait(s1.record())             # nothing new on s1 since: implied as well
    g = s0.end_capture()
    summary = g.plan_summary()
    assert summary["naive_waits"] == 4 and summary["waits"] == 2


def test_a_chain_of_kernels_replays_as_few_engine_tasks(streams):
    from ascentrt.graph.graph import SEGMENT_NODES
    s = streams[0]
    s.begin_capture()
    for _ in range(200):
        art.launch(art.kernels.noop, stream=s)
    g = s.end_capture()
    assert g.plan_summary()["segments"] == -(-200 // SEGMENT_NODES)


# ---- ordering between launches ----------------------------------------------------------------

def test_launches_on_different_streams_run_one_at_a_time_in_order(streams):
    s0, s1, s2, _ = streams
    seen = []
    counter = iter(range(1000))
    gate = threading.Event()
    s0.begin_capture()
    for _ in range(3):
        art.launch(lambda: seen.append(next(counter)), stream=s0)
    g = s0.end_capture()
    art.launch_host_func(gate.wait, T, stream=s1)  # holds back the first launch
    g.launch(s1)
    g.launch(s2)                                   # must wait for the launch on s1
    assert not seen
    gate.set()
    s2.synchronize(T)
    s1.synchronize(T)
    assert seen == list(range(6))


# ---- task-group update --------------------------------------------------------------------------

def _grouped_graph(s, x, value):
    s.begin_capture()
    art.launch(affine, x, x, 1.0, 1.0, stream=s)
    s.begin_task_group()
    art.launch(affine, x, x, 2.0, value, stream=s)
    group = s.end_task_group()
    return s.end_capture(), group


def test_update_changes_scalar_arguments_and_buffers(streams, buffers):
    s = streams[0]
    x, y = buffers[0].view(np.float32), buffers[1].view(np.float32)
    buffers[0].numpy(np.float32)[:] = 1
    buffers[1].numpy(np.float32)[:] = 5
    g, group = _grouped_graph(s, x, 0.0)
    g.execute(T)
    assert np.all(buffers[0].numpy(np.float32) == 4)      # (1 + 1) * 2 + 0
    with g.update(group, s):
        art.launch(affine, y, x, 3.0, 10.0, stream=s)      # new output buffer and scalars
    assert s.pending == 0
    g.execute(T)
    assert np.all(buffers[0].numpy(np.float32) == 5)      # 4 + 1
    assert np.all(buffers[1].numpy(np.float32) == 25)     # 5 * 3 + 10


@pytest.mark.parametrize("change", ["count", "kind", "function", "record"])
def test_topology_changes_are_refused_and_leave_the_graph_as_it_was(streams, buffers, change):
    s = streams[0]
    x = buffers[0].view(np.float32)
    buffers[0].numpy(np.float32)[:] = 1
    g, group = _grouped_graph(s, x, 0.0)
    with pytest.raises(art.CaptureError) as e:
        with g.update(group, s):
            if change == "count":
                art.launch(affine, x, x, 2.0, 7.0, stream=s)
                art.launch(affine, x, x, 2.0, 7.0, stream=s)
            elif change == "kind":
                art.memset_async(buffers[0], 0, stream=s)
            elif change == "function":
                art.launch(art.kernels.fill, x, 7.0, stream=s)
            else:
                s.record()
    assert e.value.code == ErrorCode.RT_MODEL_UPDATE_FAILED
    assert s._capture is None and s.pending == 0
    g.execute(T)
    assert np.all(buffers[0].numpy(np.float32) == 4)


def test_update_does_not_change_a_launch_already_submitted(streams):
    s = streams[0]
    seen = []
    gate = threading.Event()
    s.begin_capture()
    s.begin_task_group()
    art.launch(seen.append, "old", stream=s)
    group = s.end_task_group()
    g = s.end_capture()
    art.launch_host_func(gate.wait, T, stream=s)
    g.launch(s)
    with g.update(group, s):
        art.launch(seen.append, "new", stream=s)
    g.launch(s)
    gate.set()
    s.synchronize(T)
    assert seen == ["old", "new"]


def _memset_group_queued_then_updated(s, old, new):
    """A graph whose task group memsets `old`, launched on `s` behind a notify wait, then
    updated to memset `new`; returns the notify that lets the queued launch go."""
    s.begin_capture()
    s.begin_task_group()
    art.memset_async(old, 0xAB, stream=s)
    group = s.end_task_group()
    g = s.end_capture()
    blocker = art.Notify()
    s.wait_notify(blocker)
    g.launch(s)                      # queued: runs the old node (memset of `old`)
    with g.update(group, s):
        art.memset_async(new, 0xCD, stream=s)
    return g, blocker


def test_a_launch_queued_before_an_update_refuses_the_old_buffer_freed_since(streams):
    # (its run-time check read the graph's new buffers: the old one, freed and taken by a new
    # owner, was written with no error)
    s, t, other, _ = streams
    old, new = art.malloc(4096), art.malloc(4096)
    g, blocker = _memset_group_queued_then_updated(s, old, new)
    old.free(stream=t)
    owner = art.malloc(4096, stream=t)   # (may take the old block at once: t never used it)
    owner.numpy()[:] = 1
    blocker.record(other)
    with pytest.raises(art.TaskError) as e:
        s.synchronize(T)
    assert e.value.code == ErrorCode.RT_INVALID_HANDLE
    assert np.all(owner.numpy() == 1)
    g.destroy()
    owner.free(), new.free()


def test_a_launch_queued_before_an_update_runs_though_only_the_new_buffer_was_freed(streams):
    # (the inverse: it failed with 107017 for a buffer that only later launches use)
    s, t, other, _ = streams
    old, new = art.malloc(4096), art.malloc(4096)
    g, blocker = _memset_group_queued_then_updated(s, old, new)
    new.free(stream=t)
    blocker.record(other)
    s.synchronize(T)
    assert np.all(old.numpy() == 0xAB)
    with pytest.raises(art.InvalidHandleError):
        g.launch(s)                      # (a launch now would write the freed buffer)
    g.destroy()
    old.free()


# ---- failures, freed buffers, destroy -----------------------------------------------------------

def _boom():
    raise RuntimeError("kernel failed")


def test_a_failing_node_surfaces_on_the_launch_stream_with_its_name(streams):
    s0, s1, _, _ = streams
    ran = []
    s0.begin_capture()
    s1.wait(s0.record())
    art.launch(_boom, stream=s1, name="exploding")
    art.launch(ran.append, 1, stream=s1)
    s0.wait(s1.record())
    art.launch(ran.append, 2, stream=s0)
    g = s0.end_capture()
    g.launch(s0)
    with pytest.raises(art.TaskError) as e:
        s0.synchronize(T)
    assert e.value.code == ErrorCode.RT_AICORE_EXCEPTION
    assert "exploding" in str(e.value) and isinstance(e.value.info.cause, RuntimeError)
    assert sorted(ran) == [1, 2]  # CONTINUE: later nodes still ran, as they would eagerly


@pytest.mark.parametrize("lane", ["origin", "forked"])
@pytest.mark.parametrize("kind, code", [("kernel", ErrorCode.RT_AICORE_EXCEPTION),
                                        ("host_func", ErrorCode.RT_AICPU_EXCEPTION)])
def test_a_failing_node_has_the_code_of_its_kind_on_any_lane(streams, lane, kind, code):
    # (a blocking host function that failed on a forked lane was reported as 507052
    # RT_COPY_DATA: the code came from the executor of the join task that raised it)
    s0, s1, _, _ = streams
    s0.begin_capture()
    where = s0
    if lane == "forked":
        s1.wait(s0.record())
        where = s1
    if kind == "kernel":
        art.launch(_boom, stream=where)
    else:
        art.launch_host_func(_boom, stream=where)
    if lane == "forked":
        s0.wait(s1.record())
    g = s0.end_capture()
    g.launch(s0)
    with pytest.raises(art.TaskError) as e:
        s0.synchronize(T)
    assert e.value.code == code and "_boom" in str(e.value)
    g.destroy()


def test_launch_after_a_buffer_was_freed_is_refused(streams, dev):
    s = streams[0]
    b = art.malloc(64)
    s.begin_capture()
    art.launch(art.kernels.fill, b.view(np.float32), 1.0, stream=s)
    g = s.end_capture()
    b.free()
    with pytest.raises(art.InvalidHandleError):
        g.launch(s)
    assert s.pending == 0


def test_destroyed_graph_refuses_launch_and_second_destroy(streams):
    s = streams[0]
    s.begin_capture()
    art.launch(art.kernels.noop, stream=s)
    g = s.end_capture()
    g.launch(s)
    g.destroy()
    with pytest.raises(art.InvalidHandleError):
        g.launch(s)
    with pytest.raises(art.InvalidHandleError):
        g.destroy()


def test_launch_on_a_stream_of_another_device_is_refused(streams):
    if art.device_count() < 2:
        pytest.skip("one device")
    s = streams[0]
    s.begin_capture()
    g = s.end_capture()
    other = art.Device(1).create_stream()
    with pytest.raises(art.InvalidArgumentError):
        g.launch(other)
    other.destroy()


# ---- inspection and profiling -------------------------------------------------------------------

def test_dot_and_json_describe_nodes_lanes_and_edges(streams, buffers):
    s0, s1, _, _ = streams
    x = buffers[0].view(np.float32)
    s0.begin_capture()
    art.launch(affine, x, x, 1.0, 0.0, stream=s0, name="first")
    s1.wait(s0.record())
    art.memcpy_async(buffers[1], buffers[0], stream=s1)
    s0.wait(s1.record())
    g = s0.end_capture()
    dot = g.to_dot()
    assert dot.startswith('digraph "graph') and "first" in dot and "n0 -> n1" in dot
    data = json.loads(g.to_json())
    assert [n["kind"] for n in data["nodes"]] == ["kernel", "copy"]
    assert data["nodes"][1]["deps"] == [0] and data["nodes"][1]["lane"] == 1


class _Collector:
    def __init__(self):
        self.tasks = []

    def task_done(self, task):
        self.tasks.append(task)

    def tasks_done(self, stream, tasks):
        self.tasks.extend(tasks)

    def tasks_dropped(self, stream, tasks, now):
        pass


def test_replayed_nodes_reach_the_profiler_with_names(streams):
    s = streams[0]
    s.begin_capture()
    art.launch(art.kernels.noop, stream=s, name="alpha")
    art.launch(art.kernels.noop, stream=s, name="beta")
    g = s.end_capture()
    prof = _Collector()
    Hooks.profiler = prof
    try:
        g.launch(s)
        s.synchronize(T)
    finally:
        Hooks.profiler = None
    nodes = [t for t in prof.tasks if getattr(t, "graph_node", None) is not None]
    assert [t.name for t in nodes] == ["alpha", "beta"]
    assert all(t.graph_id == g.id and t.t_end >= t.t_start > 0 for t in nodes)


def test_non_blocking_host_functions_and_memsets_replay(streams, buffers):
    s = streams[0]
    done = threading.Event()
    seen = []
    s.begin_capture()
    art.memset_async(buffers[0], 3, stream=s)
    art.launch_host_func(lambda tag: (seen.append(tag), done.set()), "detached", stream=s,
                         blocking=False)
    g = s.end_capture()
    assert g.plan_summary()["nodes"] == 2
    g.launch(s)
    s.synchronize(T)
    assert done.wait(T) and seen == ["detached"]
    assert np.all(buffers[0].numpy() == 3)


@pytest.mark.cpu_only
def test_a_destroy_racing_launches_from_another_thread_runs_every_launch_it_accepted(dev):
    s, lane, st = dev.create_stream(), dev.create_stream(), dev.create_stream()
    runs = []
    s.begin_capture(art.CaptureMode.GLOBAL)
    fork = art.Event(dev)
    fork.record(s)
    lane.wait(fork)
    art.launch_host_func(runs.append, 1, stream=lane)  # a node on a forked lane
    join = art.Event(dev)
    join.record(lane)
    s.wait(join)
    g = s.end_capture()
    accepted = [g.launch(st) for _ in range(50)]
    stop = threading.Event()

    def launcher():
        while not stop.is_set():
            try:
                g.launch(st)
            except art.InvalidHandleError:
                return
            accepted.append(None)
    t = threading.Thread(target=launcher)
    t.start()
    g.destroy(timeout=30)
    stop.set()
    t.join(30)
    st.synchronize(30)
    assert len(runs) == len(accepted)
    with pytest.raises(art.InvalidHandleError):
        g.launch(st)
    for x in (s, lane, st):
        x.destroy()


@pytest.mark.parametrize("how", ["stream", "free_async", "after"])
def test_a_replay_queued_before_a_stream_ordered_free_still_runs_on_its_buffer(how):
    # (the run-time check once took any free as fatal: the replay failed with 107017 though
    # the free was ordered behind it, where a plain kernel runs)
    s = art.Stream()
    x = art.malloc(4096)
    art.memset(x, 0)

    def bump(a):
        a[:] = a + 1
    s.begin_capture()
    art.launch(bump, x, stream=s)
    g = s.end_capture()
    other = art.Stream()
    blocker = art.Notify()
    s.wait_notify(blocker)  # the replay is queued behind this
    g.launch(s)
    if how == "stream":
        x.free(stream=s)
    elif how == "free_async":
        art.free_async(x, s)
    blocker.record(other)
    if how == "after":
        x.free()
    s.synchronize(timeout=10)
    g.destroy()
    s.destroy(), other.destroy()
