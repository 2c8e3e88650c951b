"""Writing a profile folder: the JSON its writers format by hand is exactly what json.dumps gives
for the same events, the writers hold a small part of what they write, and the garbage collector
is held off only while a profile is written."""

import gc
import json
import re
import tracemalloc

import pytest

import ascentrt as art
from ascentrt.profiler import export, views
from ascentrt.profiler.data import (ApiCall, DeviceInfo, MarkRecord, MemorySample, ProfileData,
                                    RangeRecord, StreamInfo, TaskRecord)
from ascentrt.profiler.trace import trace_events

ODD = 'k "q", \u00e9 </script>\n'  # a name that needs escaping in JSON, HTML and CSV
THREAD = 7


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _hand_made(n: int, pid: int = 100, origin_ns: int = 0) -> ProfileData:
    """n tasks on two streams (some overlapping, failed, with bytes, float times, odd names),
    an API call submitting each, event waits released by records, ranges, marks, memory."""
    tasks, calls = [], []
    for i in range(n):
        start = 10_000 + i * 3_000
        end = start + (4_000 if i % 50 == 7 else 1_000)  # overlaps the next: an overflow track
        kind = "event_wait" if i % 40 == 39 else "kernel"
        released = (0, 1, i - 1) if kind == "event_wait" else None
        tasks.append(TaskRecord(0, 1 + i % 2, i, kind, ODD if i % 9 == 0 else f"k{i % 5}",
                                64 * (i % 3), start - 500, start, end, THREAD,
                                failed=i % 97 == 3, released_by=released,
                                error="ValueError: no \u2603" if i % 97 == 3 else ""))
        calls.append(ApiCall("launch", start - 900, start - 400, THREAD))
    tasks.append(TaskRecord(0, 1, n, "kernel", "float", 0, 5.5, 7.25, 9.125, THREAD))
    calls.append(ApiCall("Stream.synchronize", 50.0, 10**9, THREAD, target="stream 1",
                         already_done=False))
    tasks.sort(key=lambda t: (t.start_ns, t.end_ns))
    return ProfileData(
        duration_ns=10**9, started_at="2026-01-01T00:00:00+00:00", command=["train.py", ODD],
        tasks=tasks, api_calls=sorted(calls, key=lambda c: c.start_ns),
        ranges=[RangeRecord(ODD, 0, 10**9, THREAD), RangeRecord("r", 0.5, 2_000.75, THREAD)],
        marks=[MarkRecord("m", 123, THREAD)],
        memory=[MemorySample(i * 1_000, 0, i << 20, i << 21) for i in range(50)],
        devices=[DeviceInfo(0, "cpu0", 2, 2, 1, 1 << 30)],
        streams=[StreamInfo(0, 1, 0), StreamInfo(0, 2, 3, "default")],
        threads={THREAD: ODD}, pid=pid, origin_ns=origin_ns)


@pytest.fixture
def merged():
    """A profile with the part of a child process that started 1.5 ms after it."""
    prof = _hand_made(300)
    prof.parts = [_hand_made(200, pid=200, origin_ns=1_500_000)]
    return prof


def test_the_trace_is_the_text_json_dumps_gives_its_events(tmp_path, merged):
    for name, prof in (("alone", _hand_made(300)), ("merged", merged)):
        export.write_folder(prof, tmp_path / name)
        text = (tmp_path / name / "trace.json").read_text()
        doc = json.loads(text)
        assert _compact(doc) == text  # floats, escapes, key order: as json.dumps writes them
        assert doc["traceEvents"] == trace_events(prof)
    events = json.loads((tmp_path / "merged" / "trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in events if e["ph"] == "X"} >= {100 + (1 << 22), 200 + (1 << 22)}
    assert any(e["tid"] >= 1_000_000 for e in events if e["ph"] == "X")  # an overflow track
    assert any(e.get("args", {}).get("error") == "ValueError: no \u2603" for e in events)


def test_the_report_embeds_the_text_json_dumps_gives_its_view_data(tmp_path):
    prof = _hand_made(300)
    export.write_folder(prof, tmp_path)
    page = (tmp_path / "report.html").read_text()
    data = re.search(r'<script type="application/json" id="profile-data">(.*?)</script>', page,
                     re.S).group(1)
    assert data == _compact(views.view_data(prof)).replace("</", "<\\/")
    assert "</script>" not in data and ODD in json.loads(data)["names"]


def test_a_recorded_folder_is_the_text_json_dumps_gives_its_documents(tmp_path, stream):
    with art.profile(tmp_path / "p") as session:
        for i in range(2000):
            art.launch(art.kernels.noop, stream=stream, name=ODD if i % 100 == 0 else None)
        stream.synchronize(timeout=30)
    for name in ("trace.json", "profile.json"):
        text = (tmp_path / "p" / name).read_text()
        assert _compact(json.loads(text)) == text, name
    assert len(session.profile.tasks) == 2000 and gc.isenabled()


def _write_measured(prof: ProfileData, folder) -> tuple[int, int]:
    """(the peak of the memory Python allocated while writing the folder, its largest file)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        export.write_folder(prof, folder)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak, max(p.stat().st_size for p in folder.iterdir())


@pytest.mark.long
def test_what_writing_holds_grows_by_a_small_part_of_what_it_writes(tmp_path):
    # The writers stream, a chunk of records at a time: no output is held whole, as a list of
    # rows or as a string. Three times the tasks (both above a chunk): the write's peak grows
    # by a small part of what its largest file grows by (a task_time.csv or a report built
    # whole grows by more than that).
    # (warm-up, unmeasured: the report's assets are read once, and process-wide tables a
    # write adds to, interned names among them, grow here rather than in a measured write:
    # after some test orders one resized during the large write, +360 KB in one step)
    export.write_folder(_hand_made(10), tmp_path / "warm")
    export.write_folder(_hand_made(3300), tmp_path / "warm-large")
    # (each measured twice, the smaller kept: a table can still resize during one of them,
    # a one-time step of ~360 KB that says nothing of what the write holds)
    small, small_file = min(_write_measured(_hand_made(1100), tmp_path / f"small{i}") for i in range(2))
    large, large_file = min(_write_measured(_hand_made(3300), tmp_path / f"large{i}") for i in range(2))
    assert large - small < (large_file - small_file) / 4, (small, large, small_file, large_file)


def test_the_collector_is_held_off_while_writing_and_put_back_as_it_was(tmp_path, monkeypatch):
    assert gc.isenabled()
    with export.collector_paused():
        assert not gc.isenabled()
        with export.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # (the inner one found it off: it leaves it off)
    assert gc.isenabled()
    gc.disable()
    try:
        with export.collector_paused():
            pass
        assert not gc.isenabled()  # off before: off after
    finally:
        gc.enable()
    seen = []

    def failing(profile, folder):
        seen.append(gc.isenabled())
        raise OSError("disk full")
    monkeypatch.setattr(export, "write_csvs", failing)
    with pytest.raises(art.InvalidArgumentError) as err:  # (the OSError, with its code)
        export.write_folder(_hand_made(10), tmp_path)
    assert err.value.code == art.ErrorCode.INVALID_FILE and "disk full" in str(err.value)
    assert seen == [False] and gc.isenabled()  # off while writing; a failed write puts it back
