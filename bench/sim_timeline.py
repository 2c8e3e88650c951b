"""Dump every virtual time of a set of varied sim programs to JSON, to check that a change to
the simulator keeps its timeline bit-identical.

Usage: PYTHONPATH=SRC python bench/sim_timeline.py OUT.json [--pure]
       python bench/sim_timeline.py --compare A.json B.json
Each program runs in its own process on the sim backend (ASCENTRT_PURE_PYTHON=1 with --pure,
else the compiled build where there is one), once plain (it prints the times it observes:
now_ns, event timestamps, elapsed times, queries) and once profiled (every task's enqueue,
start and end, every API call's span, memory samples). The programs: the bench_sim program
with timing events, a random mix of copies, memsets, costed kernels, block_dim, priorities,
events, notifies, host functions, queries, a poll loop, synchronous pageable copies, a
captured graph's replays and a full submission queue on four presets (one of shared
processors), peer copies with cross-device events and hccl all-reduce on four devices, and
the examples that run on sim. What varies from run to run by nature is left out: addresses,
thread ids, pids, wall-clock stamps and the polls of a callback report thread.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SHARED = json.dumps({"shared_processors": 1.5, "default_block_dim": 1, "crowded_processors": 1.2})

BENCH_PROGRAM = r"""
import sys, json
import ascentrt as art
from ascentrt.kernels import noop
n = int(sys.argv[1])
streams = [art.Stream() for _ in range(4)]
evs = []
for i in range(n):
    s = streams[i % 4]
    art.launch(noop, stream=s)
    if i % 8 == 7:
        streams[(i + 1) % 4].wait(s.record())
    if i % 101 == 0:
        ev = art.Event(timing=True); ev.record(s); evs.append(ev)
for s in streams:
    s.synchronize()
print(json.dumps([art.Device(0).now_ns(), [e.timestamp_ns for e in evs]]))
"""

MIX_PROGRAM = r"""
# (prints every virtual time it observes, as one JSON list)
import json, sys
import numpy as np
import ascentrt as art
from ascentrt.kernels import noop, add

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
rng = np.random.default_rng(seed)
out = []
dev = art.Device(0)
P = lambda *a: out.append([dev.now_ns(), *a])
n = 1 << 16
a, b, c = art.malloc(n * 4), art.malloc(n * 4), art.malloc(n * 4)
h = art.malloc_host(n * 4)
pageable = np.zeros(n, np.float32)
hi, lo, mid = dev.create_stream(priority=0), dev.create_stream(priority=7), dev.create_stream(priority=3)
streams = [hi, lo, mid, dev.create_stream()]
evs = []
for i in range(300):
    s = streams[int(rng.integers(4))]
    r = int(rng.integers(14))
    if r == 0:
        art.memcpy_async(a, h, stream=s)
    elif r == 1:
        art.memcpy_async(h, b, stream=s)
    elif r == 2:
        art.memcpy_async(c, a, stream=s)
    elif r == 3:
        art.memset_async(b, 0, stream=s)
    elif r == 4:
        art.launch(add, c.view(np.float32), a.view(np.float32), b.view(np.float32), stream=s)
    elif r == 5:
        art.launch(noop, stream=s, cost=float(rng.integers(1, 50)) * 1e-6, block_dim=int(rng.integers(1, 30)))
    elif r == 6:
        art.launch(noop, stream=s, cost={"flops": 1e9, "bytes": 1e6}, block_dim=int(rng.integers(1, 24)))
    elif r == 7:
        ev = art.Event(timing=True); ev.record(s); evs.append(ev)
    elif r == 8 and evs:
        s.wait(evs[int(rng.integers(len(evs)))])
    elif r == 9:
        art.launch_host_func(lambda: None, stream=s, blocking=bool(rng.integers(2)))
    elif r == 10:
        out.append(["q", s.query()])
    elif r == 11:
        art.memcpy(pageable, a)  # synchronous, pageable
        P("sync-copy")
    elif r == 12:
        art.launch(noop, stream=s)
    else:
        nt = dev.create_notify()
        nt.record(streams[int(rng.integers(4))]); nt.wait_and_reset(s)
    if i % 37 == 0:
        P("tick", i)
    if i % 97 == 96:
        s.synchronize(); P("sync", i)
# poll loop
s = streams[0]
art.launch(noop, stream=s, cost=1e-3)
polls = 0
while not s.query():
    polls += 1
P("polled", polls)
dev.synchronize()
P("devsync")
out.append(["ev", [e.timestamp_ns for e in evs]])
out.append(["el", [art.elapsed_time(evs[i], evs[i + 1]) for i in range(len(evs) - 1)]])
# graph capture and replay
g_s = dev.create_stream()
g_s.begin_capture()
for k in range(5):
    art.launch(noop, stream=g_s, cost=2e-6 * (k + 1), name=f"node{k}")
    art.memcpy_async(c, a, stream=g_s)
graph = g_s.end_capture()
for _ in range(3):
    graph.launch(g_s)
    art.launch(noop, stream=streams[1], cost=5e-6)
g_s.synchronize(); P("graph")
# SQ-full stall
depth = dev._backend.preset.queue_depth
t0 = dev.now_ns()
for i in range(depth + 5):
    art.launch(noop, stream=streams[2], cost=1e-5)
P("sqfull", dev.now_ns() - t0)
dev.synchronize(); P("end")
print(json.dumps(out))
"""

MULTI_PROGRAM = r"""
# (peer copies, cross-device events and hccl all-reduce on 4 devices)
import json, os
os.environ.setdefault("ASCENTRT_DEVICES", "4")
import numpy as np
import ascentrt as art
from ascentrt import hccl
out = []
devs = [art.Device(i) for i in range(4)]
for i in range(4):
    for j in range(4):
        if i != j:
            devs[i].enable_peer_access(j)
n = 1 << 18
bufs = [art.malloc(n * 4, device=i) for i in range(4)]
rbufs = [art.malloc(n * 4, device=i) for i in range(4)]
for i, bb in enumerate(bufs):
    bb.numpy(np.float32)[:] = i + 1
comms = hccl.comm_init_all(list(range(4)))
streams = [d.create_stream() for d in devs]
for step in range(4):
    for r in range(4):
        art.launch(lambda: None, stream=streams[r], cost=1e-5 * (r + 1))
    for r in range(4):
        hccl.all_reduce(bufs[r], rbufs[r], n, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM, comms[r], streams[r])
    art.memcpy_async(bufs[(step + 1) % 4], bufs[step], stream=streams[step])
    ev = devs[step].create_event()
    ev.record(streams[step]); streams[(step + 2) % 4].wait(ev)
    out.append([d.now_ns() for d in devs])
for s in streams:
    s.synchronize()
out.append([d.now_ns() for d in devs])
out.append(float(rbufs[0].numpy(np.float32)[0]))
print(json.dumps(out))
"""


def _runs(folder: str) -> list[tuple[str, list[str], dict]]:
    """(name, argv, extra environment) of every program run."""
    paths = {}
    for name, text in (("bench", BENCH_PROGRAM), ("mix", MIX_PROGRAM), ("multi", MULTI_PROGRAM)):
        paths[name] = os.path.join(folder, f"{name}.py")
        Path(paths[name]).write_text(text)
    runs = [("bench", [paths["bench"], "3000"], {})]
    for seed, preset in ((0, "ascend910b"), (1, "ascend310p"), (2, "h200"), (3, "ascend910b")):
        runs.append((f"mix{seed}-{preset}", [paths["mix"], str(seed)], {"ASCENTRT_SIM_PRESET": preset}))
    runs.append(("mix4-shared", [paths["mix"], "4"], {"ASCENTRT_SIM_VARY": SHARED}))
    runs.append(("multi", [paths["multi"]], {}))
    runs.append(("multi-h200", [paths["multi"]], {"ASCENTRT_SIM_PRESET": "h200"}))
    for ex in ("quickstart.py", "events_elapsed.py", "host_functions.py", "pipeline.py",
               "failure_modes.py", "memory_pool.py", "graphs/capture_replay.py",
               "graphs/task_graph_schedule.py", "hccl/data_parallel.py", "sim/copy_engines.py",
               "sim/pool_saving.py", "acl/multi_stream_events.py", "acl/timing.py",
               "acl/callbacks.py", "acl/memory_copies.py"):
        runs.append((ex, [str(EXAMPLES / ex)], {}))
    return runs


def _profile(doc: dict) -> dict:
    """The virtual-time tables of a profile.json, without what varies by nature."""
    keep = {}
    for key in ("duration_ns", "tasks", "api_calls", "memory", "allocations", "devices",
                "streams", "collectives", "ranges", "marks"):
        value = doc.get(key)
        if isinstance(value, dict) and "columns" in value:
            drop = {i for i, c in enumerate(value["columns"]) if c in ("thread", "addr", "site")}
            value = [[x for i, x in enumerate(row) if i not in drop] for row in value["rows"]]
            if key == "api_calls":  # (a report thread polls at the real world's pace)
                value = [row for row in value if row[0] != "process_reports"]
        keep[key] = value
    return keep


def dump(out: str, pure: bool) -> None:
    """Run every program, plain and profiled, and write what they observed to `out`."""
    result = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, argv, extra in _runs(folder):
            for profiled in (False, True):
                env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_PURE_PYTHON="1" if pure else "0",
                           **extra)
                work = tempfile.mkdtemp(dir=folder)
                if profiled:
                    env["ASCENTRT_PROFILE"] = os.path.join(work, "prof")
                r = subprocess.run([sys.executable, *argv], env=env, capture_output=True,
                                   text=True, timeout=600, cwd=work)
                entry: dict = {"rc": r.returncode, "stdout": re.sub(r"0x[0-9a-f]+", "0x?", r.stdout)}
                if r.returncode:
                    entry["stderr_tail"] = r.stderr.strip().splitlines()[-1:]
                if profiled:
                    path = os.path.join(work, "prof", "profile.json")
                    entry["profile"] = _profile(json.loads(Path(path).read_text())) \
                        if os.path.exists(path) else None
                result[name + ("+profile" if profiled else "")] = entry
                print(name, "profiled" if profiled else "plain", "exit", r.returncode,
                      file=sys.stderr, flush=True)
    Path(out).write_text(json.dumps(result, indent=0, sort_keys=True))


def compare(a: str, b: str) -> int:
    """Print the runs whose times differ between two dumps; the number of them."""
    x, y = json.loads(Path(a).read_text()), json.loads(Path(b).read_text())
    differ = [k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
    for k in differ:
        fields = [f for f in (x.get(k) or {}) if (x.get(k) or {}).get(f) != (y.get(k) or {}).get(f)]
        print(f"differs: {k} ({', '.join(fields) or 'missing'})")
    tasks = sum(len(e["profile"]["tasks"]) for e in x.values() if e.get("profile"))
    print("identical" if not differ else f"{len(differ)} of {len(x)} runs differ",
          f"({len(x)} runs, {tasks} profiled tasks)")
    return len(differ)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    dump(sys.argv[1], "--pure" in sys.argv[2:])
