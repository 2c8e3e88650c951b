"""Bad files and paths: a tampered profile.json, a path that is an int (an open descriptor), a
file that cannot be read or written: each raises InvalidArgumentError 100003 naming it, and
nothing is written, closed or lost."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from argparse import Namespace

import numpy as np
import pytest

import ascentrt as art
from ascentrt import calibrate, cli, sanitizer, whatif
from ascentrt.backends.presets import FIELDS
from ascentrt.memory import load_trace

E = art.ErrorCode


def _refused(fn, *args):
    """The InvalidArgumentError with INVALID_FILE that fn(*args) raises."""
    with pytest.raises(art.InvalidArgumentError) as err:
        fn(*args)
    assert err.value.code == E.INVALID_FILE and isinstance(err.value, art.AscentError)
    return err.value


# ---- a tampered profile.json is refused at load, naming the field ---------------------------

@pytest.fixture(scope="module")
def profile_folder(tmp_path_factory):
    """A real profile folder with a row in every table the cases edit."""
    folder = tmp_path_factory.mktemp("prof") / "p"
    x = np.arange(1024, dtype=np.float32)
    with art.profile(folder):
        with art.profiler.range("step"):
            b = art.malloc(x.nbytes)
            art.memcpy(b, x)
            art.launch(art.kernels.scale, b.view(np.float32), b.view(np.float32), 2.0)
            art.synchronize()
            art.profiler.mark("done")
            b.free()
    prof = art.profiler.load(folder)
    assert prof.tasks and prof.ranges and prof.marks and prof.allocations and prof.memory
    return folder


def test_every_value_a_real_run_writes_loads_again(tmp_path):
    # (the schema once refused error = -1, what an API call that raised a plain Python error
    # records, and with it the profile of every `ascentrt prof` run whose program caught one)
    folder = tmp_path / "p"
    with art.profile(folder):
        for bad in (lambda: art.malloc(), lambda: art.malloc(-1), lambda: art.Event(timing="x")):
            try:
                bad()
            except (TypeError, art.AscentError):
                pass
        h = art.malloc_host(4096)  # (a host allocation: device -1)
        s = art.Stream()
        art.launch(lambda: 1 / 0, stream=s)  # a failed task
        with pytest.raises(art.TaskError):
            s.synchronize()
        h.free()
    prof = art.profiler.load(folder)
    assert any(t.failed for t in prof.tasks)
    if art.Device(0).properties.backend == "cpu":  # (where the refused malloc() is recorded)
        assert -1 in [c.error for c in prof.api_calls]
    prof.diagnose()


def _cell(table, column, value, row=0):
    def edit(d):
        d[table]["rows"][row][d[table]["columns"].index(column)] = value
    return edit


def _end_before_start(d):
    cols = d["tasks"]["columns"]
    row = d["tasks"]["rows"][0]
    row[cols.index("start_ns")] = row[cols.index("end_ns")] + 1


def _freed_before_allocated(d):
    cols = d["allocations"]["columns"]
    row = d["allocations"]["rows"][0]
    row[cols.index("free_ns")] = row[cols.index("alloc_ns")] - 1


# (field the message names, edit); every one of these loaded before and failed later, if at all
TAMPERED = {
    "start_ns str": ("start_ns", _cell("tasks", "start_ns", "abc")),
    "start_ns null": ("start_ns", _cell("tasks", "start_ns", None)),
    "start_ns NaN": ("start_ns", _cell("tasks", "start_ns", float("nan"))),
    "start_ns huge": ("start_ns", _cell("tasks", "start_ns", 10**30)),
    "end_ns negative": ("end_ns", _cell("tasks", "end_ns", -10**12)),
    "end before start": ("end_ns", _end_before_start),
    "kind int": ("kind", _cell("tasks", "kind", 5)),
    "name null": ("name", _cell("tasks", "name", None)),
    "nbytes str": ("nbytes", _cell("tasks", "nbytes", "lots")),
    "failed str": ("failed", _cell("tasks", "failed", "yes")),
    "released_by pair": ("released_by", _cell("tasks", "released_by", [1, 2])),
    "api start str": ("start_ns", _cell("api_calls", "start_ns", "x")),
    "api error str": ("error", _cell("api_calls", "error", "boom")),
    "duration str": ("duration_ns", lambda d: d.__setitem__("duration_ns", "x")),
    "duration negative": ("duration_ns", lambda d: d.__setitem__("duration_ns", -5)),
    "threads list": ("threads", lambda d: d.__setitem__("threads", [1])),
    "name of thread int": ("threads", lambda d: d.__setitem__("threads", {"1": 2})),
    "command str": ("command", lambda d: d.__setitem__("command", "python x.py")),
    "parts int": ("parts", lambda d: d.__setitem__("parts", 5)),
    "parts paths": ("parts", lambda d: d.__setitem__("parts", ["../.."])),
    "started_at int": ("started_at", lambda d: d.__setitem__("started_at", 5)),
    "capacity str": ("capacity", _cell("devices", "capacity", "big")),
    "compute_units 0": ("compute_units", _cell("devices", "compute_units", 0)),
    "compute_units -1": ("compute_units", _cell("devices", "compute_units", -1)),
    "uncosted list": ("uncosted", _cell("devices", "uncosted", [1])),
    "engines per direction pair": ("copy_engines_per_direction", _cell("devices", "copy_engines_per_direction", [1, 2])),
    "engines per direction 0": ("copy_engines_per_direction", _cell("devices", "copy_engines_per_direction", [1, 0, 1])),
    "reclaimed int": ("reclaimed", _cell("allocations", "reclaimed", 5)),
    "priority str": ("priority", _cell("streams", "priority", "hi")),
    "allocated str": ("allocated", _cell("memory", "allocated", "x")),
    "free_ns str": ("free_ns", _cell("allocations", "free_ns", "x")),
    "freed before allocated": ("free_ns", _freed_before_allocated),
    "site int": ("site", _cell("allocations", "site", 5)),
    "tail_ns negative": ("tail_ns", _cell("tasks", "tail_ns", -1)),
    "release_ns negative": ("release_ns", _cell("devices", "release_ns", -1)),
    "release_ns str": ("release_ns", _cell("devices", "release_ns", "1us")),
    "block_dim str": ("block_dim", _cell("tasks", "block_dim", "25")),
    "nbytes negative": ("nbytes", _cell("allocations", "nbytes", -5)),
    "range name int": ("name", _cell("ranges", "name", 1)),
    "mark ts str": ("ts_ns", _cell("marks", "ts_ns", "a")),
    "columns twice": ("columns", lambda d: d["tasks"].__setitem__(
        "columns", d["tasks"]["columns"][:-1] + ["device"])),
}


def _tampered(src, dst, edit):
    data = json.loads((src / "profile.json").read_text())
    edit(data)
    dst.mkdir()
    (dst / "profile.json").write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize("case", TAMPERED)
def test_a_tampered_profile_is_refused_at_load_naming_the_field(profile_folder, tmp_path, case):
    field, edit = TAMPERED[case]
    assert art.profiler.load(profile_folder).tasks  # (untampered, the same file loads)
    folder = _tampered(profile_folder, tmp_path / "t", edit)
    before = (folder / "profile.json").read_bytes()
    err = _refused(art.profiler.load, folder)
    assert field in err.message and "profile.json" in err.message
    assert os.listdir(folder) == ["profile.json"] and (folder / "profile.json").read_bytes() == before


@pytest.mark.parametrize("case", ["start_ns str", "compute_units 0", "threads list", "parts int"])
def test_ascentrt_report_of_a_tampered_profile_is_one_coded_line(profile_folder, tmp_path, capsys,
                                                                 case):
    folder = _tampered(profile_folder, tmp_path / "t", TAMPERED[case][1])
    assert cli.main(["report", str(folder), "--rewrite"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ascentrt: error: ") and "(100003 INVALID_FILE)" in err[0]
    assert os.listdir(folder) == ["profile.json"]  # (--rewrite wrote nothing)


# ---- a path that is an int is refused: nothing written into the descriptor, nor closed -------

@pytest.fixture
def fd(tmp_path):
    """An open descriptor of an empty file (the program's own: the runtime must not touch it)."""
    fd = os.open(tmp_path / "mine.txt", os.O_RDWR | os.O_CREAT)
    yield fd
    try:
        os.close(fd)
    except OSError:
        pass  # (the code before the fix closed it)


def _graph_to_json(path):
    """A captured graph's to_json(path); the graph and its buffer are released after."""
    s = art.Device(0).create_stream()
    b = art.malloc(64)
    s.begin_capture()
    art.memset_async(b, 1, stream=s)
    g = s.end_capture()
    try:
        return g.to_json(path)
    finally:
        g.destroy()
        s.destroy()
        b.free()


def _recorder():
    with art.record_trace() as rec:
        art.malloc(64).free()
    return rec


def _one_task():
    g = art.TaskGraph()
    g.add_kernel(art.kernels.noop)
    return g


PATH_TAKERS = {
    "TaskGraph.to_json": lambda path: _one_task().to_json(path),
    "Graph.to_json": _graph_to_json,
    "TraceRecorder.save": lambda path: _recorder().save(path),
    "load_trace": load_trace,
    "profiler.load": art.profiler.load,
    "Profile.save": lambda path: art.profiler.Profile().save(path),
    "profiler.profile": art.profiler.profile,
    "write_reports_at_exit": sanitizer.write_reports_at_exit,
}


@pytest.mark.parametrize("name", PATH_TAKERS)
def test_an_int_path_is_refused_and_the_descriptor_is_left_alone(name, fd):
    _refused(PATH_TAKERS[name], fd)
    assert os.fstat(fd).st_size == 0  # still open (fstat raises on a closed one), and empty
    assert os.write(fd, b"mine") == 4


@pytest.mark.parametrize("path", [None, 5, 1.5, True], ids=repr)
def test_profiler_load_refuses_what_is_not_a_path(path):
    _refused(art.profiler.load, path)


# ---- a file that cannot be read or written: INVALID_FILE naming it and the cause ------------

def _binary(tmp_path):
    path = tmp_path / "binary.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    return path


CANNOT = {  # (what is called, the path it gets, a word of the cause)
    "to_json into a missing folder": (PATH_TAKERS["TaskGraph.to_json"], lambda t: t / "no" / "g.json",
                                      "no such file"),
    "Graph.to_json onto a folder": (PATH_TAKERS["Graph.to_json"], lambda t: t, "directory"),
    "save a trace into a missing folder": (PATH_TAKERS["TraceRecorder.save"],
                                           lambda t: t / "no" / "t.jsonl", "no such file"),
    "load a missing trace": (load_trace, lambda t: t / "t.jsonl", "no such file"),
    "load a folder as a trace": (load_trace, lambda t: t, "directory"),
    "load a binary trace": (load_trace, _binary, "utf-8"),
    "save a profile under a file": (PATH_TAKERS["Profile.save"], lambda t: _binary(t) / "p",
                                    "not a directory"),
}


@pytest.mark.parametrize("case", CANNOT)
def test_a_file_that_cannot_be_read_or_written_is_one_coded_error(tmp_path, case):
    fn, path, cause = CANNOT[case]
    path = path(tmp_path)
    before = sorted(os.listdir(tmp_path))
    err = _refused(fn, path)
    assert str(path) in err.message and cause in err.message.lower()
    assert sorted(os.listdir(tmp_path)) == before  # (no half-written file left behind)


def test_a_bad_line_of_a_trace_is_an_invalid_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('["alloc", 1, 64, null]\n["alloc", 1]\n')
    assert f"{path}:2" in _refused(load_trace, path).message


def test_calibrate_refuses_a_preset_file_it_cannot_write(tmp_path):
    values = {name: (1, "test") for name in FIELDS}
    blocker = _binary(tmp_path)
    err = _refused(calibrate.write, values, str(blocker / "calibrated.toml"))
    assert str(blocker) in err.message
    _refused(calibrate.write, values, 3)


def test_whatif_refuses_an_output_folder_it_cannot_create(tmp_path):
    blocker = _binary(tmp_path)
    args = Namespace(command=["python", "-c", "pass"], out=str(blocker), preset="ascend910b",
                     vary=["compute_units=1"])
    err = _refused(whatif.main, args)
    assert str(blocker) in err.message and blocker.read_bytes() == b"\xff\xfe\x00garbage"


# ---- the sanitizer's report at exit: a failed write is said, with the races ------------------

RACY = """
    import ascentrt as art
    def producer(b):
        b[:] = 1
    def consumer(out, b):
        out[:] = b
    dev = art.Device(0)
    s1, s2 = dev.create_stream(), dev.create_stream()
    buf, out = art.malloc(4096), art.malloc(4096)
    art.launch(producer, buf.view(), stream=s1, writes=[buf])
    art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    art.synchronize()
    buf.free()
    out.free()
    print(len(art.sanitizer.reports()))
"""


def test_a_race_report_that_cannot_be_written_is_said_on_stderr_with_the_races(tmp_path):
    report = tmp_path / "missing" / "races.json"
    env = dict(os.environ, ASCENTRT_SANITIZE="log", ASCENTRT_SANITIZE_REPORT=str(report))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(RACY)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "1", proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    at = next(i for i, text in enumerate(lines) if text.startswith("ascentrt: error:"))
    line, races = lines[at], [text for text in lines[at + 1:] if text.startswith("  - ")]
    assert line.startswith("ascentrt: error: cannot write the race report") and str(report) in line
    assert "(100003 INVALID_FILE)" in line and "1 race(s) found" in line
    assert len(races) == 1 and "producer" in races[0] and "consumer" in races[0]
    assert not report.parent.exists()
    shutil.rmtree(tmp_path / "missing", ignore_errors=True)
