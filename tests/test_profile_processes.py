"""The processes of a profiled run: each writes its part (one that outlives the program too),
those whose part never came are named, and simulated ones keep their own virtual timelines."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

import ascentrt as art
from ascentrt.profiler.data import part_path

LATE_CHILD = textwrap.dedent("""
    import os, subprocess, sys, time
    go, done = sys.argv[1], sys.argv[2]
    end = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < end:   # (the program has exited)
        time.sleep(0.02)
    import ascentrt as art
    art.launch(art.kernels.noop, name="late"); art.synchronize(timeout=10)
    grandchild = subprocess.run([sys.executable, "-c", "import ascentrt as art; "
                                 "art.launch(art.kernels.noop, name='grand'); "
                                 "art.synchronize(timeout=10); print(__import__('os').getpid())"],
                                capture_output=True, text=True, timeout=60)
    with open(done, "w") as f:
        f.write(f"{grandchild.returncode} {grandchild.stdout.strip()}")
""")
PROGRAM = textwrap.dedent("""
    import subprocess, sys
    import ascentrt as art
    art.launch(art.kernels.noop, name="main"); art.synchronize(timeout=10)
    child = subprocess.Popen([sys.executable, "late.py", "go", "done"],  # outlives the program
                             stdout=subprocess.DEVNULL, stderr=open("late.err", "w"))
    print(child.pid, flush=True)
""")


def _kernels(prof):
    return [t.name for t in prof.tasks if t.kind == "kernel"]


@pytest.mark.parametrize("how", ["ASCENTRT_PROFILE", "prof"])
def test_a_child_that_imports_ascentrt_after_the_program_exited_writes_its_part(tmp_path, how):
    (tmp_path / "late.py").write_text(LATE_CHILD)
    (tmp_path / "prog.py").write_text(PROGRAM)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    if how == "prof":
        cmd = [sys.executable, "-m", "ascentrt", "prof", "-q", "-o", str(out), "--",
               sys.executable, "prog.py"]
    else:
        cmd, env = [sys.executable, "prog.py"], dict(env, ASCENTRT_PROFILE=str(out))
    ran = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    late = int(ran.stdout.split()[0])
    if how == "prof":  # (prof names it, though it had not imported ascentrt yet)
        assert f"process {late} of the program" in ran.stderr and "still running" in ran.stderr
    named = [(m.pid, m.state) for m in getattr(art.profiler.load(out), "missing", [])]
    (tmp_path / "go").write_text("")
    end = time.monotonic() + 60
    while not (tmp_path / "done").exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert (tmp_path / "done").exists(), (tmp_path / "late.err").read_text()
    code, grand = (tmp_path / "done").read_text().split()
    assert code == "0"  # (the grandchild was not refused either)
    for pid, name in ((late, "late"), (int(grand), "grand")):
        end = time.monotonic() + 30
        while not os.path.exists(os.path.join(part_path(str(out), pid), "profile.json")) \
                and time.monotonic() < end:
            time.sleep(0.05)
        assert _kernels(art.profiler.load(part_path(str(out), pid))) == [name]
    assert named == [(late, "running")]  # (the program's profile named it, still running)
    rewrite = subprocess.run([sys.executable, "-m", "ascentrt", "report", "--rewrite", str(out)],
                             capture_output=True, text=True, timeout=60)
    assert rewrite.returncode == 0, rewrite.stderr
    prof = art.profiler.load(out)
    assert sorted(p.pid for p in prof.parts) == sorted([late, int(grand)]) and not prof.missing


def test_a_child_that_cannot_write_its_part_runs_unprofiled_with_a_warning(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, ASCENTRT_PROFILE=str(out), ASCENTRT_PROFILE_PID="1")
    # (a file where its part folder would go: the part cannot be made)
    ran = subprocess.run([sys.executable, "-c", f"import os; open(os.path.join({str(out)!r}, "
                          f"'child-' + str(os.getpid())), 'w').close(); import ascentrt as art; "
                          f"art.launch(art.kernels.noop); art.synchronize(timeout=10); print('ran')"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout == "ran\n", ran.stderr
    assert "is not profiled" in ran.stderr and ran.stderr.count("is not profiled") == 1


CRASHING = textwrap.dedent("""
    import os, subprocess, sys
    import ascentrt as art
    art.launch(art.kernels.noop, name="main"); art.synchronize(timeout=10)
    aborted = subprocess.run([sys.executable, "-c", "import os, ascentrt as art; "
                              "art.launch(art.kernels.noop, name='doomed'); "
                              "art.synchronize(timeout=10); os.abort()"])
    forked = os.fork()
    if forked == 0:
        art.launch(art.kernels.noop, name="forked"); art.synchronize(timeout=10)
        os._exit(0)   # (skips what writes its part)
    os.waitpid(forked, 0)
    print(forked, flush=True)
""")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("how", ["ASCENTRT_PROFILE", "prof"])
def test_children_that_end_without_writing_their_part_are_named_as_lost(tmp_path, how):
    (tmp_path / "prog.py").write_text(CRASHING)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    if how == "prof":
        cmd = [sys.executable, "-m", "ascentrt", "prof", "-o", str(out), "--",
               sys.executable, "prog.py"]
    else:
        cmd, env = [sys.executable, "prog.py"], dict(env, ASCENTRT_PROFILE=str(out))
    ran = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    forked = int(ran.stdout.split()[0] if how != "prof" else ran.stdout.split("\n")[0])
    prof = art.profiler.load(out)
    assert _kernels(prof) == ["main"] and not prof.parts
    lost = {m.pid: m for m in getattr(prof, "missing", [])}
    assert forked in lost and len(lost) == 2 and all(m.state == "lost" for m in lost.values())
    aborted = next(m for pid, m in lost.items() if pid != forked)
    assert "os.abort()" in " ".join(aborted.command)  # (its command line, noted as it started)
    summary = (out / "summary.txt").read_text()
    for pid in lost:
        line = next(x for x in summary.splitlines() if x.startswith(f"{pid} "))
        assert "lost" in line
    if how == "prof":
        assert f"{forked} " in ran.stdout and "lost" in ran.stdout


SIM_PROGRAM = textwrap.dedent("""
    import subprocess, sys, time
    import ascentrt as art
    art.launch(art.kernels.noop, name="parent", cost=1e-3); art.synchronize(timeout=10)
    time.sleep(0.3)   # (real time: none of the virtual timelines)
    subprocess.run([sys.executable, "-c", "import ascentrt as art; art.launch(art.kernels.noop, "
                    "name='child', cost=2e-3); art.synchronize(timeout=10)"], check=True)
""")


def test_simulated_processes_each_keep_their_own_virtual_timeline_in_the_merged_trace(tmp_path):
    (tmp_path / "prog.py").write_text(SIM_PROGRAM)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    env.update(ASCENTRT_BACKEND="sim", ASCENTRT_PROFILE=str(out))
    ran = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    prof = art.profiler.load(out)
    (child,) = prof.parts
    trace = json.loads((out / "trace.json").read_text())
    slices = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "kernel"}
    own = next(t for t in child.tasks if t.name == "child")
    # (at its own virtual start, not 300+ ms of real time later: the clocks are not mixed)
    assert slices["child"]["ts"] == pytest.approx(own.start_ns / 1000, abs=0.01)
    assert slices["child"]["dur"] == pytest.approx(2000, rel=0.01)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert "virtual time, its own timeline" in names[child.pid]
    assert "own virtual clock" in trace["otherData"]["timelines"]
    summary = (out / "summary.txt").read_text()
    assert "each process runs its own virtual timeline" in summary
    assert next(x for x in summary.splitlines() if x.startswith(f"{child.pid} ")).split()[1] == "own"


INTERRUPTED = textwrap.dedent("""
    import os, sys, time
    import ascentrt as art
    s = art.Stream()
    art.launch(art.kernels.noop, stream=s, name="quick"); s.synchronize()
    with open(sys.argv[1] + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    while True:
        time.sleep(0.05)
""")


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups")
def test_a_sigint_to_the_whole_process_group_reaches_the_program_once_and_the_profile_is_written(
        tmp_path):
    (tmp_path / "prog.py").write_text(INTERRUPTED)
    out, ready = tmp_path / "out", tmp_path / "ready"
    err = open(tmp_path / "stderr.txt", "w+")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    proc = subprocess.Popen([sys.executable, "-m", "ascentrt", "prof", "-q", "-o", str(out), "--",
                             sys.executable, "prog.py", str(ready)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        end = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < end, (tmp_path / "stderr.txt").read_text()
            time.sleep(0.05)
        os.killpg(proc.pid, 2)  # (as a job controller or a CI cancel sends it: kill -INT -PGID)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait()
        err.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 130, stderr
    assert "passed on" not in stderr and "sent to the process group" in stderr
    assert _kernels(art.profiler.load(out)) == ["quick"]


SECOND_CTRL_C = textwrap.dedent("""
    import os, signal
    import ascentrt as art
    from ascentrt.profiler import session
    stop = session.Session.stop
    def interrupted_stop(self, *args, **kwargs):   # (a second Ctrl-C as the profile is written)
        os.kill(os.getpid(), signal.SIGINT)
        return stop(self, *args, **kwargs)
    session.Session.stop = interrupted_stop
    art.launch(art.kernels.noop, name="quick"); art.synchronize(timeout=10)
""")


def test_a_ctrl_c_while_the_profile_is_written_at_exit_does_not_cut_it(tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    ran = subprocess.run([sys.executable, "-c", SECOND_CTRL_C], env=dict(env, ASCENTRT_PROFILE=str(out)),
                         capture_output=True, text=True, timeout=60)
    assert "Traceback" not in ran.stderr and "held until the profile was written" in ran.stderr
    assert _kernels(art.profiler.load(out)) == ["quick"]


@pytest.mark.parametrize("program, said", [
    ("import os, ascentrt; os._exit(3)", "imported ascentrt and started its profile, but ended "
                                          "before writing it (exited with 3)"),
    ("import os, signal, ascentrt; os.kill(os.getpid(), signal.SIGKILL)", "(was ended by SIGKILL)"),
    ("import sys; sys.exit(4)", "it never started a profile: it must import ascentrt (it exited with 4)"),
])
def test_prof_says_why_a_program_left_no_profile(tmp_path, program, said):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    ran = subprocess.run([sys.executable, "-m", "ascentrt", "prof", "-q", "-o", str(tmp_path / "o"),
                          "--", sys.executable, "-c", program], env=env, capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode != 0 and said in ran.stderr, ran.stderr
