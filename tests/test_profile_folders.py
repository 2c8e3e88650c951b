"""Profiles nest, never write over an earlier one unsaid, and merge their child processes;
`ascentrt prof` passes the program's exit code on and says what went wrong in words."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import ascentrt as art
from ascentrt.cli import main
from ascentrt.profiler import session
from ascentrt.profiler.data import part_path
from ascentrt.profiler.trace import merged_pid
from ascentrt.validate import _python_script
from test_profiler_trace import validate_trace


def work(name: str) -> None:
    art.launch(art.kernels.noop, name=name)
    art.synchronize(timeout=10)


def kernels(profile) -> list[str]:
    return [t.name for t in profile.tasks if t.kind == "kernel"]


def test_a_profile_inside_a_running_one_gets_its_block_and_the_outer_keeps_recording(tmp_path):
    with art.profile() as outer:
        work("before")
        with art.profile(tmp_path / "inner") as inner:
            work("during")
            buf = art.malloc(4096)
        work("after")
        buf.free()
    assert kernels(inner.profile) == ["during"]
    assert kernels(art.profiler.load(tmp_path / "inner")) == ["during"]
    assert kernels(outer.profile) == ["before", "during", "after"]
    launches = lambda p: [c.name for c in p.api_calls].count("launch")  # noqa: E731
    assert (launches(inner.profile), launches(outer.profile)) == (1, 3)
    assert "malloc" in {c.name for c in inner.profile.api_calls}
    assert all(0 <= c.start_ns <= inner.profile.duration_ns for c in inner.profile.api_calls)
    # The buffer was freed after the inner block: the inner profile saw it live at its end.
    (inside,) = inner.profile.allocations
    assert inside.free_ns is None
    assert [a.free_ns is not None for a in outer.profile.allocations] == [True]
    assert session.active_recorder() is None


def test_overlapping_sessions_each_get_their_own_window():
    a = art.profiler.start()
    work("one")
    b = art.profiler.start()
    work("two")
    a.stop()
    work("three")
    assert art.profiler.stop() is b.profile  # (the newest running one)
    assert kernels(a.profile) == ["one", "two"]
    assert kernels(b.profile) == ["two", "three"]
    with pytest.raises(art.AscentError) as err:
        art.profiler.stop()
    assert err.value.code == art.ErrorCode.UNINITIALIZE


def test_a_folder_that_holds_a_profile_is_refused_unless_overwrite(tmp_path):
    with art.profile(tmp_path):
        work("first")
    (tmp_path / "notes.txt").write_text("the user's own file")
    (tmp_path / "child-123").mkdir()
    with pytest.raises(art.InvalidArgumentError, match="already holds a profile") as err:
        art.profile(tmp_path).start()
    assert err.value.code == art.ErrorCode.INVALID_FILE
    assert session.active_recorder() is None  # nothing was left started
    with art.profile(tmp_path, overwrite=True):
        work("second")
    assert kernels(art.profiler.load(tmp_path)) == ["second"]
    assert not (tmp_path / "child-123").exists()  # an earlier run's part went with it
    assert (tmp_path / "notes.txt").read_text() == "the user's own file"


def test_the_folder_of_a_running_profile_is_refused_to_another(tmp_path):
    with art.profile(tmp_path / "p"):
        with pytest.raises(art.InvalidArgumentError, match="running"):
            art.profile(tmp_path / "p", overwrite=True).start()


def test_child_parts_merge_into_one_timeline_a_process_per_pid(tmp_path):
    with art.profile() as recorded:
        s = art.current_device().create_stream()
        art.launch(art.kernels.noop, stream=s, name="in_child")
        s.record(e := art.current_device().create_event())
        art.current_device().default_stream.wait(e)
        work("in_child_after")
        s.destroy()
    child = recorded.profile
    run = tmp_path / "run"
    with art.profile(run) as parent:
        work("in_parent")
        child.pid, child.origin_ns = 4242, parent.snapshot().origin_ns + 5_000_000
        child.save(part_path(str(run), 4242))  # as a child process writes its part
    merged = parent.profile
    assert [p.pid for p in merged.parts] == [4242]
    assert art.profiler.load(run) == merged  # the parts come back with the folder
    trace = json.loads((run / "trace.json").read_text())
    validate_trace(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    me = os.getpid()
    assert names[me] == f"host (pid {me})" and names[4242] == "host (pid 4242)"
    assert names[merged_pid(4242, 1)].startswith("device 0") and "(pid 4242)" in names[merged_pid(4242, 1)]
    slices = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"}
    assert slices["in_parent"]["pid"] == merged_pid(me, 1)
    assert slices["in_child"]["pid"] == merged_pid(4242, 1)
    first = min(t.start_ns for t in child.tasks if t.name == "in_child")
    assert slices["in_child"]["ts"] == pytest.approx(5000 + first / 1000, abs=0.01)  # shifted
    summary = (run / "summary.txt").read_text()
    assert "Processes" in summary and "4242" in summary and str(me) in summary


def test_python_script_is_found_among_python_options():
    assert _python_script(["-u", "x.py", "-c"]) == "x.py"
    assert _python_script(["-W", "ignore", "-X", "dev", "x.py"]) == "x.py"
    assert _python_script(["-Wignore", "-Xdev", "x.py"]) == "x.py"
    assert _python_script(["-c", "pass"]) is None
    assert _python_script(["-um", "pkg"]) is None
    assert _python_script(["-"]) is None


def test_cli_errors_say_the_cause_first_and_bad_flags_show_the_subcommand_usage(tmp_path, capsys):
    missing = tmp_path / "missing.py"
    assert main(["prof", "-o", str(tmp_path / "p"), "--", "python", str(missing)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ascentrt: error: no such file: '{missing}'") and err.count("\n") == 1
    assert main(["prof", "-o", str(tmp_path / "p"), "--", str(missing)]) == 1
    assert "no such file or directory (100000 INVALID_PARAM)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["prof", "--bogus", "--", "python", "x.py"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ascentrt prof") and "unrecognized arguments: --bogus" in err


def test_prof_and_demo_refuse_a_folder_with_a_profile_before_running_anything(
        tmp_path, capsys, monkeypatch):
    # (demo sets the backend's variable for the process: it is put back after)
    monkeypatch.setenv("ASCENTRT_BACKEND", os.environ.get("ASCENTRT_BACKEND", "cpu"))
    with art.profile(tmp_path / "p"):
        pass
    before = (tmp_path / "p" / "profile.json").read_bytes()
    assert main(["prof", "-o", str(tmp_path / "p"), "--", "python", "-c", "pass"]) == 1
    assert "already holds a profile" in capsys.readouterr().err
    assert main(["demo", "-o", str(tmp_path / "p")]) == 1
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "p" / "profile.json").read_bytes() == before


def test_the_demo_replaces_its_own_default_folder_at_each_run(tmp_path, capsys, monkeypatch):
    # (a second `ascentrt demo` after `make demo` was refused: its folder held a profile)
    monkeypatch.setenv("ASCENTRT_BACKEND", os.environ.get("ASCENTRT_BACKEND", "cpu"))
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        assert main(["demo", "--no-compare", "--batches", "2"]) == 0
    assert "profile written to ascentrt-demo-profile/" in capsys.readouterr().out
    # (named with -o, even the same folder is the user's: refused without --force)
    assert main(["demo", "--no-compare", "--batches", "2", "-o", "./ascentrt-demo-profile"]) == 1


PROGRAM = textwrap.dedent("""
    import multiprocessing, subprocess, sys
    import ascentrt as art

    def work(name):
        art.launch(art.kernels.noop, name=name)
        art.synchronize(timeout=10)

    if __name__ == "__main__":
        work("before")
        with art.profile("inner"):                  # nests in the profile of ascentrt prof
            work("inside")
        child = multiprocessing.get_context("fork").Process(target=work, args=("forked",))
        child.start()
        child.join()
        subprocess.run([sys.executable, "-c", "import ascentrt as art; "
                        "art.launch(art.kernels.noop, name='started'); art.synchronize(timeout=10)"],
                       check=True)
        sys.exit(3)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_prof_of_a_program_that_profiles_itself_and_starts_children(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    out = tmp_path / "out"
    out.mkdir()
    (out / "profile.json").write_text("{}")          # an earlier run: --force replaces it
    (out / "child-1").mkdir()
    done = subprocess.run([sys.executable, "-m", "ascentrt", "prof", "-q", "--force", "-o",
                           str(out), "--", "python", "prog.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr             # the program's exit code
    assert "exited with code 3" in done.stderr and "Processes" in done.stdout
    assert kernels(art.profiler.load(tmp_path / "inner")) == ["inside"]
    prof = art.profiler.load(out)
    assert kernels(prof) == ["before", "inside"]
    assert sorted(n for p in prof.parts for n in kernels(p)) == ["forked", "started"]
    assert not (out / "child-1").exists()
    pids = [prof.pid] + [p.pid for p in prof.parts]
    assert len(set(pids)) == 3 and all(str(pid) in done.stdout for pid in pids)
    trace = json.loads((out / "trace.json").read_text())
    hosts = {e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"
             and e["args"]["name"].startswith("host")}
    assert hosts == set(pids)


def test_an_empty_part_folder_is_no_profile_and_goes_with_the_next_run(tmp_path):
    # (a process that stopped before writing its part left child-<pid>/ empty: the next run
    # into the folder was refused as "already holds a profile (child-...)")
    (tmp_path / "child-123").mkdir()
    (tmp_path / "child-123.refused").write_text("a note of a run that wrote nothing")
    with art.profile(tmp_path):
        pass
    assert not (tmp_path / "child-123").exists() and not (tmp_path / "child-123.refused").exists()
    (tmp_path / "child-456").mkdir()
    with pytest.raises(art.InvalidArgumentError, match="already holds a profile"):
        art.profile(tmp_path).start()  # (refused: the folder stays as it was)
    assert (tmp_path / "child-456").is_dir()


# ---- a file that is not a regular one, or far too large: refused, never read ---------------

def _not_regular(tmp_path, kind):
    folder = tmp_path / kind
    folder.mkdir()
    if kind == "fifo":
        os.mkfifo(folder / "profile.json")  # (reading it would wait for a writer forever)
    else:
        os.symlink("/dev/zero", folder / "profile.json")  # (reading it would never end)
    return folder


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_report_refuses_a_profile_json_that_is_not_a_regular_file(tmp_path, kind):
    folder = _not_regular(tmp_path, kind)
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "report", str(folder)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "not a regular file" in proc.stderr, proc.stderr
    assert "(100003 INVALID_FILE)" in proc.stderr


def test_a_profile_or_trace_larger_than_any_written_is_refused_unread(tmp_path, monkeypatch):
    from ascentrt.memory import trace
    profile = sys.modules["ascentrt.profiler.profile"]  # (the module: the package's name is a function)
    monkeypatch.setattr(profile, "MOST_BYTES", 10)
    monkeypatch.setattr(trace, "TRACE_MOST_BYTES", 10)
    big = tmp_path / "profile.json"
    big.write_text("[" + " " * 20 + "]")
    with pytest.raises(art.InvalidArgumentError, match="more than the 10"):
        art.profiler.load(str(tmp_path))
    with pytest.raises(art.InvalidArgumentError, match="more than the 10"):
        trace.load_trace(str(big))
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(art.InvalidArgumentError, match="not a regular file"):
        trace.load_trace(str(fifo))


@pytest.mark.parametrize("command", ["run", "prof"])
def test_a_folder_with_main_and_standard_input_are_scripts_python_runs(tmp_path, command):
    app = tmp_path / "appdir"
    app.mkdir()
    (app / "__main__.py").write_text("import ascentrt\nprint('ran')\n")
    out = ["-q", "-o", str(tmp_path / "p")] if command == "prof" else []
    for target, stdin in ((str(app), None), ("/dev/stdin", "import ascentrt\nprint('ran')\n")):
        proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", command, *out, "--force", "--",
                               "python", target] if command == "prof" else
                              [sys.executable, "-m", "ascentrt.cli", command, "--", "python", target],
                              input=stdin, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr


SMALL = "import ascentrt as art\nart.Stream().synchronize()\n"


def test_a_profile_pid_that_is_not_a_number_is_refused_naming_the_setting(tmp_path):
    env = dict(os.environ, ASCENTRT_PROFILE=str(tmp_path / "p"), ASCENTRT_PROFILE_PID="abc")
    proc = subprocess.run([sys.executable, "-c", SMALL], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "ASCENTRT_PROFILE_PID='abc'" in proc.stderr, proc.stderr
    assert "100000" in proc.stderr and proc.stderr.count("\n") == 1


@pytest.mark.parametrize("owner", ["1", "dead"])
def test_a_profile_pid_of_no_run_of_this_folder_writes_the_profile_at_the_top(tmp_path, owner):
    if owner == "dead":
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, timeout=30)
        owner = gone.stdout.strip()
    env = dict(os.environ, ASCENTRT_PROFILE=str(tmp_path / "p"), ASCENTRT_PROFILE_PID=owner)
    proc = subprocess.run([sys.executable, "-c", SMALL], env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "p" / "profile.json").exists() and art.profiler.load(str(tmp_path / "p"))
