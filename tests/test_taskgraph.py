"""TaskGraph: derived dependencies, and a scheduler that never violates one nor waits needlessly."""

import random
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ascentrt as art

T = 20.0
SLOTS, SLOT_BYTES = 6, 64


@pytest.fixture
def pool(dev):
    b = art.malloc(SLOTS * SLOT_BYTES)
    yield b
    b.free()


def _slot(buf, i):
    return buf[i * SLOT_BYTES:(i + 1) * SLOT_BYTES]


# ---- dependency derivation ----------------------------------------------------------------------

def test_read_after_write_write_after_read_and_write_after_write(pool):
    g = art.TaskGraph()
    a, b = _slot(pool, 0), _slot(pool, 1)
    w = g.add_kernel(art.kernels.noop, reads=[], writes=[a])
    r = g.add_kernel(art.kernels.noop, reads=[a], writes=[b])
    w2 = g.add_kernel(art.kernels.noop, reads=[], writes=[b])
    w3 = g.add_kernel(art.kernels.noop, reads=[], writes=[a])
    assert r.deps == {w.index: "RAW"}
    assert w2.deps == {r.index: "WAW"}
    assert w3.deps == {r.index: "WAR"}  # the WAW on w is implied through r


def test_disjoint_byte_ranges_of_one_buffer_do_not_depend(pool):
    g = art.TaskGraph()
    x = g.add_memset(_slot(pool, 0), 1)
    y = g.add_memset(_slot(pool, 1), 2)
    z = g.add_copy(_slot(pool, 2), pool[0:2 * SLOT_BYTES], SLOT_BYTES)  # reads slot 0 only
    assert y.deps == {} and z.deps == {x.index: "RAW"}


def test_only_direct_dependencies_are_kept(pool):
    g = art.TaskGraph()
    a = _slot(pool, 0)
    first = g.add_memset(a, 1)
    second = g.add_kernel(art.kernels.noop, reads=[a], writes=[a])
    third = g.add_kernel(art.kernels.noop, reads=[a], writes=[a])
    assert third.deps == {second.index: "RAW"}
    assert g.depends_on(third, first)


def test_explicit_dependencies_and_their_direction(pool):
    g = art.TaskGraph()
    x = g.add_host_func(lambda: None)
    y = g.add_host_func(lambda: None, after=[x])
    z = g.add_host_func(lambda: None)
    g.add_dependency(y, z)
    assert y.deps == {x.index: "explicit"} and z.deps == {y.index: "explicit"}
    assert g.depends_on(z, x)
    with pytest.raises(art.InvalidArgumentError):
        g.add_dependency(z, x)
    with pytest.raises(art.InvalidArgumentError):
        g.add_kernel(art.kernels.noop, after=[art.TaskGraph().add_host_func(print)])


def test_bad_arguments_are_refused(pool):
    g = art.TaskGraph()
    with pytest.raises(art.InvalidArgumentError):
        g.add_kernel(art.kernels.noop, reads=[42])
    with pytest.raises(art.InvalidArgumentError):
        g.add_kernel(art.kernels.noop, cost=-1)
    with pytest.raises(art.InvalidArgumentError):
        g.schedule(num_streams=0)
    with pytest.raises(art.InvalidArgumentError):
        g.schedule(num_streams=2, policy="fastest")
    assert len(g) == 0


# ---- a reference checker, independent of the scheduler's own bookkeeping ---------------------------

def _happens_before(schedule, skip=None):
    """For each task, the set of tasks guaranteed finished before it starts (stream order + waits)."""
    before = {}
    last_on = {}
    waits = [w for k, w in enumerate(schedule.waits) if k != skip]
    waited = {}
    for v, p in waits:
        waited.setdefault(v, []).append(p)
    for v in schedule.order:
        s = schedule.assignment[v]
        known = set()
        if s in last_on:
            prev = last_on[s]
            known |= before[prev] | {prev}
        for p in waited.get(v, ()):
            # a wait on the event recorded right after p: p and all p's stream had before it
            known |= before[p] | {p}
        before[v] = known
        last_on[s] = v
    return before


def _violations(graph, before):
    return [(p, i) for p, i, _ in graph.edges() if p not in before[i]]


def _random_graph(rng, pool, n, delays, log):
    g = art.TaskGraph()
    for k in range(n):
        reads = [_slot(pool, i) for i in rng.sample(range(SLOTS), rng.randint(0, 2))]
        writes = [_slot(pool, i) for i in rng.sample(range(SLOTS), rng.randint(0, 2))]
        g.add_kernel(_timed, k, delays[k], log, reads=reads, writes=writes, name=f"t{k}",
                     cost=delays[k] * 1000)
    return g


def _timed(k, delay, log):
    start = time.perf_counter()
    time.sleep(delay)  # simulated device time of uneven length, not synchronization
    log[k] = (start, time.perf_counter())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 32 - 1), n=st.integers(2, 14), streams=st.integers(2, 4),
       policy=st.sampled_from(["critical_path", "round_robin"]))
def test_scheduler_never_violates_a_dependency_and_inserts_no_redundant_wait(pool, seed, n, streams,
                                                                           policy):
    rng = random.Random(seed)
    delays = [rng.choice([0.0, 0.0005, 0.002, 0.004]) for _ in range(n)]
    log = {}
    g = _random_graph(rng, pool, n, delays, log)
    sched = g.schedule(num_streams=streams, policy=policy)
    # On paper: every dependency is implied, and dropping any one inserted wait breaks one.
    assert not _violations(g, _happens_before(sched))
    for k in range(len(sched.waits)):
        assert _violations(g, _happens_before(sched, skip=k)), f"wait {sched.waits[k]} is redundant"
    assert len(sched.waits) <= sched.naive_waits
    # For real: every task started after everything it depends on (transitively) had finished.
    sched.run(timeout=T)
    assert sorted(log) == list(range(n))
    for later in g.nodes:
        for earlier in g.nodes[:later.index]:
            if g.depends_on(later, earlier):
                assert log[earlier.index][1] <= log[later.index][0], (earlier, later)


# ---- assignment ---------------------------------------------------------------------------------------

def _chains(pool, chains=4, length=3, cost=2.0, fn=art.kernels.noop):
    g = art.TaskGraph()
    tails = []
    for c in range(chains):
        prev = None
        for k in range(length):
            node = g.add_kernel(fn, reads=[], writes=[_slot(pool, c)], name=f"c{c}.{k}", cost=cost)
            prev = node
        tails.append(prev)
    g.add_kernel(fn, reads=[_slot(pool, c) for c in range(chains)], writes=[_slot(pool, 5)],
                 name="join", cost=1.0)
    return g


def test_independent_chains_get_a_stream_each_and_one_wait_per_join_edge(pool):
    g = _chains(pool)
    sched = g.schedule(num_streams=4)
    report = sched.report()
    assert report["tasks_per_stream"] == [4, 3, 3, 3]
    assert report["waits"] == 3 and report["naive_waits"] == 3
    assert report["cross_stream_conflicts"] == 9   # the join reads what 9 tasks elsewhere wrote
    rr = g.schedule(num_streams=4, policy="round_robin").report()
    assert rr["naive_waits"] > report["naive_waits"]


def test_stream_order_makes_waits_on_chains_sharing_a_stream_redundant(dev):
    buf = art.malloc(8 * SLOT_BYTES + SLOT_BYTES)
    g = art.TaskGraph()
    for c in range(8):
        for _ in range(2):
            g.add_kernel(art.kernels.noop, reads=[], writes=[_slot(buf, c)], cost=2.0)
    g.add_kernel(art.kernels.noop, reads=[_slot(buf, c) for c in range(8)], writes=[_slot(buf, 8)])
    report = g.schedule(num_streams=4).report()
    assert report["tasks_per_stream"] == [5, 4, 4, 4]
    assert report["naive_waits"] == 6 and report["waits"] == 3  # one per other stream
    buf.free()


def test_the_critical_path_runs_on_the_highest_priority_stream(pool):
    g = art.TaskGraph()
    a, b = _slot(pool, 0), _slot(pool, 1)
    long = [g.add_kernel(art.kernels.noop, reads=[], writes=[a], cost=10.0) for _ in range(3)]
    short = g.add_kernel(art.kernels.noop, reads=[], writes=[b], cost=1.0)
    sched = g.schedule(num_streams=2)
    assert sched.critical_path == [n.index for n in long]
    assert all(sched.assignment[n.index] == 0 for n in long)
    assert sched.assignment[short.index] == 1
    streams = sched.make_streams()
    assert [s.priority for s in streams] == [0, 1]
    for s in streams:
        s.destroy()


def test_a_schedule_captured_into_a_graph_gives_the_eager_result(pool):
    x = [_slot(pool, i).view(np.float32) for i in range(SLOTS)]

    def build():
        g = art.TaskGraph()
        for i in range(4):
            g.add_memset(_slot(pool, i), i + 1)
            g.add_kernel(art.kernels.scale, x[i], x[i], 2.0)
        g.add_kernel(art.kernels.add, x[4], x[0], x[1])
        g.add_kernel(art.kernels.add, x[5], x[2], x[3])
        g.add_kernel(art.kernels.add, x[4], x[4], x[5])
        return g

    pool.numpy()[:] = 0
    build().schedule(num_streams=3).run(timeout=T)
    eager = pool.numpy().copy()
    pool.numpy()[:] = 0
    graph = build().schedule(num_streams=3).capture()
    assert not pool.numpy().any()
    graph.execute(T)
    assert np.array_equal(pool.numpy(), eager)
    assert graph.plan_summary()["lanes"] == 3
    graph.destroy()


@pytest.mark.parametrize("how", ["run", "capture"])
@pytest.mark.parametrize("where", ["argument", "reads"])
def test_a_run_with_a_freed_buffer_is_refused_before_any_task_runs(pool, how, where):
    # (run() submitted the first memset, which ran, before the second was refused with 107017)
    pool.numpy()[:] = 0
    gone = art.malloc(64)
    g = art.TaskGraph()
    g.add_memset(pool, 0x11)
    if where == "argument":
        g.add_memset(gone, 0x22)
    else:
        g.add_host_func(lambda: None, reads=[gone.view(np.float32)])
    gone.free()
    with pytest.raises(art.InvalidHandleError) as e:
        if how == "run":
            g.schedule(num_streams=1).run(timeout=T)
        else:
            g.schedule(num_streams=1).capture()
    assert e.value.code == art.ErrorCode.RT_INVALID_HANDLE and "task 1 " in str(e.value)
    art.Device(0).synchronize(T)
    assert not pool.numpy().any()


def test_dot_and_json_of_a_task_graph(pool):
    g = _chains(pool, chains=2, length=2)
    sched = g.schedule(num_streams=2)
    dot = g.to_dot(sched.assignment)
    assert "RAW" in dot and "stream 1" in dot
    assert '"why": "WAW"' in g.to_json()


def _affine(out, x, a):
    np.multiply(x, a, out=out)
    out += 1.0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["kernel", "copy", "memset"]), st.integers(0, SLOTS - 1),
                              st.integers(0, SLOTS - 1), st.integers(-2, 2)), min_size=1, max_size=20),
       streams=st.integers(2, 4))
def test_scheduled_runs_and_their_captured_graph_match_sequential_execution(pool, ops, streams):
    views = [_slot(pool, i).view(np.float32) for i in range(SLOTS)]

    def build():
        g = art.TaskGraph()
        for kind, dst, src, a in ops:
            if kind == "kernel":
                g.add_kernel(_affine, views[dst], views[src], float(a))
            elif kind == "copy" and dst != src:
                g.add_copy(_slot(pool, dst), _slot(pool, src))
            else:
                g.add_memset(_slot(pool, dst), abs(a))
        return g

    def reset():
        pool.numpy(np.float32)[:] = np.arange(SLOTS * SLOT_BYTES // 4, dtype=np.float32) / 3

    reset()
    build().schedule(num_streams=1).run(timeout=T)
    want = pool.numpy().copy()
    reset()
    build().schedule(num_streams=streams).run(timeout=T)
    assert np.array_equal(pool.numpy(), want)
    reset()
    graph = build().schedule(num_streams=streams).capture()
    graph.execute(T)
    assert np.array_equal(pool.numpy(), want)
    graph.destroy()
