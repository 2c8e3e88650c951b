"""`ascentrt prof -- python prog.py` runs a program profiled and writes every output."""

import glob
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

import ascentrt as art
from ascentrt.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUTS = ("trace.json", "report.html", "profile.json", "task_time.csv", "kernel_statistic.csv",
           "api_statistic.csv", "memory.csv", "summary.txt")
PROGRAM = textwrap.dedent("""
    import sys
    import numpy as np
    import ascentrt as art
    s = art.set_device(0).create_stream()
    x = art.malloc(1 << 16)
    for _ in range(int(sys.argv[1])):
        art.launch(np.sin, x.view(np.float32), x.view(np.float32), stream=s, name="sine")
    s.synchronize(timeout=30)
    x.free()
    print("program output")
""")


def ascentrt(*args, timeout=120, cwd=None):
    return subprocess.run([sys.executable, "-m", "ascentrt.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


def test_prof_runs_the_program_and_writes_every_output(program, tmp_path):
    out = ascentrt("prof", "-o", str(tmp_path / "p"), "--", "python", str(program), "20")
    assert out.returncode == 0, out.stderr
    assert "program output" in out.stdout
    assert "Diagnosis" in out.stdout and "never freed" not in out.stdout
    assert "sine" in out.stdout  # the top-tasks table
    for name in OUTPUTS:
        assert (tmp_path / "p" / name).stat().st_size > 0, name
    # The closing line names every file the folder holds (it named all but summary.txt once).
    said = out.stdout.split("outputs in", 1)[1]
    assert sorted(os.listdir(tmp_path / "p")) == sorted(OUTPUTS)
    assert all(name in said for name in OUTPUTS), said
    trace = json.loads((tmp_path / "p" / "trace.json").read_text())
    assert sum(e["name"] == "sine" for e in trace["traceEvents"] if e["ph"] == "X") == 20


def test_prof_shows_progress_during_a_long_run(tmp_path):
    prog = tmp_path / "slow.py"
    prog.write_text("import time, ascentrt as art\n"
                    "s = art.set_device(0).create_stream()\n"
                    "for _ in range(10):\n"
                    "    art.launch(lambda: None, stream=s)\n"
                    "s.synchronize(timeout=10)\n"
                    "time.sleep(1.5)  # the rest of a long program\n")
    out = ascentrt("prof", "--progress", "0.5", "-o", str(tmp_path / "p"), "--", "python", str(prog))
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stderr.splitlines() if x.startswith("ascentrt prof: running for")]
    assert len(lines) >= 2
    assert any("tasks" in x for x in lines)  # the child's progress file was read
    assert not (tmp_path / "p" / "progress.json").exists()  # removed at the end


@pytest.mark.parametrize("every", ["-1", "0", "1e-300", "nan", "inf"])
def test_prof_refuses_a_progress_interval_it_could_not_keep(tmp_path, every):
    # (-1 once printed progress lines in a busy loop, ~100k a second)
    out = ascentrt("prof", "--progress", every, "-o", str(tmp_path / "p"), "--", "python", "-c",
                   "pass")
    assert out.returncode != 0 and "100000" in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and not (tmp_path / "p").exists()


def test_prof_passes_on_the_exit_code_and_still_writes_the_profile(tmp_path):
    prog = tmp_path / "fails.py"
    prog.write_text("import ascentrt as art\nart.malloc(64)\nraise SystemExit(3)\n")
    out = ascentrt("prof", "-q", "-o", str(tmp_path / "p"), "--", "python", str(prog))
    assert out.returncode == 3
    assert "exited with code 3" in out.stderr
    assert "never freed" in out.stdout  # the leaked malloc is diagnosed
    assert (tmp_path / "p" / "profile.json").exists()


def test_work_cut_off_by_an_uncaught_exception_is_not_diagnosed_as_a_stuck_wait(tmp_path):
    # (the finding advised about events and notifies for a copy the program's crash cut off)
    prog = tmp_path / "crash.py"
    prog.write_text(textwrap.dedent("""
        import ascentrt as art
        s = art.set_device(0).create_stream()
        h, d = art.malloc_host(64 << 20), art.malloc(64 << 20)
        for _ in range(8):
            art.memcpy_async(d, h, stream=s)
        raise RuntimeError("bad slice")
    """))
    # (on sim, deterministic: no virtual time passes between the copies and the raise)
    out = subprocess.run([sys.executable, "-m", "ascentrt.cli", "prof", "-q", "-o",
                          str(tmp_path / "p"), "--", "python", str(prog)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "ASCENTRT_BACKEND": "sim"})
    assert out.returncode == 1
    (found,) = [f for f in art.profiler.load(str(tmp_path / "p")).diagnose()
                if f.kind == "never_finished"]
    assert found.title.startswith("Work cut off")
    assert found.evidence["the program ended with"] == "RuntimeError: bad slice"
    assert "notify" not in found.advice


def test_prof_and_sanitize_pass_on_a_signal_as_a_shell_does(tmp_path, capsys):
    killed = ["python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    assert main(["prof", "-q", "-o", str(tmp_path / "p"), "--", *killed]) == 128 + 15
    assert "exited with 143" in capsys.readouterr().err
    assert main(["sanitize", "--", *killed]) == 128 + 15


def test_prof_errors_are_one_line_without_debug(tmp_path, capsys):
    from ascentrt.cli import main
    assert main(["prof", "-o", str(tmp_path / "p")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ascentrt: error:") and "nothing to run" in err and err.count("\n") == 1
    assert main(["prof", "-o", str(tmp_path / "p"), "--", "/nonexistent/program"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ascentrt: error:") and "cannot run" in err and err.count("\n") == 1
    out = ascentrt("prof", "-q", "-o", str(tmp_path / "p"), "--", "python", "-c", "pass")
    assert out.returncode == 1 and "no profile was written" in out.stderr
    assert out.stderr.strip().count("\n") == 0


def test_prof_with_debug_shows_the_traceback(tmp_path):
    from ascentrt.cli import main
    with pytest.raises(Exception, match="nothing to run"):
        main(["prof", "--debug", "-o", str(tmp_path / "p")])


def test_report_prints_a_saved_profile(tmp_path, capsys):
    import ascentrt as art
    from ascentrt.cli import main
    s = art.set_device(0).create_stream()
    with art.profile(tmp_path / "p"):
        art.launch(lambda: None, stream=s, name="saved_task")
        s.synchronize(timeout=10)
    s.destroy()
    assert main(["report", str(tmp_path / "p")]) == 0
    assert "saved_task" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing")]) == 1
    assert "no profile" in capsys.readouterr().err


def test_demo_writes_its_report(tmp_path):
    out = ascentrt("demo", "--batches", "3", "-o", str(tmp_path / "demo"), timeout=300)
    assert out.returncode == 0, out.stderr
    assert "profile written to" in out.stdout
    for name in OUTPUTS:
        assert (tmp_path / "demo" / name).exists(), name
    # Its diagnosis is of the timed pipelines (a range each): the host's staging and checking
    # around them once made every demo read as host-bound.
    assert "finding(s) in the timed pipelines" in out.stdout
    prof = art.profiler.load(tmp_path / "demo")
    assert len([r for r in prof.ranges if r.name == "pipeline"]) == 2 * 3  # 3 x 2 (not the warm-up)


@pytest.mark.cpu_only
@pytest.mark.parametrize("load", [0.0, 1.7])
def test_the_demo_says_when_the_machine_was_busy(monkeypatch, capsys, load):
    """Its cpu speedup changed with the machine's load (0.96x to 1.52x in three runs) with
    nothing said: it says so when other processes share the cores, as calibrate does."""
    from ascentrt import demo
    monkeypatch.setattr(demo, "load_average", lambda: load)
    assert demo.main(batches=2, repeats=1) == 0
    said = "this machine was busy: 1-minute load average 1.70" in capsys.readouterr().out
    assert said == (load > 0)


def test_demo_json_reports_the_median_of_the_runs_asked_for():
    """`python -m ascentrt.demo --json N R` (the accuracy benchmark's measured side): R runs per
    pipeline, the median reported."""
    out = subprocess.run([sys.executable, "-m", "ascentrt.demo", "--json", "2", "3"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert "(median of 3)" in doc["text"] and len(doc["ms"]) == 2 and doc["correct"]


@pytest.mark.parametrize("args", [["--json", "2", "0"], ["--json", "2", "x"], ["--json", "-1"],
                                  ["--json", "2", "3", "4"], ["12", "3"], []])
def test_demo_entry_refuses_bad_counts_in_one_line_with_a_code(args):
    out = subprocess.run([sys.executable, "-m", "ascentrt.demo", *args], capture_output=True,
                         text=True, timeout=60)
    err = out.stderr.strip()
    assert out.returncode == 2 and out.stdout == "", (out.stdout, err)
    assert err.startswith("ascentrt demo: error:") and err.count("\n") == 0, err
    assert re.search(r"\(\d{6} [A-Z_]+\)$", err), err


def test_demo_with_no_batches_is_refused_before_any_profile_is_written(tmp_path, capsys):
    assert main(["demo", "--batches", "0", "--no-compare", "-o", str(tmp_path / "p")]) == 1
    err = capsys.readouterr().err.strip()
    assert "batches must be an int >= 1, got 0 (100000 INVALID_PARAM)" in err, err
    assert not (tmp_path / "p").exists()


class _Terminal(__import__("io").StringIO):
    def isatty(self):
        return True


def _small_profile(tmp_path, name="tiny"):
    import ascentrt as art
    s = art.set_device(0).create_stream()
    with art.profile() as prof:
        art.launch(lambda: None, stream=s, name=name)
        s.synchronize(timeout=10)
    s.destroy()
    return prof.profile


def test_summary_uses_rich_tables_on_a_terminal(tmp_path):
    pytest.importorskip("rich")
    from ascentrt.profiler.summary import print_summary
    out = _Terminal()
    print_summary(_small_profile(tmp_path), file=out)
    text = out.getvalue()
    assert "Top tasks" in text and "tiny" in text and "┃" in text  # a rich table border


def test_rich_tables_print_the_profiles_text_as_it_is(tmp_path):
    # (rich's markup and highlighting split "device(s)" into four colours, and would take a
    # task named "a[/b]" for a tag)
    pytest.importorskip("rich")
    from ascentrt.profiler.summary import print_summary
    out = _Terminal()
    print_summary(_small_profile(tmp_path, name="k[/bold]x"), file=out)
    text = out.getvalue()
    assert "k[/bold]x" in text and "1 device(s)" in text, text


def test_summary_is_plain_text_when_not_a_terminal(tmp_path):
    import io

    from ascentrt.profiler.summary import print_summary
    out = io.StringIO()
    print_summary(_small_profile(tmp_path), file=out)
    text = out.getvalue()
    assert "Top tasks" in text and "tiny" in text and "┃" not in text


def test_version_and_python_dash_m_alias():
    out = subprocess.run([sys.executable, "-m", "ascentrt", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"ascentrt {art.__version__}"


def test_report_without_a_folder_reads_the_newest_profile_here(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 1                              # none yet: one clear line
    assert "no profile folder here" in capsys.readouterr().err
    for name in ("older", "newer"):
        with art.profile(tmp_path / name):
            art.launch(art.kernels.noop)
            art.synchronize(timeout=10)
    os.utime(tmp_path / "older" / "profile.json", (1, 1))     # make the order certain
    assert main(["report"]) == 0
    assert "ascentrt report: newer/" in capsys.readouterr().err


@pytest.mark.long
def test_every_command_error_ends_with_its_code(tmp_path, capsys):
    bad = tmp_path / "neg.toml"
    bad.write_text("name = 'x'\n")  # (fields missing)
    for argv in (["info", "--preset", str(bad)], ["calibrate", "-o", "/proc/nope/cal.toml"],
                 ["info", "--preset", "no_such_preset"], ["run"], ["run", "--"],
                 ["run", "--", "python", str(tmp_path / "missing.py")],
                 ["run", "--", str(tmp_path / "no_such_program")]):
        assert main(argv) == 1, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("ascentrt: error:") and err.count("\n") == 0, err
        assert re.search(r"\(\d{6} [A-Z_]+\)$", err), err


def test_a_reader_that_stops_early_ends_a_command_quietly(tmp_path):
    # (`ascentrt info | head` printed "ascentrt: error: broken pipe")
    r, w = os.pipe()
    os.close(r)
    done = subprocess.run([sys.executable, "-m", "ascentrt.cli", "info", "--preset", "ascend910b"],
                          stdout=w, stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(w)
    assert done.returncode == 128 + 13 and done.stderr == ""


def test_a_program_that_cannot_start_leaves_no_profile_folder(tmp_path):
    out = ascentrt("prof", "-o", str(tmp_path / "p"), "--", "no-such-program-here")
    assert out.returncode == 1 and "cannot run" in out.stderr
    assert not (tmp_path / "p").exists()


def test_a_bad_setting_says_its_code_once(tmp_path):
    done = subprocess.run([sys.executable, "-m", "ascentrt.cli", "info"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "ASCENTRT_DEVICES": "x"})
    assert done.returncode == 1 and done.stderr.count("100000") == 1


def test_the_executors_table_counts_busy_time_per_unit_and_says_so():
    """On a 24-core sim device a kernel on all cores for 10 us is 240 unit-us: the table said
    "busy ms" beside the window, and compute read as the bottleneck."""
    from subprocess_util import run_program
    out = run_program('''
        import io, ascentrt as art
        from ascentrt.profiler.summary import sections
        s = art.Stream()
        with art.profile() as prof:
            for _ in range(4):
                art.launch(lambda: None, stream=s, cost=10e-6)
            s.synchronize()
        (title, headers, rows), = [t for t in sections(prof.profile) if t[0].startswith("Executors")]
        compute = [r for r in rows if r[1] == "compute"][0]
        print(headers[3], compute[2], compute[3])
    ''', env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend910b"}, timeout=60)
    assert out.split() == ["busy", "unit-ms", "24", "0.96"]  # 4 x 10 us x 24 units


def test_a_program_ascentrt_refuses_at_start_leaves_no_profile_and_says_why(program, tmp_path):
    # (it left an empty child-<pid>/ that refused the next run into the folder, and said the
    # program "must import ascentrt", which it had)
    env = {**os.environ, "ASCENTRT_BACKEND": "gpu"}
    out = subprocess.run([sys.executable, "-m", "ascentrt.cli", "prof", "-q", "-o", str(tmp_path / "p"),
                          "--", "python", str(program), "1"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "ascentrt refused the program's settings at start: [100000 INVALID_PARAM] " \
           "ASCENTRT_BACKEND='gpu'" in out.stderr and "must import ascentrt" not in out.stderr
    assert not (tmp_path / "p").exists()
    assert ascentrt("prof", "-q", "-o", str(tmp_path / "p"), "--", "python", str(program), "1").returncode == 0


def test_an_empty_part_folder_left_behind_is_no_profile(program, tmp_path):
    (tmp_path / "p" / "child-123").mkdir(parents=True)
    out = ascentrt("prof", "-q", "-o", str(tmp_path / "p"), "--", "python", str(program), "1")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "p" / "child-123").exists() and (tmp_path / "p" / "profile.json").exists()


def test_a_profile_refused_its_backend_by_a_setting_leaves_no_folder(tmp_path):
    env = {**os.environ, "ASCENTRT_BACKEND": "gpu", "ASCENTRT_PROFILE": str(tmp_path / "q")}
    env.pop("ASCENTRT_PROFILE_PID", None)
    out = subprocess.run([sys.executable, "-c", "import ascentrt"], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert out.stderr.startswith("ascentrt: [100000 INVALID_PARAM] ASCENTRT_BACKEND='gpu'")
    assert not (tmp_path / "q").exists()


def test_a_profile_of_a_program_whose_device_was_refused_claims_no_backend(program, tmp_path):
    # (a sim run with a bad preset got no device; its summary said "cpu backend (real time)")
    env = {**os.environ, "ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "nope"}
    out = subprocess.run([sys.executable, "-m", "ascentrt.cli", "prof", "-q", "-o", str(tmp_path / "p"),
                          "--", "python", str(program), "1"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 1 and "unknown simulator preset 'nope'" in out.stderr
    summary = (tmp_path / "p" / "summary.txt").read_text()
    assert "0 device(s); no device was set up" in summary and "cpu backend" not in summary


FOREVER = textwrap.dedent("""
    import os, sys, time
    import ascentrt as art
    art.Stream().synchronize()
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    while True:
        time.sleep(0.05)
""")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _term_the_command_alone(tmp_path, *args):
    """Start `ascentrt ARGS -- python forever.py`, SIGTERM the command only once the program
    runs; returns (the command's exit status, its stderr, whether the program still runs)."""
    prog, ready = tmp_path / "forever.py", tmp_path / "pid"
    prog.write_text(FOREVER)
    # (stderr into a file: an orphaned program would hold a pipe open)
    err = open(tmp_path / "stderr.txt", "w+")
    # (the program shares the command's group: the command waits out its grace before it
    # passes the signal on, shortened here from 2 s; what is tested is that it does)
    command = ("import sys\nimport ascentrt.validate as v\nv.GROUP_GRACE_S = 0.3\n"
               "from ascentrt.cli import main\nsys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", command, *args, "--", "python", str(prog),
                             str(ready)], stderr=err, text=True, start_new_session=True)
    pid = None
    try:
        for _ in range(600):
            if ready.exists():
                pid = int(ready.read_text())
                break
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
            time.sleep(0.05)
        assert pid is not None
        proc.send_signal(15)  # (to the command, not to its process group)
        code = proc.wait(timeout=30)
        return code, (tmp_path / "stderr.txt").read_text(), _alive(pid)
    finally:
        if pid is not None and _alive(pid):
            os.kill(pid, 9)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        err.close()


@pytest.mark.cpu_only
def test_a_sigterm_to_prof_alone_stops_the_program_and_leaves_no_profile_in_the_way(tmp_path):
    out = tmp_path / "f3"
    code, err, alive = _term_the_command_alone(tmp_path, "prof", "-q", "-o", str(out))
    assert not alive and code == 128 + 15, err
    assert "interrupted (SIGTERM)" in err
    assert not glob.glob(str(out / "child-*"))  # (no progress file taken for a profile)
    proc = ascentrt("prof", "-q", "-o", str(out), "--", "python", "-c", "import ascentrt")
    assert proc.returncode == 0 and "already holds" not in proc.stderr, proc.stderr


@pytest.mark.cpu_only
@pytest.mark.parametrize("command", ["run", "sanitize"])
def test_a_sigterm_to_the_command_alone_is_passed_on_to_the_program(tmp_path, command):
    code, err, alive = _term_the_command_alone(tmp_path, command)
    assert not alive and code == 128 + 15, err


def test_a_part_folder_with_only_progress_is_no_profile(tmp_path):
    part = tmp_path / "child-123"
    part.mkdir()
    (part / "progress.json").write_text('{"tasks": 0, "api_calls": 0}')
    art.profiler.profile(str(tmp_path)).start().stop(write=False)
    assert not part.exists()


LINGER = textwrap.dedent("""
    import subprocess, sys
    import ascentrt as art
    art.Stream().synchronize()
    child = ("import os, sys, time\\nimport ascentrt as art\\nart.Stream().synchronize()\\n"
             "print('started', flush=True)\\n"
             "end = time.monotonic() + 30\\n"
             "while not os.path.exists(sys.argv[1]) and time.monotonic() < end:\\n"
             "    time.sleep(0.02)\\n")
    p = subprocess.Popen([sys.executable, "-c", child, sys.argv[1]], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "started\\n"  # (it records: then the program exits before it)
""")


def _parts_listed(folder):
    with open(os.path.join(folder, "profile.json")) as fh:
        return json.load(fh).get("parts", [])


def _wait_for(path, timeout=30):
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.cpu_only
@pytest.mark.serial  # (a 1 s timer against prof's 5 s wait, in real time: alone, after the rest)
def test_prof_waits_for_a_process_that_outlives_the_program(tmp_path):
    prog, gate, out = tmp_path / "linger.py", tmp_path / "go", tmp_path / "lg"
    prog.write_text(LINGER)
    # (the gate opens while prof waits: a process ending within the wait is in the profile)
    opener = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(1.0); open({str(gate)!r}, 'w')"])
    proc = ascentrt("prof", "-q", "-o", str(out), "--", "python", str(prog), str(gate))
    opener.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert len(_parts_listed(out)) == 1 and "still running" not in proc.stderr


@pytest.mark.cpu_only
def test_a_process_still_running_is_named_and_report_rewrite_adds_its_part(tmp_path, monkeypatch, capsys):
    import ascentrt.cli as cli
    monkeypatch.setattr(cli, "LINGER_WAIT_S", 0.2)
    prog, gate, out = tmp_path / "linger.py", tmp_path / "go", tmp_path / "lg"
    prog.write_text(LINGER)
    try:
        assert main(["prof", "-q", "-o", str(out), "--", "python", str(prog), str(gate)]) == 0
        err = capsys.readouterr().err
        assert "still running" in err and "report --rewrite" in err, err
        assert _parts_listed(out) == []
    finally:
        gate.write_text("")
    late = glob.glob(str(out / "child-*"))
    assert len(late) == 1
    _wait_for(os.path.join(late[0], "profile.json"))
    assert main(["report", "--rewrite", str(out)]) == 0
    assert len(_parts_listed(out)) == 1


def test_a_profile_written_but_unreadable_is_said_so_not_that_none_was_written(tmp_path):
    # (a part that load() refused was left out silently: "no profile was written")
    code = ("import os, ascentrt; from ascentrt.profiler.data import part_path; "
            "d = part_path(os.environ['ASCENTRT_PROFILE'], os.getpid()); os.makedirs(d, exist_ok=True); "
            "open(os.path.join(d, 'profile.json'), 'w').write('{}'); os._exit(0)")
    out = ascentrt("prof", "-q", "-o", str(tmp_path / "p"), "--", "python", "-c", code)
    assert out.returncode == 1 and "no profile was written" not in out.stderr, out.stderr
    assert "cannot be read" in out.stderr and "not a readable ascentrt profile" in out.stderr


RACY = textwrap.dedent("""
    import numpy as np, ascentrt as art
    dev = art.set_device(0); s1 = dev.create_stream(); s2 = dev.create_stream()
    buf = art.malloc(4096); out = art.malloc(4096)
    def producer(b): b[:] = 1
    def consumer(o, b): o[:] = b
    art.launch(producer, buf.view(np.float32), stream=s1, name="producer", writes=[buf])
    art.launch(consumer, out.view(np.float32), buf.view(np.float32), stream=s2, name="consumer",
               reads=[buf], writes=[out])
    dev.synchronize()
    buf.free(); out.free()
""")


def test_prof_with_the_sanitizer_on_prints_the_races_it_recorded(tmp_path):
    (tmp_path / "racy.py").write_text(RACY)
    env = dict(os.environ, ASCENTRT_SANITIZE="log")
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "prof", "-o", str(tmp_path / "o"),
                           "--", "python", "racy.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (race,) = art.profiler.load(tmp_path / "o").races
    summary = (tmp_path / "o" / "summary.txt").read_text()
    for text in (proc.stdout, summary):  # (what prof prints, and what it wrote)
        assert "Races found by the sanitizer: 1" in text and f"1. {race.text}" in text
        assert "`producer`" in race.text and "racy.py:7" in race.text and "racy.py:8" in race.text
        assert "no problems found" not in text
