"""A profile names the program line of each runtime call, and findings that blame calls name them."""

import inspect
import json

import numpy as np
import pytest

import ascentrt as art
from ascentrt.profiler.csvexport import api_rows
from ascentrt.profiler.data import ProfileData
from ascentrt.profiler.trace import trace_events
from ascentrt.profiler.views import view_data

HERE = "test_profiler_call_sites.py"


def _line() -> int:
    """The line of the statement that called this one."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


def _sin(out):
    np.sin(out, out=out)


def test_each_api_call_records_the_program_line_that_made_it(stream, buf):
    view = buf[:64].view(np.float64)
    with art.profile() as prof:
        art.launch(_sin, view, stream=stream); launched = _line()  # noqa: E702
        stream.synchronize(timeout=30); synced = _line()  # noqa: E702
    sites = {c.name: c.site for c in prof.profile.api_calls}
    assert sites["launch"] == f"{HERE}:{launched}"
    assert sites["Stream.synchronize"] == f"{HERE}:{synced}"


def test_call_sites_survive_profile_json_and_older_files_load_without_them(stream, buf):
    with art.profile() as prof:
        art.launch(_sin, buf[:64].view(np.float64), stream=stream)
        stream.synchronize(timeout=30)
    data = json.loads(json.dumps(prof.profile.to_json()))
    assert [c.site for c in ProfileData.from_json(data).api_calls] == [c.site for c in prof.profile.api_calls]
    table = data["api_calls"]
    at = table["columns"].index("site")
    table["columns"].pop(at)
    for row in table["rows"]:
        row.pop(at)
    assert {c.site for c in ProfileData.from_json(data).api_calls} == {""}


def test_trace_report_and_api_csv_name_the_call_sites(stream, buf):
    with art.profile() as prof:
        for _ in range(3):
            art.launch(_sin, buf[:64].view(np.float64), stream=stream); launched = _line()  # noqa: E702
        stream.synchronize(timeout=30)
    site = f"{HERE}:{launched}"
    launches = [e for e in trace_events(prof.profile) if e.get("cat") == "api" and e["name"] == "launch"]
    assert launches and all(e["args"]["call site"] == site for e in launches)
    rows = api_rows(prof.profile)
    row = next(r for r in rows if r[0] == "launch")
    assert row[rows[0].index("call_sites")] == f"{site} (3 calls)"
    view = view_data(prof.profile)  # (report.html: an API slice's tooltip names its site)
    api = next(t for t in view["tracks"] if t.get("sites"))
    launch = view["names"].index("launch")
    assert {view["names"][r[4]] for r in api["s"] if r[2] == launch} == {site}


def test_a_device_sync_in_the_loop_is_named_by_its_line(stream, buf):
    with art.profile() as prof:
        for _ in range(8):
            art.launch(_sin, buf.view(np.float64), stream=stream)
            art.synchronize(timeout=30); synced = _line()  # noqa: E702
    found = [f for f in prof.diagnose() if f.kind == "device_sync_in_loop"]
    assert found, prof.diagnose()
    assert found[0].evidence["called at"] == f"{HERE}:{synced} (8 calls)"


def test_stop_mode_diagnosis_names_the_root_failure_before_the_wait_it_failed(dev):
    load, compute = dev.create_stream(), dev.create_stream()
    load.set_failure_mode(art.FailureMode.STOP)
    ready = art.Event(dev)

    def decode():
        raise ValueError("corrupt header in sample 17")
    with art.profile() as prof:
        art.launch(decode, stream=load); launched = _line()  # noqa: E702
        ready.record(load)
        compute.wait(ready)  # (fails with 107023: the record it waits for is dropped)
        art.launch(art.kernels.noop, stream=compute)
        with pytest.raises(art.TaskError):
            compute.synchronize(timeout=10)
    found = next(f for f in prof.diagnose() if f.kind == "failed_tasks")
    root = (f"task 1 (decode, a kernel submitted at {HERE}:{launched}) on device 0 stream "
            f"{load.id} raised ValueError: corrupt header in sample 17")
    assert found.cause.startswith(root), found.cause
    assert "dropped 1 task(s) after it: task 2 (event_record" in found.cause
    assert f"task 1 (event_wait submitted at {HERE}:{launched + 2}) on device 0 stream " \
           f"{compute.id} failed" in found.cause
    assert "a event_wait" not in found.cause
    assert found.task_ids[0] == f"0/{load.id}/1"
    load.destroy()
    compute.destroy()



def test_host_time_split_names_the_lines_of_the_costliest_runtime_call():
    from ascentrt.profiler.data import ApiCall
    from ascentrt.profiler.hosttime import attribute
    calls = [ApiCall("malloc_host", 10_000, 60_000, 1, site="prog.py:5"),
             ApiCall("malloc_host", 60_000, 90_000, 1, site="prog.py:5"),
             ApiCall("launch", 90_000, 95_000, 1, site="prog.py:6")]
    host = attribute([(0, 100_000)], calls)
    assert host.evidence("while idle")["call sites of malloc_host while idle"] == "prog.py:5 (2 calls)"
    assert host.advice().startswith("malloc_host (0.08 ms in 2 calls, at prog.py:5 (2 calls)): ")


def _launch_here(stream) -> int:
    art.launch(art.kernels.noop, stream=stream); line = _line()  # noqa: E702
    return line


def test_a_loop_looks_its_code_up_once_and_its_calls_keep_their_own_lines(stream, monkeypatch):
    # The site of a call from the code the wrapper was last called from is taken without the
    # dict lookup (a third of the site's cost on every profiled launch); a call from other
    # code looks it up, and each call still gets its own line.
    from ascentrt.profiler import hostapi

    class Lookups(dict):
        count = 0

        def get(self, key, default=None):
            Lookups.count += 1
            return super().get(key, default)

    made = hostapi.CallSites.__init__

    def counted(self):
        made(self)
        self.index = Lookups()
    monkeypatch.setattr(hostapi.CallSites, "__init__", counted)
    with art.profile() as prof:
        before = Lookups.count
        for _ in range(20):
            art.launch(art.kernels.noop, stream=stream); here = _line()  # noqa: E702
        looked_up = Lookups.count - before
        lines = []
        for _ in range(3):  # (the wrapper's last code alternates: each switch looks it up)
            lines.append(_launch_here(stream))
            art.launch(art.kernels.noop, stream=stream); lines.append(_line())  # noqa: E702
        stream.synchronize(timeout=30)
    sites = [c.site for c in prof.profile.api_calls if c.name == "launch"]
    assert sites == [f"{HERE}:{here}"] * 20 + [f"{HERE}:{n}" for n in lines]
    assert looked_up == 1  # (the loop's code, at its first call)
