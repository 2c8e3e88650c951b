"""The compiled build of the hot modules (make accel) and their Python source do the same thing;
ASCENTRT_PURE_PYTHON=1 keeps to the source, and a build older than its source never runs."""

import json
import os
import subprocess
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES

import pytest

from ascentrt import accel
from ascentrt.memory import ArenaChunks

# A deterministic pool workload: each step frees one live buffer (on a stream or not) and
# allocates another size; prints what a user can observe (addresses, stats, counts).
WORKLOAD = r"""
import json, random, sys
import numpy as np
import ascentrt as art, ascentrt.accel as accel
import ascentrt.acl  # (its compiled module loads with it: every module of accel.MODULES runs)
rng = random.Random(7)
dev = art.set_device(0)
streams = [dev.create_stream() for _ in range(3)]
live, seen = [], []
for i in range(3000):
    if live and (len(live) > 40 or rng.random() < 0.45):
        buf, s = live.pop(rng.randrange(len(live)))
        buf.free(s)
    s = rng.choice(streams + [None])
    buf = art.malloc(int(2 ** rng.uniform(6, 23)), stream=s)
    live.append((buf, s))
    seen.append(buf.ptr - dev._memory.base)
# numpy integers where sizes go: both paths take them as the ints they are
pool = art.MemPool(release_threshold=np.int64(1 << 22), split_limit=np.uint32(1 << 26))
pool.release_threshold = np.int64(1 << 23)
kept = [pool.malloc_async(np.int64(4096 * (i + 1))) for i in range(8)]
for buf in kept:
    buf.free()
seen.append(pool.trim_to(np.int64(0)))
art.configure_pool(split_limit=np.int64(1 << 27))
art.configure_pool(split_limit=None)
stats = art.memory_stats()
print(json.dumps({"compiled": accel.compiled(), "seen": seen,
                  "stats": {k: v for k, v in stats.items() if isinstance(v, int)}}))
for buf, s in live:
    buf.free(s)
"""


def _run(pure: bool) -> dict:
    env = dict(os.environ, ASCENTRT_PURE_PYTHON="1" if pure else "0", ASCENTRT_USAGE_PUBLISH="0")
    out = subprocess.run([sys.executable, "-c", WORKLOAD], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_compiled_build_and_the_source_hand_out_the_same_memory():
    pure = _run(pure=True)
    assert pure["compiled"] == []
    if not accel.built():
        pytest.skip("no compiled build here (make accel): only the source ran")
    fast = _run(pure=False)
    assert fast["compiled"] == list(accel.MODULES)
    assert fast["seen"] == pure["seen"]
    assert fast["stats"] == pure["stats"]


# A deterministic program on the simulated NPU that reaches every kind of step: kernels with
# declared durations, rooflines, block_dim and the default cost; pinned, pageable and D2D
# copies and a memset; events across streams, priorities, a host function, a notify wait that
# times out in virtual time, memory-bound kernels sharing the bandwidth, a graph replay, and
# malloc / free costs. Prints every task's times and the clock at the end.
SIM_WORKLOAD = r"""
import json, time, numpy as np
import ascentrt as art, ascentrt.accel as accel
from ascentrt.kernels import add, noop
dev = art.set_device(0)
n = 4 << 20
host, dev_a, dev_b = art.malloc_host(n), art.malloc(n), art.malloc(n)
pageable = np.ones(n, np.uint8)
s1, s2 = dev.create_stream(), dev.create_stream(priority=0)
f = lambda b: b.view(np.float32)
with art.profile() as prof:
    for i in range(6):
        art.memcpy_async(dev_a, host, stream=s1)
        art.launch(add, f(dev_b), f(dev_a), f(dev_a), stream=s1)
        art.launch(noop, stream=s2, cost=2e-6 * (i + 1), block_dim=1 + i)
        art.launch(noop, stream=s2, cost={"flops": 1e9, "bytes": 1e6}, block_dim=2)
        ev = art.Event(timing=True)
        ev.record(s1)
        s2.wait(ev)
        art.launch(lambda: None, stream=s2)  # no declared cost: the preset's default
        art.memcpy_async(host, dev_b, stream=s2)
    art.memcpy_async(dev_a, pageable, stream=s1)
    art.memcpy_async(dev_b, dev_a, stream=s2)
    art.memset_async(dev_b, 7, stream=s1)
    s1.synchronize()
    art.launch_host_func(time.sleep, 0.05, stream=s1)  # still running at the host calls after it
    for _ in range(3):
        art.launch(noop, stream=s2, cost=1e-6)
    for s in (s1, s2):  # memory-bound kernels at once: they share the bandwidth
        art.launch(noop, stream=s, cost={"bytes": 4e9}, block_dim=1)
    notify = art.Notify()
    try:
        art.wait_and_reset_notify(notify, s1, timeout=0.001)
        s1.synchronize(timeout=10)
    except art.AscentError as e:
        timed_out = e.code
    art.launch(noop, stream=s2, cost=1e-5)
    graph = art.TaskGraph()
    for k in range(3):
        graph.add_kernel(noop, name=f"g{k}", cost=1e-6 * (k + 1))
    plan = graph.schedule(num_streams=2)
    plan.run(plan.make_streams(), 10)
    art.malloc(3 << 20).free()
    for s in (s1, s2):
        s.synchronize()
tasks = [(t.kind, t.stream, t.start_ns, t.end_ns) for t in prof.snapshot().tasks]
print(json.dumps({"compiled": accel.compiled(), "tasks": tasks, "timed_out": timed_out,
                  "now": dev.now_ns(), "result": float(f(dev_a).numpy().sum())}))
for b in (host, dev_a, dev_b):
    b.free()
"""


def test_the_compiled_simulator_and_its_source_give_the_same_timeline():
    def run(pure: bool) -> dict:
        env = dict(os.environ, ASCENTRT_PURE_PYTHON="1" if pure else "0", ASCENTRT_BACKEND="sim",
                   ASCENTRT_USAGE_PUBLISH="0")
        out = subprocess.run([sys.executable, "-c", SIM_WORKLOAD], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])
    source = run(pure=True)
    assert source["compiled"] == [] and len(source["tasks"]) > 50 and source["timed_out"]
    if "ascentrt.backends.sim" not in accel.built():
        pytest.skip("no compiled build here (make accel): only the source ran")
    built = run(pure=False)
    assert "ascentrt.backends.sim" in built["compiled"]
    assert built == dict(source, compiled=built["compiled"])


def test_this_process_runs_the_build_unless_told_to_keep_to_the_source():
    wanted = [] if os.environ.get("ASCENTRT_PURE_PYTHON", "0") not in ("", "0") else accel.built()
    assert accel.compiled() == [name for name in wanted if name in sys.modules]


def test_only_the_compiled_pool_takes_its_cache_paths_without_the_lock():
    from ascentrt.memory import pool
    compiled = "ascentrt.memory.pool" in accel.compiled()
    assert pool.ATOMIC == compiled
    lock = pool.BlockPool(ArenaChunks(1 << 30))._lock
    # From source the lock is reentrant (an interrupted acquire can be undone); compiled, a
    # plain lock, whose holder the lock-free paths can see.
    assert hasattr(lock, "_is_owned") is not compiled


def test_one_build_older_than_its_source_keeps_every_compiled_module_to_source(tmp_path, monkeypatch):
    # The modules are built together and call each other natively: an edit of one must not
    # leave the others' compiled code (which holds the old one inside) running.
    names = ("ascentrt.memory.fresh", "ascentrt.memory.edited")
    (tmp_path / "memory").mkdir()
    for name in names:
        source = tmp_path / "memory" / (name.rsplit(".", 1)[1] + ".py")
        source.write_text("VALUE = 'source'\n")
        source.with_name(source.stem + EXTENSION_SUFFIXES[0]).write_bytes(b"not loaded")
    os.utime(tmp_path / "memory" / ("edited" + EXTENSION_SUFFIXES[0]), (1, 1))  # edited since
    monkeypatch.setattr(accel, "_PACKAGE", tmp_path)
    monkeypatch.setattr(accel, "MODULES", names)
    monkeypatch.setattr(accel, "_from_source", set())
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delenv("ASCENTRT_PURE_PYTHON", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accel.keep_to_source_if_asked()
    assert any("edited is older than its source" in str(w.message) for w in caught)
    for name in names:
        spec = accel._SourceFirst.find_spec(name)
        assert spec is not None and spec.origin.endswith(name.rsplit(".", 1)[1] + ".py")
    assert accel._SourceFirst.find_spec("ascentrt.memory.other") is None


def test_a_build_older_than_the_device_contract_keeps_to_source(tmp_path, monkeypatch):
    # The simulator's build inlines the contract's Final operation kinds (backends/base.py):
    # an edit of them makes every build stale, as an edit of the memory types does.
    names = ("ascentrt.memory.built",)
    (tmp_path / "memory").mkdir()
    (tmp_path / "backends").mkdir()
    source = tmp_path / "memory" / "built.py"
    source.write_text("VALUE = 'source'\n")
    build = source.with_name("built" + EXTENSION_SUFFIXES[0])
    build.write_bytes(b"not loaded")
    contract = tmp_path / "backends" / "base.py"
    contract.write_text("KERNEL = 0\n")
    os.utime(source, (1000, 1000))
    os.utime(build, (2000, 2000))      # built after its own source...
    os.utime(contract, (3000, 3000))   # ...but before the contract's last edit
    monkeypatch.setattr(accel, "_PACKAGE", tmp_path)
    monkeypatch.setattr(accel, "MODULES", names)
    monkeypatch.setattr(accel, "_from_source", set())
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delenv("ASCENTRT_PURE_PYTHON", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accel.keep_to_source_if_asked()
    assert any("built is older than its source" in str(w.message) for w in caught)
    spec = accel._SourceFirst.find_spec("ascentrt.memory.built")
    assert spec is not None and spec.origin.endswith("built.py")


def test_info_says_whether_the_hot_paths_run_compiled(capsys):
    from ascentrt import cli
    assert cli.main(["info"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Hot paths:"))
    compiled = accel.compiled()
    assert (all(name in line for name in compiled) if compiled else "Python source" in line)


def test_info_says_a_compiled_build_switched_off_by_pure_python_is_there(monkeypatch):
    # (it said "compiled build: make accel" of a build that exists, only switched off)
    monkeypatch.setattr(accel, "compiled", lambda: [])
    monkeypatch.setattr(accel, "built", lambda: list(accel.MODULES))
    monkeypatch.setenv("ASCENTRT_PURE_PYTHON", "1")
    text = accel.describe()
    assert "switched off by ASCENTRT_PURE_PYTHON=1" in text and "make accel" not in text
    monkeypatch.setattr(accel, "built", lambda: [])
    assert accel.describe() == "Python source (a compiled build comes from make accel in a source checkout)"


def test_a_bad_pure_python_switch_runs_the_source_and_is_refused_with_its_code_at_first_use():
    env = dict(os.environ, ASCENTRT_PURE_PYTHON="maybe")
    code = ("import ascentrt, ascentrt.accel as a; print('compiled', a.compiled()); "
            "ascentrt.malloc(64)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode != 0 and "compiled []" in out.stdout
    assert "ASCENTRT_PURE_PYTHON='maybe'" in out.stderr and "100000" in out.stderr
    out = subprocess.run([sys.executable, "-m", "ascentrt", "info"], capture_output=True,
                         text=True, env=env, timeout=60)  # the command: one line, no traceback
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "ASCENTRT_PURE_PYTHON" in out.stderr


def test_a_compiled_module_gets_its_docstrings_from_the_builds_file_or_from_a_newer_source(tmp_path, monkeypatch):
    # (parsing the source at each import cost ~20 ms of `import ascentrt` for sim.py alone:
    # the build saves the docstrings, and a source edited since is read instead)
    (tmp_path / "memory").mkdir()
    source = tmp_path / "memory" / "built.py"
    source.write_text('"""From the source."""\n\nclass Thing:\n    """A thing, from the source."""\n')
    saved = accel._docstrings_file(source)
    saved.write_text('{"": "From the build.", "Thing": "A thing, from the build."}')
    monkeypatch.setattr(accel, "_PACKAGE", tmp_path)

    def restored() -> tuple:
        thing = type("Thing", (), {})
        namespace = {"__name__": "ascentrt.memory.built", "__file__": "built.so", "Thing": thing}
        accel.restore_docstrings(namespace)
        return namespace["__doc__"], thing.__doc__

    os.utime(source, (1000, 1000))
    os.utime(saved, (2000, 2000))
    assert restored() == ("From the build.", "A thing, from the build.")
    os.utime(saved, (500, 500))  # the source was edited after the build
    assert restored() == ("From the source.", "A thing, from the source.")
    saved.write_text("not json")
    os.utime(saved, (2000, 2000))
    assert restored() == ("From the source.", "A thing, from the source.")
