"""The trace is valid trace-event JSON, and a known two-stream program reads as it ran."""

import json
import threading
from collections import defaultdict

import numpy as np
import pytest

import ascentrt as art
from ascentrt.profiler.trace import HOST_PID, device_pid, trace_json

PHASES = {"X", "M", "s", "f", "i", "C"}
EPS = 0.0015  # us: rounding to ns in the export


def validate_trace(doc: dict) -> dict:
    """Check the trace-event format; returns the events grouped for further checks."""
    assert isinstance(doc["traceEvents"], list)
    json.dumps(doc)  # serializable as is
    tracks = defaultdict(list)
    flows = defaultdict(dict)
    named_processes, named_threads = set(), set()
    for e in doc["traceEvents"]:
        ph = e["ph"]
        assert ph in PHASES, e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if ph == "M":
            assert e["name"] in {"process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index", "process_labels"}, e
            if e["name"] == "process_name":
                named_processes.add(e["pid"])
            if e["name"] == "thread_name":
                named_threads.add((e["pid"], e["tid"]))
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e["name"], str) and e["name"], e
        if ph == "X":
            assert e["dur"] >= 0, e
            tracks[(e["pid"], e["tid"])].append(e)
        elif ph in "sf":
            assert "id" in e and "cat" in e, e
            assert e["ph"] not in flows[(e["cat"], e["id"])], f"duplicate flow end {e}"
            flows[(e["cat"], e["id"])][e["ph"]] = e
        elif ph == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
        elif ph == "i":
            assert e.get("s") in ("t", "p", "g"), e
    # Slices on one track nest: each is disjoint from or inside the ones open before it; and
    # they come in time order (a viewer that reads a track as it comes need not sort it).
    for key, slices in tracks.items():
        assert key[0] in named_processes and key in named_threads, f"unnamed track {key}"
        for a, b in zip(slices, slices[1:]):
            assert b["ts"] >= a["ts"], f"track {key}: {a['name']}@{a['ts']} then {b['name']}@{b['ts']}"
        open_ends = []
        for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
            while open_ends and open_ends[-1] <= e["ts"] + EPS:
                open_ends.pop()
            if open_ends:
                assert e["ts"] + e["dur"] <= open_ends[-1] + EPS, f"partial overlap on {key}: {e}"
            open_ends.append(e["ts"] + e["dur"])
    # Every flow has a start and an end, each inside a slice of its track; ends after starts.
    for key, ends in flows.items():
        assert set(ends) == {"s", "f"}, f"unpaired flow {key}"
        for e in ends.values():
            assert any(x["ts"] - EPS <= e["ts"] <= x["ts"] + x["dur"] + EPS
                       for x in tracks[(e["pid"], e["tid"])]), f"flow {key} not on a slice: {e}"
        assert ends["s"]["ts"] <= ends["f"]["ts"] + EPS, key
        # Direction as drawn: an arrow ends at the start of the innermost slice its "f" binds
        # to, which must not lie before the arrow's start.
        f = ends["f"]
        bound = max((x for x in tracks[(f["pid"], f["tid"])]
                     if x["ts"] - EPS <= f["ts"] <= x["ts"] + x["dur"] + EPS),
                    key=lambda x: (x["ts"], -x["dur"]))
        assert bound["ts"] >= ends["s"]["ts"] - EPS, f"flow {key} points back in time to {bound}"
    return {"tracks": tracks, "flows": flows}


def _spin_kernel(out, gate=None, together=None):
    """A kernel long enough (a few ms) to see overlap; with a gate, it starts spinning once set;
    with a barrier, once the other kernel at it has started too (so that the two overlap even
    on a loaded machine, where one worker may not be scheduled while the other spins)."""
    if gate is not None:
        assert gate.wait(30)
    if together is not None:
        together.wait(30)
    for _ in range(20):
        np.sin(out, out=out)


@pytest.fixture
def two_streams(dev):
    a, b = dev.create_stream(), dev.create_stream()
    yield a, b
    a.destroy(force=True)
    b.destroy(force=True)


def run_two_stream_program(dev, a, b):
    """Stream A: k1, record; stream B: k2 (concurrent with k1), wait(record), k3 (after k1)."""
    x, y = art.malloc(1 << 18), art.malloc(1 << 18)
    # k1 holds its record back until everything is submitted; k2 waits for the same gate, so
    # the two start together however slowly the host submits (else k2 may be over before k1).
    gate = threading.Event()
    real_threads = dev.properties.backend == "cpu" and dev.properties.compute_units >= 2
    together = threading.Barrier(2) if real_threads else None  # (sim: in virtual time)
    with art.profile() as prof:
        with art.profiler.range("submit"):
            art.launch(_spin_kernel, x.view(np.float64), gate, together, stream=a, name="k1")
            ev = a.record()
            art.launch(_spin_kernel, y.view(np.float64), gate, together, stream=b, name="k2")
            b.wait(ev)
            art.launch(_spin_kernel, y.view(np.float64), stream=b, name="k3")
            art.profiler.mark("submitted")
        gate.set()
        b.synchronize(timeout=30)
        a.synchronize(timeout=30)
    x.free()
    y.free()
    return prof.profile


def test_trace_validates_against_the_trace_event_format(dev, two_streams):
    prof = run_two_stream_program(dev, *two_streams)
    groups = validate_trace(trace_json(prof))
    cats = {cat for cat, _ in groups["flows"]}
    assert cats == {"launch", "event"}


def test_two_stream_program_shows_overlap_and_event_order(dev, two_streams):
    a, b = two_streams
    prof = run_two_stream_program(dev, a, b)
    doc = trace_json(prof)
    groups = validate_trace(doc)
    pid = device_pid(dev.id)
    by_name = {e["name"]: e for e in groups["tracks"][(pid, a.id)] + groups["tracks"][(pid, b.id)]}
    k1, k2, k3 = by_name["k1"], by_name["k2"], by_name["k3"]
    assert k1["tid"] == a.id and k2["tid"] == b.id and k3["tid"] == b.id
    # k1 and k2 ran at the same time (two compute units), k3 only after k1 (the event).
    if dev.properties.compute_units >= 2:
        assert k1["ts"] < k2["ts"] + k2["dur"] and k2["ts"] < k1["ts"] + k1["dur"]
    assert k3["ts"] >= k1["ts"] + k1["dur"] - 0.001
    assert k3["ts"] >= k2["ts"] + k2["dur"] - 0.001
    # The event flow goes from the record on A to the wait on B.
    (ev_flow,) = [f for (cat, _), f in groups["flows"].items() if cat == "event"]
    assert (ev_flow["s"]["tid"], ev_flow["f"]["tid"]) == (a.id, b.id)
    # Each kernel has a flow from the launch call on the host.
    launches = [f for (cat, _), f in groups["flows"].items() if cat == "launch"]
    kernel_flows = [f for f in launches if f["f"]["pid"] == pid and
                    any(abs(f["f"]["ts"] - k["ts"]) < 0.002 for k in (k1, k2, k3))]
    assert len(kernel_flows) == 3
    assert all(f["s"]["pid"] == HOST_PID for f in kernel_flows)


def test_host_track_has_api_calls_nested_in_user_range(dev, two_streams):
    prof = run_two_stream_program(dev, *two_streams)
    (rng,) = [r for r in prof.ranges if r.name == "submit"]
    inside = [c.name for c in prof.api_calls if rng.start_ns <= c.start_ns and c.end_ns <= rng.end_ns]
    assert inside == ["launch", "Stream.record", "launch", "Stream.wait", "launch"]
    assert [m.name for m in prof.marks] == ["submitted"]
    marks = [e for e in trace_json(prof)["traceEvents"] if e["ph"] == "i"]
    assert [m["name"] for m in marks] == ["submitted"]


def test_wait_slice_spans_the_time_the_stream_was_blocked(dev, two_streams):
    a, b = two_streams
    prof = run_two_stream_program(dev, a, b)
    k1 = next(t for t in prof.tasks if t.name == "k1")
    wait = next(t for t in prof.tasks if t.kind == "event_wait")
    assert wait.released_by == (dev.id, a.id, k1.task_id + 1)  # the record after k1
    assert wait.end_ns >= k1.end_ns
    assert wait.start_ns <= wait.end_ns


def test_memory_counters_follow_allocations(dev):
    with art.profile() as prof:
        bufs = [art.malloc(1 << 20) for _ in range(3)]
        for buf in bufs:
            buf.free()
    counters = [e for e in trace_json(prof.profile)["traceEvents"] if e["ph"] == "C"
                and e["pid"] == device_pid(dev.id)]
    allocated = [e["args"]["allocated MiB"] for e in counters]
    peak = max(allocated)
    assert peak >= allocated[0] + 3 - 1e-6
    assert allocated[-1] <= allocated[0] + 1e-6


def test_overlapping_slices_of_one_track_move_to_an_overflow_track():
    from ascentrt.profiler import DeviceInfo, Profile, StreamInfo, TaskRecord
    prof = Profile(duration_ns=10_000, devices=[DeviceInfo(0, "d", 1, 1, 1, 1 << 20)],
                   streams=[StreamInfo(0, 5, 0)])
    prof.tasks = [TaskRecord(0, 5, 1, "kernel", "a", 0, 0, 1000, 5000, 0),
                  TaskRecord(0, 5, 2, "kernel", "b", 0, 0, 4000, 8000, 0)]
    groups = validate_trace(trace_json(prof))
    names = sorted(e["name"] for slices in groups["tracks"].values() for e in slices)
    assert names == ["a", "b"]  # nothing dropped
    assert len(groups["tracks"]) == 2


def test_a_notify_record_has_a_forward_arrow_to_the_wait_it_released(dev, two_streams):
    a, b = two_streams
    n = art.Notify()
    gate = threading.Event()
    x = art.malloc(1 << 16)
    with art.profile() as prof:
        b.wait_notify(n)                                   # waits before the record exists
        art.launch(_spin_kernel, x.view(np.float64), gate, stream=a, name="producer")
        a.record_notify(n)
        gate.set()
        b.synchronize(timeout=30)
        a.synchronize(timeout=30)
    x.free()
    groups = validate_trace(trace_json(prof.profile))      # checks the arrow's direction too
    (flow,) = [f for (cat, _), f in groups["flows"].items() if cat == "notify"]
    assert (flow["s"]["tid"], flow["f"]["tid"]) == (a.id, b.id)


def test_a_graph_replays_tasks_belong_to_the_thread_that_launched_it(dev, two_streams):
    # (they carried thread 0: no launch arrows, and the host-bound finding saw none of the
    # launching thread's calls, blaming the program's own code)
    cap, run = two_streams
    cap.begin_capture(art.CaptureMode.GLOBAL)
    art.launch(lambda: None, stream=cap, name="node")
    g = cap.end_capture()
    with art.profile() as prof:
        for _ in range(3):
            g.launch(run)
        run.synchronize(timeout=30)
    nodes = [t for t in prof.profile.tasks if t.name == "node"]
    assert len(nodes) == 3 and {t.thread for t in nodes} == {threading.get_ident()}
    groups = validate_trace(trace_json(prof.profile))
    assert sum(cat == "launch" for cat, _ in groups["flows"]) >= 3


@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_the_streamed_writers_write_the_documents_whole(dev, two_streams, chunk):
    # write_trace and write_json encode a chunk of events / rows at a time: what they write
    # must be exactly the trace_json / to_json document, whatever the chunk size.
    import io
    from ascentrt.profiler.trace import write_trace
    prof = run_two_stream_program(dev, *two_streams)
    out = io.StringIO()
    write_trace(prof, out, chunk=chunk)
    assert json.loads(out.getvalue()) == json.loads(json.dumps(trace_json(prof)))
    out = io.StringIO()
    prof.write_json(out, chunk=chunk)
    assert json.loads(out.getvalue()) == json.loads(json.dumps(prof.to_json()))
    assert type(prof).from_json(json.loads(out.getvalue())).tasks == prof.tasks


def _arrow_sources(doc: dict) -> dict:
    """task slice name -> the names of the host API slices its submit arrows start in."""
    groups = validate_trace(doc)
    out = defaultdict(list)
    for (cat, _), ends in groups["flows"].items():
        if cat != "launch":
            continue
        s, f = ends["s"], ends["f"]
        # (the slice a viewer binds it to: one ending at its instant does not hold it)
        src = [x for x in groups["tracks"][(s["pid"], s["tid"])] if x["cat"] == "api"
               and x["ts"] - 1e-6 <= s["ts"] < x["ts"] + x["dur"] - 1e-6]
        dst = max((x for x in groups["tracks"][(f["pid"], f["tid"])]
                   if x["ts"] - EPS <= f["ts"] <= x["ts"] + x["dur"] + EPS),
                  key=lambda x: (x["ts"], -x["dur"]))
        out[dst["name"]].append(tuple(f"{x['name']}@{x['ts']}" for x in src))
    return out


def test_a_submit_arrow_starts_in_the_call_that_enqueued_the_task():
    # (in virtual time a call enqueues as it ends, and zero-length calls at the start of the
    # submitting one made the arrow start in the next call: kernel A's in Stream.record, the
    # first replay's in the second Graph.launch, some pointing back in time)
    from ascentrt.profiler import DeviceInfo, Profile, StreamInfo, TaskRecord
    from ascentrt.profiler.data import ApiCall
    th = 7
    prof = Profile(duration_ns=200_000, devices=[DeviceInfo(0, "d", 1, 1, 1, 1 << 20)],
                   streams=[StreamInfo(0, 2, 0), StreamInfo(0, 3, 0)], threads={th: "main"})
    prof.api_calls = [ApiCall("set_device", 0, 0, th), ApiCall("Device.create_stream", 0, 0, th),
                      ApiCall("launch", 0, 3000, th), ApiCall("Stream.record", 3000, 4000, th),
                      ApiCall("Stream.begin_capture", 4000, 4000, th), ApiCall("launch", 4000, 4000, th),
                      ApiCall("Graph.launch", 4000, 9000, th), ApiCall("Graph.launch", 9000, 14000, th),
                      ApiCall("Device.synchronize", 14000, 136000, th)]
    prof.tasks = [TaskRecord(0, 2, 1, "kernel", "A", 0, 3000, 4000, 104000, th),
                  TaskRecord(0, 2, 2, "event_record", "rec", 0, 4000, 104000, 104000, th),
                  TaskRecord(0, 3, 1, "kernel", "G1", 0, 9000, 9000, 115000, th),
                  TaskRecord(0, 3, 3, "kernel", "G2", 0, 14000, 115000, 126000, th)]
    sources = _arrow_sources(trace_json(prof))
    assert sources == {"A": [("launch@0.0",)], "rec": [("Stream.record@3.0",)],
                       "G1": [("Graph.launch@4.0",)], "G2": [("Graph.launch@9.0",)]}


def test_replayed_graphs_arrows_come_from_their_own_launch(dev, two_streams):
    cap, run = two_streams
    with art.profile() as prof:
        art.launch(art.kernels.noop, stream=cap, cost=100e-6, name="A")
        cap.record()
        cap.begin_capture(art.CaptureMode.GLOBAL)
        art.launch(art.kernels.noop, stream=cap, cost=10e-6, name="G")
        g = cap.end_capture()
        g.launch(run)
        g.launch(run)
        dev.synchronize()
    sources = _arrow_sources(trace_json(prof.profile))  # (checks no arrow points back too)
    assert [src[0].split("@")[0] for src in sources["A"]] == ["launch"]
    replays = sorted(src[0] for src in sources["G"])
    assert len(replays) == 2 and replays[0] != replays[1]
    assert all(r.startswith("Graph.launch@") for r in replays)


def test_the_reports_timeline_marks_failed_unfinished_and_dropped_tasks():
    # (report.html drew them as tasks that ran: its rows carried no fate or error)
    from ascentrt.profiler.data import ProfileData, TaskRecord
    from ascentrt.profiler.views import FATES, view_data
    prof = ProfileData(duration_ns=100_000)
    prof.tasks = [TaskRecord(0, 2, 1, "kernel", "ok", 0, 0, 0, 10_000, 1),
                  TaskRecord(0, 2, 2, "kernel", "bad", 0, 0, 10_000, 20_000, 1, True,
                             error="ValueError: boom"),
                  TaskRecord(0, 2, 3, "kernel", "never", 0, 0, 20_000, 20_000, 1, fate="dropped"),
                  TaskRecord(0, 3, 1, "notify_wait", "notify_wait", 0, 0, 0, 100_000, 1,
                             fate="unfinished")]
    data = view_data(prof)
    rows = {data["names"][r[2]]: r for t in data["tracks"] for r in t["s"]}
    assert len(rows["ok"]) == 5
    fate = {name: data["fates"][r[5]] for name, r in rows.items() if len(r) > 5}
    assert fate == {"bad": "failed", "never": "dropped", "notify_wait": "unfinished"}
    assert data["names"][rows["bad"][6]] == "ValueError: boom" and rows["never"][6] == -1
    script = (__import__("pathlib").Path(art.profiler.__file__).parent / "report.js").read_text()
    assert "fate-" in script and "D.fates" in script


def test_on_cpu_an_event_records_time_in_the_profile_is_the_events_own(dev):
    # (the record was stamped again after its event completed: the profile's difference of two
    # records read 0.148 ms where elapsed_time said 0.150)
    s = dev.create_stream()
    e1, e2 = art.Event(dev, timing=True), art.Event(dev, timing=True)
    with art.profile() as sess:
        s.record(e1)
        art.launch(lambda: None, stream=s, name="K1")
        s.record(e2)
        s.synchronize()
    recs = sorted((t for t in sess.stop().tasks if t.kind == "event_record"), key=lambda t: t.task_id)
    assert recs[1].end_ns - recs[0].end_ns == round(art.elapsed_time(e1, e2) * 1e6)
    s.destroy()


GRAPH_REPLAYS = """
import numpy as np, ascentrt as art
dev = art.set_device(0)
m, l, r = (dev.create_stream() for _ in range(3))
x, a, b = (art.malloc(4096) for _ in range(3))
m.begin_capture(art.CaptureMode.GLOBAL)
f = m.record(); l.wait(f); r.wait(f)
art.launch(lambda o: None, a, stream=l, name="left", cost=10e-6)
art.launch(lambda o: None, b, stream=r, name="right", cost=20e-6)
m.wait(l.record()); m.wait(r.record())
art.launch(lambda o: None, x, stream=m, name="join", cost=5e-6)
g = m.end_capture()
for i in range(5):
    g.launch(m)
m.synchronize()
art.launch(lambda o: None, x, stream=m, name="eager_after", cost=7e-6)
m.synchronize()
"""
PIPELINE = """
import ascentrt as art
dev = art.set_device(0)
up, work, down = (dev.create_stream() for _ in range(3))
buf = art.malloc(1 << 16)
for i in range(4):
    art.launch(lambda b: None, buf, stream=up, name="h2d", cost=30e-6)
    work.wait(up.record())
    art.launch(lambda b: None, buf, stream=work, name="compute", cost=50e-6)
    down.wait(work.record())
    art.launch(lambda b: None, buf, stream=down, name="d2h", cost=30e-6)
early = up.record()
up.synchronize()
down.wait(early)   # (done before it was reached: no wait)
art.launch(lambda b: None, buf, stream=down, name="last", cost=5e-6)
dev.synchronize()
"""


@pytest.mark.parametrize("program", [GRAPH_REPLAYS, PIPELINE], ids=["graph", "pipeline"])
def test_the_slices_of_each_track_come_in_time_order_with_those_inside_waits(tmp_path, program):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    env.update(ASCENTRT_BACKEND="sim", ASCENTRT_PROFILE=str(tmp_path / "p"))
    ran = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads((tmp_path / "p" / "trace.json").read_text())
    found = validate_trace(doc)
    inside = [e for slices in found["tracks"].values() for e in slices
              if e["name"].startswith(("released by", "event record done before"))]
    assert inside  # (the slices drawn inside waits are among those checked)
