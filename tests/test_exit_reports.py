"""What a process reports as it ends: teardown after the runtime's exit handlers, forked children."""

import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env})


def _leaks(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "LeakWarning" in line]


# ---- teardown after the runtime's exit handlers ---------------------------------------------

LATE_TEARDOWN = """
    import atexit, os
    if os.environ["WHERE"] == "atexit":   # (registered before the import: runs after the runtime's)
        atexit.register(lambda: H["late"].free())
    import ascentrt as art

    class Resource:
        def __init__(self):
            self.buf = art.malloc(1 << 20)

        def __del__(self):                 # (run as the interpreter shuts down, after the exit handlers)
            self.buf.free()

    H = {"late": art.malloc(1 << 20)}
    kept = art.malloc(4096)               # never freed: the one leak
    if os.environ["WHERE"] == "del":
        H["late"].free()
        res = Resource()
"""


@pytest.mark.parametrize("where", ["del", "atexit"])
def test_a_free_in_teardown_after_the_exit_handlers_is_no_leak(where):
    out = _run(LATE_TEARDOWN, WHERE=where)
    assert out.returncode == 0, out.stderr
    (leak,) = _leaks(out.stderr)
    assert "1 buffer(s), 4.0 KiB, never freed, reclaimed at exit (1 device 0)" in leak, leak


PYACL_LATE_TEARDOWN = """
    import atexit, os
    if os.environ["WHERE"] == "atexit":
        atexit.register(lambda: (acl.rt.free(H["late"]), acl.rt.reset_device(0), acl.finalize()))
    import ascentrt.acl as acl
    acl.init(); acl.rt.set_device(0)
    H = {"late": acl.rt.malloc(1 << 20, 0)[0]}
    kept, _ = acl.rt.malloc_host(4096)    # never freed
"""


def test_a_pyacl_programs_leaks_are_reported_once_at_its_finalize_or_else_at_exit():
    out = _run(PYACL_LATE_TEARDOWN, WHERE="never")       # (it never finalizes)
    assert out.returncode == 0, out.stderr
    (leak,) = _leaks(out.stderr)
    assert "2 buffer(s), 1.0 MiB, never freed, reclaimed at exit (1 device 0, 1 pinned host)" in leak
    out = _run(PYACL_LATE_TEARDOWN, WHERE="atexit")      # (it finalizes after the exit handlers)
    assert out.returncode == 0, out.stderr
    (leak,) = _leaks(out.stderr)
    assert "1 buffer(s), 4.0 KiB, never freed, reclaimed at acl.finalize (1 pinned host)" in leak


def test_sanitize_counts_a_race_found_after_the_report_was_written(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import atexit

        def late():  # (registered before the import: runs after the runtime's exit handlers)
            a, b = art.Device(0).create_stream(), art.Device(0).create_stream()
            art.memset_async(buf, 1, stream=a)
            art.memset_async(buf, 2, stream=b)   # a write-write race
            a.synchronize(); b.synchronize(); buf.free()

        atexit.register(late)
        import ascentrt as art
        buf = art.malloc(4096)
    """))
    out = subprocess.run([sys.executable, "-m", "ascentrt", "sanitize", "--", sys.executable, str(prog)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 66, out.stdout + out.stderr
    assert "ascentrt sanitize: 1 race(s) found:" in out.stdout + out.stderr
    listed = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("  - race on")]
    assert len(listed) == 1, out.stdout + out.stderr


# ---- a forked child reports only what it made -----------------------------------------------

FORK_BUFFERS = """
    import os, sys
    if os.environ["API"] == "acl":
        import ascentrt.acl as acl
        acl.init(); acl.rt.set_device(0); parents, _ = acl.rt.malloc(1 << 20, 0)
    else:
        import ascentrt as art
        parents = art.malloc(1 << 20)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.write(2, b"[child]\\n")
        if os.environ["API"] == "acl":
            acl.rt.malloc(4096, 0)                 # the child's own, never freed
            acl.finalize()
        else:
            childs = art.malloc(4096)              # the child's own, never freed
        sys.exit(0)                                # a normal exit: the exit handlers run
    os.waitpid(pid, 0)
    os.write(2, b"[parent]\\n")
    if os.environ["API"] == "acl":
        acl.finalize()                             # the parent's buffer, never freed
    else:
        pass                                       # the parent's buffer, never freed
"""


@pytest.mark.parametrize("api,when", [("art", "exit"), ("acl", "acl.finalize")])
def test_a_forked_child_reports_its_own_buffers_not_its_parents(api, when):
    out = _run(FORK_BUFFERS, API=api)
    assert out.returncode == 0, out.stderr
    child, parent = out.stderr.split("[parent]")
    (leak,) = _leaks(child)
    assert f"1 buffer(s), 4.0 KiB, never freed, reclaimed at {when} (1 device 0)" in leak, leak
    (leak,) = _leaks(parent)                       # (the parent's report is unchanged)
    assert f"1 buffer(s), 1.0 MiB, never freed, reclaimed at {when} (1 device 0)" in leak, leak


FORK_POOL = """
    import multiprocessing as mp
    import ascentrt.acl as acl

    def work(k):
        acl.rt.set_device(0)
        b, _ = acl.rt.malloc(4096, 0)
        return [acl.rt.free(b), acl.rt.reset_device(0), acl.finalize()]

    if __name__ == "__main__":
        acl.init(); acl.rt.set_device(0)
        b, _ = acl.rt.malloc(1 << 20, 0)
        with mp.get_context("fork").Pool(1) as pool:
            print(pool.map(work, [1]))
        print(acl.rt.free(b), acl.finalize())
"""


def test_a_fork_pool_worker_that_finalizes_reports_no_leak_of_its_parents():
    out = _run(FORK_POOL)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[[0,", "0,", "0]]", "0", "0"], out.stdout
    assert _leaks(out.stderr) == []


FORK_CALLBACKS = """
    import os, sys, threading
    import ascentrt.acl as acl
    acl.init(); acl.rt.set_device(0)
    st, _ = acl.rt.create_stream()
    me = threading.get_ident()
    acl.rt.subscribe_report(me, st)              # the main thread reports
    ran = []
    acl.rt.launch_callback(ran.append, 7, 0, st)
    acl.rt.synchronize_stream(st)                 # handed over: queued for this thread
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.write(2, b"[child]\\n")
        if os.environ["OWN"] == "1":              # one of its own, never processed
            st2, _ = acl.rt.create_stream()
            acl.rt.subscribe_report(me, st2)
            acl.rt.launch_callback(ran.append, 8, 0, st2)
            acl.rt.synchronize_stream(st2)
        sys.exit(0)
    os.waitpid(pid, 0)
    os.write(2, b"[parent]\\n")
    acl.rt.process_report(1000)
    print(ran, flush=True)
"""


@pytest.mark.parametrize("own", [0, 1])
def test_a_forked_child_reports_its_own_unrun_callbacks_not_its_parents(own):
    out = _run(FORK_CALLBACKS, OWN=str(own))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[7]"             # the parent ran its own
    child, parent = out.stderr.split("[parent]")
    unrun = [line for line in child.splitlines() if "never ran" in line]
    if own:
        (line,) = unrun
        assert "the program ended with 1 callback(s) queued" in line, line
    else:
        assert unrun == [], child
    assert "never ran" not in parent
