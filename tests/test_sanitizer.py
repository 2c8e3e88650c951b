"""The race sanitizer: racy programs get a report naming the right pair and the fix; race-free
ones (explicit waits, host synchronization, disjoint bytes, pitch gaps) get none."""

import inspect
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import ascentrt as art
from ascentrt import sanitizer
from ascentrt.engine import Hooks
from ascentrt.sanitizer import RaceError, RaceWarning

TIMEOUT = 20
N = 4096
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bufs(dev):
    made = [art.malloc(N) for _ in range(3)]
    yield made
    art.synchronize(TIMEOUT)
    for b in made:
        b.free()


def producer(b):
    b[:] = 1


def consumer(out, b):
    out[:] = b


def here() -> int:
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


def test_a_missing_wait_is_reported_with_both_launches_and_the_fix(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    with art.sanitize("log") as found:
        line_a = here() + 1
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        line_b = here() + 1
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    assert len(found) == 1
    race = found[0]
    assert (race.ptr, race.size, race.lo, race.hi) == (buf.ptr, N, 0, N)
    assert (race.first.kind, race.first.name, race.first.stream) == ("write", "producer", s1.id)
    assert (race.second.kind, race.second.name, race.second.stream) == ("read", "consumer", s2.id)
    assert race.first.site.endswith(f":{line_a}") and race.second.site.endswith(f":{line_b}")
    assert f"record an event on stream {s1.id} after `producer`" in race.fix
    assert f"make stream {s2.id} wait on it before `consumer`" in race.fix


def test_declared_buffers_count_from_any_iterable_or_a_single_buffer(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    with art.sanitize("log") as found:
        art.launch(producer, buf.view(), stream=s1, writes=(b for b in [buf]))  # a generator
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=buf, writes=[out])
    assert len(found) == 1 and found[0].first.name == "producer"
    for bad in (5, [buf, 5]):
        with pytest.raises(art.InvalidArgumentError, match="reads/writes take"):
            art.launch(producer, buf.view(), stream=s1, writes=bad)
    art.synchronize()


def test_an_event_wait_or_a_host_synchronize_orders_the_pair(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    with art.sanitize("raise") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s2.wait(s1.record())
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        s2.synchronize(TIMEOUT)  # the host now comes after both
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.synchronize(TIMEOUT)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        ev = s2.record()
        ev.synchronize(TIMEOUT)
        art.launch(producer, out.view(), stream=s1, writes=[out])
        s1.synchronize(TIMEOUT)
        s2.wait(s1.record())  # already complete: no task is queued, the order holds anyway
        art.launch(consumer, buf.view(), out.view(), stream=s2, reads=[out], writes=[buf])
    assert found == []


def test_waiting_on_the_wrong_event_or_one_recorded_too_early_is_a_race(streams, bufs):
    s1, s2 = streams
    buf, out, other = bufs
    with art.sanitize("log") as found:
        early = s1.record()                     # recorded before the producer
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s2.wait(early)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    assert [(r.first.name, r.second.name) for r in found] == [("producer", "consumer")]
    art.synchronize(TIMEOUT)
    s3 = art.current_device().create_stream()
    with art.sanitize("log") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        wrong = s3.record()                     # an event of an unrelated stream
        s2.wait(wrong)
        art.launch(consumer, other.view(), buf.view(), stream=s2, reads=[buf], writes=[other])
    assert [(r.first.name, r.second.name) for r in found] == [("producer", "consumer")]
    s3.destroy()


def test_a_host_function_reading_a_buffer_still_being_copied_is_reported(streams, bufs):
    s1, s2 = streams
    buf, _, _ = bufs
    host = art.malloc_host(N)
    seen = []
    with art.sanitize("log") as found:
        art.memcpy_async(buf, host, stream=s1)
        art.launch_host_func(lambda b: seen.append(b.alive), buf, stream=s2)
    art.synchronize(TIMEOUT)
    assert [(r.first.task_kind, r.first.kind, r.second.task_kind) for r in found] == \
        [("copy", "write", "host_func")]
    host.free()


def test_overlapping_sub_ranges_race_and_disjoint_ones_do_not(streams, bufs):
    s1, s2 = streams
    buf, _, _ = bufs
    with art.sanitize("log") as found:
        art.launch(producer, buf[:2048].view(), stream=s1, writes=[buf[:2048]])
        art.launch(producer, buf[2048:].view(), stream=s2, writes=[buf[2048:]])
    assert found == []
    art.synchronize(TIMEOUT)
    with art.sanitize("log") as found:
        art.launch(producer, buf[:3000].view(), stream=s1, writes=[buf[:3000]])
        art.launch(producer, buf[2000:].view(), stream=s2, writes=[buf[2000:]])
    assert [(r.lo, r.hi) for r in found] == [(2000, 3000)]


def test_a_pitched_copy_does_not_race_with_writes_into_its_pitch_gaps(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    host = art.malloc_host(N)
    with art.sanitize("log") as found:
        # 16 rows of 128 bytes at a pitch of 256: bytes 128..255 of each row stay untouched.
        art.memcpy2d_async(buf, 256, host, 256, 128, 16, stream=s1)
        for row in range(16):
            gap = buf[row * 256 + 128: row * 256 + 256]
            art.memset_async(gap, 0, stream=s2)
    assert found == []
    art.synchronize(TIMEOUT)
    with art.sanitize("log") as found:
        art.memcpy2d_async(buf, 256, host, 256, 128, 16, stream=s1)
        art.memset_async(buf[256 * 3 + 100: 256 * 3 + 140], 0, stream=s2)  # into row 3
    assert [(r.lo, r.hi) for r in found] == [(868, 896)]
    art.synchronize(TIMEOUT)
    host.free()


def test_a_task_touching_more_rows_than_the_record_cap_still_meets_every_earlier_access(streams):
    # The kept records of an allocation are capped (the oldest go); a copy of many rows is one
    # task whose early rows fill the cap: its later rows must still be checked against what
    # the cap dropped meanwhile (another stream's rows, unordered with this copy).
    # (A pitched copy is one strided access now: a kernel declaring many slices is such a task.)
    from ascentrt.sanitizer.state import MAX_RECORDS
    s1, s2 = streams
    pitch, rows = 64, 2 * MAX_RECORDS + 8
    x = art.malloc(pitch * rows)
    slices = [x[r * pitch: r * pitch + 16] for r in range(rows)]
    with art.sanitize("log") as found:
        art.launch(producer, x.view(), stream=s1, writes=slices[rows - MAX_RECORDS:])  # the last rows
        art.launch(producer, x.view(), stream=s2, writes=slices)  # every row, stream 2
    assert len(found) == 1 and found[0].count == MAX_RECORDS  # one report per pair of sites
    art.synchronize(TIMEOUT)
    x.free()


def test_built_in_kernels_declare_their_reads_and_writes(streams, bufs):
    s1, s2 = streams
    a, b, out = bufs
    with art.sanitize("log") as found:
        art.launch("fill", a.view(np.float32), 1.0, stream=s1)
        art.launch("fill", b.view(np.float32), 2.0, stream=s1)
        s1.synchronize(TIMEOUT)
        art.launch("add", out.view(np.float32), a.view(np.float32), b.view(np.float32), stream=s1)
        art.launch("scale", out.view(np.float32), a.view(np.float32), 3.0, stream=s2)
    # Both read `a` (no race); both write `out` (a race), and the report is exact.
    assert [(r.ptr, r.first.name, r.second.name, r.first.assumed) for r in found] == \
        [(out.ptr, "add", "scale", False)]


def test_a_kernel_without_declarations_counts_as_reading_and_writing_every_buffer(streams, bufs):
    s1, s2 = streams
    a, b, _ = bufs
    with art.sanitize("log") as found:
        art.launch(consumer, b.view(), a.view(), stream=s1)
        art.launch(consumer, b.view(), a.view(), stream=s2)
    assert found and found[0].second.assumed and "undeclared" in str(found[0])


def test_raise_mode_refuses_the_racing_launch_before_it_is_queued(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    with art.sanitize("raise"):
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        before = s2._submitted
        with pytest.raises(RaceError) as err:
            art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        assert s2._submitted == before  # nothing was queued
        assert err.value.code == art.ErrorCode.RT_PARAM_INVALID
        assert err.value.race.second.name == "consumer" and "Fix:" in str(err.value)


def test_warn_mode_warns_once_per_pair_of_sites_and_counts_the_rest(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with art.sanitize("warn") as found:
            for _ in range(5):
                art.launch(producer, buf.view(), stream=s1, writes=[buf])
                art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    races = [w for w in caught if issubclass(w.category, RaceWarning)]
    assert len(races) == len(found) >= 1
    assert sum(r.count for r in found) >= 5


def test_one_pair_of_lines_racing_on_several_buffers_is_one_warning_and_a_report_per_buffer(streams):
    # (50 buffers raced at one pair of lines gave 50 warnings, though a warning is per pair)
    s1, s2 = streams
    pairs = [(art.malloc(256), art.malloc(256)) for _ in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with art.sanitize("warn") as found:
            for buf, out in pairs:
                art.launch(producer, buf.view(), stream=s1, writes=[buf])
                art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    assert len([w for w in caught if issubclass(w.category, RaceWarning)]) == 1
    assert sorted(r.ptr for r in found) == sorted(buf.ptr for buf, _ in pairs)
    for s in streams:
        s.synchronize(TIMEOUT)
    for buf, out in pairs:
        buf.free()
        out.free()


@pytest.mark.parametrize("blocking", [True, False])
def test_the_host_after_an_event_a_host_function_set_comes_after_that_functions_stream(streams, bufs, blocking):
    # (waiting on a threading.Event a host function sets gave the host no edge: the copy after
    # the wait raced the kernel before the function, in every round)
    s1, s2 = streams
    buf, out, _ = bufs
    ready = threading.Event()

    def tell_and_linger():
        ready.set()
        time.sleep(0.05)  # (still running as the host goes on)

    with art.sanitize("log") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.launch_host_func(tell_and_linger, stream=s1, blocking=blocking)
        assert ready.wait(TIMEOUT)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        s2.synchronize(TIMEOUT)
        s1.synchronize(TIMEOUT)
    assert list(found) == []


def test_host_threads_share_one_clock_so_a_joined_thread_s_synchronize_orders_later_work(
        dev, bufs):
    buf, out, _ = bufs
    s1, s2 = dev.create_stream(), dev.create_stream()

    def worker():
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.synchronize(TIMEOUT)

    with art.sanitize("log") as found:
        t = threading.Thread(target=worker)
        t.start()
        t.join(TIMEOUT)  # (start and join order threads: the sanitizer cannot see them)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        out.numpy()[:] = 0  # a host access from this thread, before s2's consumer is done: a race
        s2.synchronize(TIMEOUT)
    assert [(r.first.stream, r.second.on_host) for r in found] == [(s2.id, True)]
    for s in (s1, s2):
        s.destroy()


def test_turning_it_off_keeps_the_reports_and_stops_checking(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    sanitizer.clear()
    with art.sanitize("log"):
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    assert not sanitizer.enabled() and len(sanitizer.reports()) == 1
    art.launch(producer, buf.view(), stream=s1, writes=[buf])
    art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    assert len(sanitizer.reports()) == 1
    sanitizer.clear()
    assert sanitizer.reports() == []


def test_an_unknown_mode_is_one_line_naming_the_allowed_ones():
    # (enable() and `ascentrt sanitize --mode` offered off, which they then refused)
    for mode in ("loud", "off"):
        with pytest.raises(art.InvalidArgumentError, match=r"\(use warn, raise or log\)$"):
            sanitizer.enable(mode)
    env = dict(os.environ, ASCENTRT_SANITIZE="loud")
    proc = subprocess.run([sys.executable, "-c", "import ascentrt"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "off, warn, raise or log" in proc.stderr


@pytest.mark.cpu_only
@pytest.mark.parametrize("name", sorted(str(p.relative_to(ROOT / "examples"))
                                         for p in (ROOT / "examples").rglob("*.py")
                                         if p.parent.name != "sim" and p.name != "race.py"))
def test_the_race_free_examples_run_clean_under_the_sanitizer(name):
    env = dict(os.environ, ASCENTRT_SANITIZE="raise")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True,
                          text=True, env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "race on bytes" not in proc.stdout + proc.stderr


def _writer_graph(dev, buf):
    cap = dev.create_stream()
    cap.begin_capture()
    art.launch(producer, buf.view(), stream=cap, writes=[buf], name="graph_writer")
    graph = cap.end_capture()
    cap.destroy()
    return graph


def test_graphs_replayed_on_two_streams_writing_one_buffer_race_unless_it_is_one_graph(
        dev, streams, bufs):
    s1, s2 = streams
    buf, _, _ = bufs
    g1, g2 = _writer_graph(dev, buf), _writer_graph(dev, buf)
    with art.sanitize("log") as found:
        g1.launch(s1)
        g1.launch(s2)  # launches of one graph run one after the other
        s2.synchronize(TIMEOUT)
        g1.launch(s1)  # (the last one is done: still in order)
    assert found == []
    art.synchronize(TIMEOUT)
    with art.sanitize("log") as found:
        g1.launch(s1)
        g2.launch(s2)
    assert [(r.first.name, r.second.name, r.first.stream, r.second.stream) for r in found] == \
        [("graph_writer", "graph_writer", s1.id, s2.id)]
    art.synchronize(TIMEOUT)


def test_reusing_a_block_whose_old_owner_is_still_used_on_another_stream_is_reported(streams):
    s1, s2 = streams
    gate = threading.Event()
    with art.sanitize("log") as found:
        buf = art.malloc(N, stream=s1)
        art.launch_host_func(gate.wait, TIMEOUT, stream=s2)
        art.memset_async(buf, 7, stream=s2)  # used on s2 ...
        buf.free(stream=s1)                  # ... freed on s1, which does not wait for s2
        new = art.malloc(N, stream=s1)       # s1 may reuse the block at once
        art.memset_async(new, 1, stream=s1)
    gate.set()
    with pytest.raises(art.TaskError):
        s2.synchronize(TIMEOUT)              # (the runtime refuses the stale memset when it runs)
    assert len(found) == 1 and found[0].reused_from is not None
    race = found[0]
    assert (race.ptr, race.first.stream, race.second.stream) == (new.ptr, s2.id, s1.id)
    assert "use after free / reuse without ordering" in str(race) and "record_stream" in race.fix
    new.free()


def test_the_pool_s_own_reuse_orderings_are_never_reported(streams):
    s1, s2 = streams
    gate = threading.Event()
    with art.sanitize("raise"):
        for stream_free in (True, False):
            buf = art.malloc(N, stream=s1)
            art.memset_async(buf, 7, stream=s2)
            art.record_stream(buf, s2)           # the free then waits for s2 too
            art.launch_host_func(gate.wait, TIMEOUT, stream=s2)
            if stream_free:
                buf.free(stream=s1)
            else:
                buf.free()                       # after all queued work
            new = art.malloc(N, stream=s1)       # pending: taken after an inserted wait, or not at all
            art.memset_async(new, 1, stream=s1)
            again = art.malloc(N)                # no stream: only ready blocks
            art.memset_async(again, 2, stream=s2)
            gate.set()
            art.synchronize(TIMEOUT)
            gate.clear()
            for b in (new, again):
                b.free()


RACY = '''
import ascentrt as art
dev = art.set_device(0)
s1, s2 = dev.create_stream(), dev.create_stream()
buf, out = art.malloc(4096), art.malloc(4096)
def producer(b): b[:] = 1
def consumer(o, b): o[:] = b
art.launch(producer, buf.view(), stream=s1, writes=[buf])
art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
art.synchronize()
'''


def test_the_sanitize_command_lists_the_races_and_fails_the_run(tmp_path):
    prog = tmp_path / "racy.py"
    prog.write_text(RACY)
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", "log", "--",
                           "python", str(prog)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 66, proc.stderr
    assert "1 race(s) found" in proc.stderr and "racy.py:9" in proc.stderr
    clean = tmp_path / "clean.py"
    clean.write_text(RACY.replace("art.launch(consumer", "s2.wait(s1.record())\nart.launch(consumer"))
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--", "python",
                           str(clean)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "no races found" in proc.stderr, proc.stderr


@pytest.mark.cpu_only
def test_the_sanitize_command_keeps_the_races_of_a_process_the_program_starts(tmp_path):
    # (each process writes its own report: the parent, exiting last with none, lost the child's)
    racy = tmp_path / "racy.py"
    racy.write_text(RACY)
    parent = tmp_path / "parent.py"
    parent.write_text("import subprocess, sys\nimport ascentrt as art\nart.Stream().synchronize()\n"
                      f"subprocess.run([sys.executable, {str(racy)!r}], check=True)\n")
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", "log", "--",
                           "python", str(parent)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 66, proc.stderr
    assert "1 race(s) found" in proc.stderr and "racy.py:9" in proc.stderr
    assert "[process " in proc.stderr and "racy.py]" in proc.stderr  # (named: not the program's own)


@pytest.mark.cpu_only
def test_a_forked_child_does_not_report_its_parent_s_races_again(tmp_path):
    code = RACY + "import os\nif os.fork() == 0:\n    sys.exit(0)\nos.wait()\n"
    prog = tmp_path / "forks.py"
    prog.write_text("import sys\n" + code)
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", "log", "--",
                           "python", str(prog)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 66 and "1 race(s) found" in proc.stderr, proc.stderr


@pytest.mark.cpu_only
@pytest.mark.parametrize("start", ["fork", "forkserver"])
def test_the_sanitize_command_keeps_the_races_of_a_multiprocessing_child(tmp_path, start):
    # (a multiprocessing child started by fork or a fork server ends with os._exit: its atexit
    # report was never written, and the run said "no races found", exit 0)
    (tmp_path / "racy.py").write_text("def race():\n" + "".join(f"    {line}\n" for line in RACY.strip().splitlines()))
    prog = tmp_path / "parent.py"
    prog.write_text("import multiprocessing as mp, racy\nif __name__ == '__main__':\n"
                    f"    p = mp.get_context({start!r}).Process(target=racy.race); p.start(); p.join()\n")
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", "log", "--",
                           "python", str(prog)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 66 and "1 race(s) found" in proc.stderr, proc.stderr


@pytest.mark.cpu_only
def test_the_sanitize_command_says_which_process_could_not_report(tmp_path):
    # A program killed by a signal writes no report: the run said "no races found" though it
    # had printed one. It names the process instead, and the races it counted as it ran.
    prog = tmp_path / "killed.py"
    prog.write_text(RACY + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    for mode in ("warn", "log"):  # (log mode prints none as found: counted all the same)
        proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", mode, "--",
                               "python", str(prog)], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert "killed.py ended without writing its report" in proc.stderr, proc.stderr
        assert "it counted 1 race(s) as it ran" in proc.stderr and "1 race(s) found" in proc.stderr
        assert "(counted as found, its report lost) race on bytes" in proc.stderr, proc.stderr


@pytest.mark.cpu_only
@pytest.mark.parametrize("mode", ["warn", "raise", "log"])
def test_a_process_that_raced_and_ended_with_os_exit_0_fails_the_sanitize_run(tmp_path, mode):
    # (its progress file said only "running": the run exited 0 with "no races found")
    prog = tmp_path / "exits.py"
    prog.write_text("import os, sys\nimport ascentrt as art\ntry:\n" +
                    "".join(f"    {line}\n" for line in RACY.strip().splitlines()) +
                    "except art.sanitizer.RaceError:\n    pass\nos._exit(0)\n")
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", mode, "--",
                           "python", str(prog)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 66, proc.stderr
    assert "no races found" not in proc.stderr
    assert "exits.py ended without writing its report" in proc.stderr, proc.stderr
    assert "1 race(s) found" in proc.stderr and "exits.py:" in proc.stderr, proc.stderr


@pytest.mark.cpu_only
def test_a_process_that_ended_with_os_exit_and_counted_no_race_is_said_so(tmp_path):
    prog = tmp_path / "clean_exit.py"
    prog.write_text(RACY.replace("art.launch(consumer", "s2.wait(s1.record())\nart.launch(consumer")
                    + "import os\nos._exit(0)\n")
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--", "python",
                           str(prog)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no races found (1 process(es) did not report, and counted none)" in proc.stderr, proc.stderr


# (its own processes, on the cpu backend: once, in the parallel cpu session, not alone after it)
@pytest.mark.skipif(os.environ.get("ASCENTRT_BACKEND") == "sim", reason="its own processes: runs once, on cpu")
@pytest.mark.long
def test_the_graph_pool_and_stream_tests_and_the_demo_run_clean_under_the_sanitizer(tmp_path):
    env = dict(os.environ, ASCENTRT_SANITIZE="raise")
    # (test_reuse_safety is left out: its programs misuse streams on purpose, and the sanitizer
    # reports them; see the reuse tests above.)
    files = [f"tests/test_{n}.py" for n in ("graph_capture", "graph_replay", "taskgraph", "mempool",
                                             "memory", "streams", "events", "notify", "host_funcs",
                                             "memory_fast_paths")]
    # Left out as well: one test looks at a buffer a queued copy will write, on purpose (to show
    # the copy has not run yet; the sanitizer reports that host view, rightly); the stuck-wait
    # diagnoses wait out real timeouts and the pool's 100k-step model and its off switch
    # submit no work: under the sanitizer they would only add seconds.
    skip = ("pinned_memory_is_asynchronous", "stuck", "unreleasable", "only_the_host_can_release",
            "reference_model", "switched_off")
    tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "-p", "no:randomly", "-k", " and ".join(f"not {k}" for k in skip),
                              *files], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env, cwd=ROOT)
    try:  # (the demo runs meanwhile, on the other core)
        demo = subprocess.run([sys.executable, "-m", "ascentrt.cli", "demo", "--no-compare",
                               "--batches", "4", "-o", str(tmp_path / "p")], capture_output=True,
                              text=True, env=env, timeout=240, cwd=ROOT)
        out, _ = tests.communicate(timeout=240)
    finally:
        tests.kill()
    assert demo.returncode == 0 and "results: correct" in demo.stdout, demo.stderr[-2000:]
    assert tests.returncode == 0 and " passed" in out, out[-3000:]


def test_a_host_view_of_a_buffer_an_async_copy_still_writes_is_reported(streams, bufs):
    s1, _ = streams
    dev_buf, _, _ = bufs
    host = art.malloc_host(N)
    gate = threading.Event()
    with art.sanitize("log") as found:
        art.launch_host_func(gate.wait, TIMEOUT, stream=s1)
        art.memcpy_async(host, dev_buf, stream=s1)  # D2H into the pinned buffer ...
        line = here() + 1
        early = host.numpy()                        # ... and the host looks before it is done
        gate.set()
        s1.synchronize(TIMEOUT)
        late = host.numpy()                         # after the synchronize: fine
    assert len(found) == 1 and found[0].second.on_host and found[0].first.task_kind == "copy"
    assert found[0].second.site.endswith(f":{line}") and "synchronize stream" in found[0].fix
    assert early.nbytes == late.nbytes == N
    host.free()


def test_with_the_profiler_on_races_are_marked_in_the_trace_and_listed_in_the_report(
        streams, bufs, tmp_path):
    s1, s2 = streams
    buf, out, _ = bufs
    with art.sanitize("log"):
        with art.profile(tmp_path / "p") as prof:
            art.launch(producer, buf.view(), stream=s1, writes=[buf])
            art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
            art.synchronize(TIMEOUT)
    races = prof.profile.races
    assert [(r.first_stream, r.second_stream, r.reuse) for r in races] == [(s1.id, s2.id, False)]
    import json
    trace = json.loads((tmp_path / "p" / "trace.json").read_text())["traceEvents"]
    marks = [e for e in trace if e.get("cat") == "sanitizer"]
    assert any(e["ph"] == "i" and "consumer" in e["args"]["report"] for e in marks)
    flow = [e for e in marks if e["ph"] in "sf"]
    assert len(flow) == 2 and flow[0]["ts"] <= flow[1]["ts"]  # forward in time
    html_text = (tmp_path / "p" / "report.html").read_text()
    assert "Races (1)" in html_text and "make stream" in html_text


TWO_DEVICES = '''
import ascentrt as art
d0, d1 = art.Device(0), art.Device(1)
s0, s1 = d0.create_stream(), d1.create_stream()
host = art.malloc_host(4096)
a, b = art.malloc(4096, d0), art.malloc(4096, d1)
with art.sanitize("log") as found:
    art.memcpy_async(host, a, stream=s0)
    art.memcpy_async(host, b, stream=s1)     # both devices write the pinned buffer: a race
    d0.synchronize()
    d1.synchronize()
    art.memcpy_async(host, a, stream=s0)
    d0.synchronize()                         # the host is after device 0's copy now
    art.memcpy_async(host, b, stream=s1)
    d1.synchronize()
print([(r.first.stream, r.second.stream) for r in found] == [(s0.id, s1.id)])
'''


def test_races_across_two_devices_are_found_and_host_synchronization_orders_them():
    env = dict(os.environ, ASCENTRT_DEVICES="2")
    proc = subprocess.run([sys.executable, "-c", TWO_DEVICES], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stdout + proc.stderr


def test_work_a_host_function_submits_comes_after_its_stream_s_earlier_work(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    done = threading.Event()

    def hand_on():  # runs on s1 after the producer: what it launches is ordered after it
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        done.set()

    with art.sanitize("log") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.launch_host_func(hand_on, stream=s1)
        assert done.wait(TIMEOUT)
        s2.synchronize(TIMEOUT)
    assert found == []


def test_a_notify_wait_queued_before_its_record_orders_the_waiting_stream_after_it(streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    notify = art.current_device().create_notify()
    with art.sanitize("raise") as found:
        s2.wait_notify(notify)               # queued first: s2 holds until the record
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.record_notify(notify)
        art.synchronize(TIMEOUT)
    assert found == []
    with art.sanitize("log") as found:
        s2.wait_notify(notify)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        s1.record_notify(notify)             # recorded before the producer: no order for it
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.synchronize(TIMEOUT)
    assert [(r.first.name, r.second.name) for r in found] == [("consumer", "producer")]
    notify.destroy()


def test_a_synchronous_copy_or_fill_of_bytes_a_stream_still_writes_is_reported(streams, bufs):
    s1, _ = streams
    buf, _, _ = bufs
    host = art.malloc_host(N)
    gate = threading.Event()
    with art.sanitize("log") as found:
        art.launch_host_func(gate.wait, TIMEOUT, stream=s1)
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.memcpy(host, buf, N)              # runs now, on this thread: the producer may not have
        art.memset(buf, 0)
        gate.set()
        s1.synchronize(TIMEOUT)
        art.memcpy(host, buf, N)              # after the synchronize: fine
    assert len(found) == 2 and all(r.second.on_host and r.first.name == "producer" for r in found)
    host.free()


def test_non_blocking_host_functions_graph_synchronize_and_old_sessions_order_correctly(
        dev, streams, bufs):
    s1, s2 = streams
    buf, out, _ = bufs
    seen = []
    with art.sanitize("raise") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.launch_host_func(lambda b: seen.append(b.alive), buf, stream=s1, blocking=False)
        art.synchronize(TIMEOUT)             # (a refused hand-off would hang here)
        graph = _writer_graph(dev, buf)
        graph.launch(s1)
        graph.synchronize(TIMEOUT)           # the host is after the launch now
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.synchronize(TIMEOUT)
    assert found == [] and seen == [True]
    with art.sanitize("log"):
        old = s1.record()                    # a record of an earlier session ...
    art.synchronize(TIMEOUT)
    with art.sanitize("log") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s2.wait(old)                         # ... orders nothing after this producer
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
    assert [(r.first.name, r.second.name) for r in found] == [("producer", "consumer")]
    art.synchronize(TIMEOUT)


def test_the_sanitize_command_without_a_program_is_one_line_with_a_code():
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0
    assert "100000" in proc.stderr and "nothing to run" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", "off", "--",
                           "python", "-c", "pass"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "warn, raise or log" in proc.stderr


def test_what_a_host_function_touches_is_its_own_access_at_its_place_in_the_stream(streams, bufs):
    # (a synchronous copy inside a host function counted as the main thread's, racing the
    # stream's earlier kernel; a numpy view inside one was not checked at all)
    s1, s2 = streams
    buf, out, _ = bufs
    host = np.zeros(N, np.uint8)

    def read_back():  # ordered after the producer: its stream runs it after
        art.memcpy(host, buf, N)
        art.memset(out, 0)

    with art.sanitize("raise") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.launch_host_func(read_back, stream=s1)
        s1.synchronize(TIMEOUT)
    assert found == [] and host[0] == 1.0

    def touch():  # not ordered with s2's consumer, which reads buf
        buf.numpy()[:] = 3

    with art.sanitize("log") as found:
        art.launch_host_func(touch, stream=s1)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.synchronize(TIMEOUT)
    assert len(found) == 1 and "touch" in (found[0].first.name + found[0].second.name)


def test_a_non_blocking_host_function_is_not_ordered_before_its_stream_s_later_work(streams, bufs):
    # (its buffer argument counted as its stream's, so the kernel after it looked ordered)
    s1, _ = streams
    buf, _, _ = bufs
    gate = threading.Event()
    with art.sanitize("log") as found:
        art.launch_host_func(lambda b: gate.wait(TIMEOUT), buf, stream=s1, blocking=False)
        art.launch(producer, buf.view(), stream=s1, writes=[buf])  # runs while it waits
        gate.set()
        art.synchronize(TIMEOUT)
    assert len(found) == 1 and found[0].second.name == "producer"


def test_a_host_function_that_waits_for_the_producer_itself_may_read_after(streams, bufs):
    # (its accesses were checked with its clock at submission: a wait inside it ordered nothing)
    s1, s2 = streams
    buf, out, _ = bufs
    ev = art.Event()

    def read_after_waiting():
        s1.synchronize(TIMEOUT)
        buf.numpy().sum()
        ev.synchronize(TIMEOUT)
        art.memcpy(out, buf, N)

    with art.sanitize("raise") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        ev.record(s1)
        art.launch_host_func(read_after_waiting, stream=s2)
        s2.synchronize(TIMEOUT)
    assert found == []


def test_a_synchronous_copy_only_reads_its_source(streams, bufs):
    # (its source counted as written: a copy out of a buffer a kernel was reading raced it,
    # and in raise mode the correct program was refused)
    s1, _ = streams
    buf, out, _ = bufs
    host = np.zeros(N, np.uint8)
    with art.sanitize("raise") as found:
        art.launch(consumer, out.view(), buf.view(), stream=s1, reads=[buf], writes=[out])
        art.memcpy(host, buf, N)  # the host reads buf too: no race
        with pytest.raises(RaceError, match=r"write by the host \(a synchronous copy"):
            art.memcpy(out, host, N)  # it writes out, which the kernel writes
        s1.synchronize(TIMEOUT)
    assert [r.ptr for r in found] == [out.ptr]  # (the refused one alone: none on buf)


def test_an_event_query_that_says_done_orders_the_host_after_the_record(streams, bufs):
    # (query read the flag twice: done between the two reads, it returned True without
    # ordering the host after the record, and the next launch raced the producer)
    s1, s2 = streams
    buf, out, _ = bufs
    for _ in range(50):
        with art.sanitize("log") as found:
            art.launch(producer, buf.view(), stream=s1, writes=[buf])
            ev = s1.record()
            while not ev.query():
                pass
            art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
            s2.synchronize(TIMEOUT)
        assert found == []


def test_a_notify_recorded_twice_is_released_by_the_first_record(streams, bufs):
    # (the second record's clock was taken as the one the wait saw: the write between the two
    # records looked ordered before the consumer, which it is not)
    s1, s2 = streams
    buf, out, _ = bufs
    n = art.Notify()
    with art.sanitize("log") as found:
        s1.record_notify(n)
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.record_notify(n)  # finds it set: releases nothing
        s2.wait_notify(n)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.synchronize(TIMEOUT)
    assert len(found) == 1 and {found[0].first.name, found[0].second.name} == {"producer", "consumer"}


def test_a_reset_notify_waits_for_its_next_record(streams, bufs):
    # (reset was invisible to the sanitizer: the wait took the cleared record's clock, and the
    # producer its next record follows looked unordered with the consumer)
    s1, s2 = streams
    buf, out, _ = bufs
    n = art.Notify()
    with art.sanitize("log") as found:
        s1.record_notify(n)
        s1.synchronize(TIMEOUT)
        n.reset()
        s2.wait_notify(n)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.launch(producer, buf.view(), stream=s1, writes=[buf])  # before: read, then write...
        s1.record_notify(n)  # ... no: this record, after the producer, releases the consumer
        art.synchronize(TIMEOUT)
    assert found == []


def test_a_race_with_a_graph_lane_names_the_lane_and_orders_the_launch_stream(dev, streams, bufs):
    # (the fix asked for an event on a stream the program never made)
    s1, s2 = streams
    buf, out, _ = bufs
    side = dev.create_stream()
    s1.begin_capture()
    side.wait(s1.record())
    art.launch(producer, buf.view(), stream=side, writes=[buf], name="lane_write")
    s1.wait(side.record())
    g = s1.end_capture()
    with art.sanitize("log") as found:
        g.launch(s1)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.synchronize(TIMEOUT)
    assert len(found) == 1
    text, fix = str(found[0]), found[0].fix
    assert f"the work captured on stream {side.id}" in text
    assert f"graph {g.id}'s launch" in text and "joins it again at its end" in fix
    assert f"record an event on stream {s1.id} after the launch" in fix, fix
    assert f"make stream {s2.id} wait on it before `consumer`" in fix, fix
    g.destroy()
    side.destroy()


def test_a_race_between_two_nodes_of_one_graph_names_their_capture_sites_and_fixes_the_capture(
        dev, streams, bufs):
    # (both accesses were placed at the launch line, and the fix asked for events around the
    # launch, which cannot order two nodes of one launch)
    s1, _ = streams
    buf, out, _ = bufs
    left = dev.create_stream()
    s1.begin_capture()
    left.wait(s1.record())
    art.launch(producer, buf.view(), stream=left, writes=[buf], name="lane_write")
    write_line = inspect.currentframe().f_lineno - 1
    art.launch(consumer, out.view(), buf.view(), stream=s1, reads=[buf], writes=[out],
               name="main_read")  # (no wait on `left` before it)
    read_line = inspect.currentframe().f_lineno - 2
    s1.wait(left.record())
    g = s1.end_capture()
    with art.sanitize("log") as found:
        g.launch(s1)
        launch_line = inspect.currentframe().f_lineno - 1
        art.synchronize(TIMEOUT)
    assert len(found) == 1
    race = found[0]
    here = os.path.basename(__file__)
    by_name = {race.first.name: race.first, race.second.name: race.second}
    assert by_name["lane_write"].captured == f"{here}:{write_line}"
    assert by_name["main_read"].captured == f"{here}:{read_line}"
    assert race.fix == (f"both are nodes of one graph, which runs them as they were captured: in the "
                        f"capture, record an event on stream {left.id} after `lane_write` "
                        f"({here}:{write_line}) and make stream {s1.id} wait on it before "
                        f"`main_read` ({here}:{read_line}), then capture the graph again")
    assert f":{launch_line}" in str(race)  # (each access still says which launch ran it)
    g.destroy()
    left.destroy()


@pytest.mark.cpu_only
def test_a_notify_recorded_on_two_streams_orders_the_wait_after_neither_alone(dev, streams, bufs):
    # (the first record submitted was taken as the one releasing the wait; the other stream's
    # record ran first and released it, before the producer the first one follows)
    s1, s2 = streams
    buf, out, _ = bufs
    s3 = dev.create_stream()
    n = art.Notify()
    gate = threading.Event()
    with art.sanitize("log") as found:
        art.launch(lambda: gate.wait(TIMEOUT), stream=s1)
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.record_notify(n)
        s3.record_notify(n)  # runs at once: it releases the wait
        s2.wait_notify(n)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        s2.synchronize(TIMEOUT)
        gate.set()
        art.synchronize(TIMEOUT)
    assert len(found) == 1 and {found[0].first.name, found[0].second.name} == {"producer", "consumer"}
    s3.destroy()


def test_a_refused_graph_launch_leaves_none_of_its_nodes_behind(dev, streams, bufs):
    # (its nodes were taken into the clocks one by one until the racing one refused the launch:
    # the copy that never ran then refused a later, correct write of its destination)
    s1, s2 = streams
    a, b, out = bufs
    src = art.malloc(N)
    cap = dev.create_stream()
    cap.begin_capture()
    art.memcpy_async(b, src, stream=cap)                                       # writes b
    art.launch(consumer, out.view(), a.view(), stream=cap, reads=[a], writes=[out])  # reads a
    g = cap.end_capture()
    with art.sanitize("raise") as found:
        art.launch(producer, a.view(), stream=s1, writes=[a])
        with pytest.raises(RaceError):
            g.launch(s2)  # the read of a races the producer
        art.launch(producer, b.view(), stream=s1, writes=[b])  # nothing else touched b
        art.synchronize(TIMEOUT)
    assert [(r.first.name, r.second.name) for r in found] == [("producer", "consumer")]
    g.destroy()
    cap.destroy()
    src.free()


def test_a_synchronous_pitched_copy_is_checked_row_by_row(streams, bufs):
    # (it was checked over its whole span, gaps included: disjoint rows were reported)
    s1, _ = streams
    buf, src, _ = bufs
    host = art.malloc_host(N)
    with art.sanitize("log") as found:
        art.memcpy2d_async(buf, 256, src, 64, 64, 8, stream=s1)  # rows [256r, 256r + 64)
        art.memcpy2d(buf.ptr + 64, 256, host, 64, 64, 8)         # rows [256r + 64, 256r + 128)
    assert found == []
    art.synchronize(TIMEOUT)
    with art.sanitize("log") as found:
        art.memcpy2d_async(buf, 256, src, 64, 64, 8, stream=s1)
        art.memcpy2d(buf.ptr + 32, 256, host, 64, 64, 8)         # half of each row
    assert len(found) == 1 and (found[0].lo, found[0].hi) == (32, 64)  # (one strided access)
    art.synchronize(TIMEOUT)
    host.free()


def test_a_pitched_copy_of_more_rows_than_kept_one_by_one_is_checked_exactly(streams):
    # (past 4096 rows it was one span from the first byte to the last: its gaps raced too)
    s1, s2 = streams
    rows, pitch = 4097, 96
    x, src = art.malloc(pitch * rows), art.malloc(32 * rows)
    with art.sanitize("log") as found:  # three interleaved sets of rows: [96r, +32), +32, +64
        art.memcpy2d_async(x, pitch, src, 32, 32, rows, stream=s1)
        art.memset_async(x.ptr + 32, 0, 32, stream=s2)                 # the gap of row 0
        art.memset_async(x.ptr + pitch * 4000 + 40, 0, 16, stream=s2)  # a gap far in
        art.memcpy2d_async(x.ptr + 32, pitch, src, 32, 32, rows, stream=s2)  # the gaps
        art.memcpy2d(x.ptr + 64, pitch, src, 32, 32, rows)            # the host: the others
    assert found == []
    art.synchronize(TIMEOUT)
    with art.sanitize("log") as found:
        art.memcpy2d_async(x, pitch, src, 32, 32, rows, stream=s1)
        art.memset_async(x.ptr + pitch * 4000 + 20, 0, 16, stream=s2)  # into row 4000
        art.memcpy2d_async(x.ptr + 16, pitch, src, 32, 32, rows, stream=s2)  # half of each row
    assert [(r.lo, r.hi) for r in found] == [(pitch * 4000 + 20, pitch * 4000 + 32), (16, 32)]
    art.synchronize(TIMEOUT)
    x.free(), src.free()


def test_strided_spans_overlap_exactly_where_their_rows_share_bytes():
    from ascentrt.sanitizer.accesses import overlap as _overlap

    def spans(lo, pitch, width, n):
        return [(lo + r * pitch, lo + r * pitch + width) for r in range(n)]

    rng = np.random.default_rng(7)
    for _ in range(3000):
        shapes = []
        for _ in range(2):
            n = int(rng.integers(1, 6))
            width = int(rng.integers(1, 9))
            pitch = width + int(rng.integers(0, 9)) if n > 1 else width
            shapes.append((int(rng.integers(0, 40)), pitch, width, n))
        (alo, ap, aw, an), (blo, bp, bw, bn) = shapes
        a_rows = (ap, aw) if an > 1 and ap != aw else None
        b_rows = (bp, bw) if bn > 1 and bp != bw else None
        ahi, bhi = alo + (an - 1) * ap + aw, blo + (bn - 1) * bp + bw
        if not (ahi > blo and alo < bhi):
            continue  # (the caller tests the spans first)
        if a_rows is None and b_rows is None:
            continue
        shared = {i for x0, x1 in spans(alo, ap, aw, an) for i in range(x0, x1)} & \
            {i for y0, y1 in spans(blo, bp, bw, bn) for i in range(y0, y1)}
        got = _overlap(alo, ahi, a_rows, (blo, bhi, 0, 0, 0, 0, 0, 0, b_rows))
        assert (got is None) == (not shared), (shapes, got)
        if got is not None:  # the first bytes they share, all shared
            assert got[0] == min(shared) and set(range(*got)) <= shared, (shapes, got)


def test_raise_mode_refuses_a_notify_record_that_releases_racing_held_work(dev, streams, bufs):
    # (the held consumer was checked without raising when the record released it, and raise
    # mode said nothing at all)
    s1, s2 = streams
    buf, out, _ = bufs
    s3 = dev.create_stream()
    n = dev.create_notify()
    with art.sanitize("raise") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s2.wait_notify(n)  # its record is not submitted yet: what follows is held
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        with pytest.raises(RaceError, match="notify record refused") as err:
            s3.record_notify(n)  # s3 is not ordered after the producer
        assert (err.value.race.first.name, err.value.race.second.name) == ("producer", "consumer")
        s3.wait(s1.record())
        s3.record_notify(n)  # now after the producer: the consumer goes on, no race
        art.synchronize(TIMEOUT)
    assert len(found) == 1
    n.destroy()
    s3.destroy()


def test_raise_mode_warns_of_a_race_in_work_it_can_no_longer_refuse(streams, bufs):
    # (held work released by a record the runtime queued itself cannot be refused: it was
    # reported in silence)
    from ascentrt.sanitizer import _announce
    _, (buf, out, _) = streams, bufs
    with art.sanitize("raise"):
        race = sanitizer.Race(buf.ptr, N, "?", 0, N,
                              sanitizer.Access(True, "kernel", "producer", 2, 1, "x.py:1"),
                              sanitizer.Access(False, "kernel", "consumer", 3, 1, "x.py:2"))
        with pytest.warns(RaceWarning, match="consumer"):
            _announce(race, True)


def test_a_race_with_a_non_blocking_host_function_names_its_stream_and_says_to_make_it_block(
        streams, bufs):
    # (it named the device's hidden stream for such functions and asked that stream to wait)
    s1, s2 = streams
    buf, out, _ = bufs
    ran = threading.Event()

    def touch(*_):
        buf.numpy()[:] = 5
        ran.set()

    with art.sanitize("log") as found:
        art.launch_host_func(touch, stream=s1, blocking=False)
        art.launch(consumer, out.view(), buf.view(), stream=s1, reads=[buf], writes=[out])
        assert ran.wait(TIMEOUT)
        art.synchronize(TIMEOUT)
    assert len(found) == 1
    race = found[0]
    fn = race.first if race.first.name == "touch" else race.second
    assert fn.beside and fn.stream == s1.id and fn.task_id == 1
    assert "blocking=True" in race.fix and f"stream {s1.id}'s later" in race.fix
    with art.sanitize("log") as found:
        art.launch_host_func(touch, buf, stream=s1, blocking=False)
        art.synchronize(TIMEOUT)
        ran.clear()
        art.launch_host_func(touch, buf, stream=s1, blocking=False)  # its argument: at launch
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        assert ran.wait(TIMEOUT)
        art.synchronize(TIMEOUT)
    hidden = f"stream {s1._dq.detached.id} "  # (the device's stream for such functions)
    assert found and all(f"stream {s1.id}" in str(r) and hidden not in str(r) for r in found)
    assert all("blocking=True" in r.fix for r in found if r.first.beside), [str(r) for r in found]


COLLECTIVE_RACE = '''
import numpy as np, ascentrt as art
from ascentrt import hccl
FP32, SUM = hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM
comms = hccl.comm_init_all([0, 1])
d0, d1 = art.Device(0), art.Device(1)
c0, m0, c1, m1 = d0.create_stream(), d0.create_stream(), d1.create_stream(), d1.create_stream()
b0, o0 = art.malloc(4096, device=0), art.malloc(4096, device=0)
b1, o1 = art.malloc(4096, device=1), art.malloc(4096, device=1)
with art.sanitize("log") as found:
    art.launch("fill", b0.view(np.float32), 1.0, stream=c0)
    art.launch("fill", b1.view(np.float32), 1.0, stream=c1)
    m0.wait(c0.record())
    hccl.all_reduce(b0, o0, 1024, FP32, SUM, comms[0], m0)
    hccl.all_reduce(b1, o1, 1024, FP32, SUM, comms[1], m1)  # rank 1 forgot to wait for c1
    d0.synchronize(), d1.synchronize()
assert len(found) == 1, [str(r) for r in found]
r = found[0]
lane = r.second
print(lane.for_call, lane.for_stream == m1.id, lane.site.endswith(":15"), (r.lo, r.hi))
print(f"make stream {m1.id} wait on it" in r.fix, f"stream {c1.id} after `fill`" in r.fix)
'''


def test_a_race_with_a_collective_s_lane_names_the_rank_s_call_and_its_stream():
    # (the lane's label named rank 0 while the site was rank 1's call, the fix never named the
    # stream to order, and the headline showed only the bytes of the first step)
    from subprocess_util import run_program
    out = run_program(COLLECTIVE_RACE, {"ASCENTRT_DEVICES": "2", "ASCENTRT_LEAK_CHECK": "off"})
    assert out.split("\n")[:2] == ["rank 1's all_reduce True True (0, 4096)", "True True"], out


def test_a_non_blocking_callback_races_its_stream_s_later_work_whenever_it_runs(streams, bufs):
    # (it wrote with the host threads' shared clock: once the main thread synchronized the
    # stream first, the callback's write looked ordered after the copy it runs beside)
    from ascentrt import callback
    s1, _ = streams
    buf, _, _ = bufs
    host = art.malloc_host(N)
    gate, done = threading.Event(), threading.Event()

    def reporter():
        gate.wait(TIMEOUT)
        callback.process_reports(TIMEOUT)
        done.set()

    thread = threading.Thread(target=reporter)
    thread.start()
    callback.subscribe(thread.ident, s1)

    def cb(_):
        art.memset(host, 7, N)  # the host writes what the copy below reads

    with art.sanitize("log") as found:
        callback.launch_callback(cb, None, s1, blocking=False)
        art.memcpy_async(buf, host, stream=s1)  # runs beside the callback
        s1.synchronize(TIMEOUT)                 # ... before it here, on another thread
        gate.set()
        assert done.wait(TIMEOUT)
    thread.join(TIMEOUT)
    callback.unsubscribe(thread.ident, s1)
    assert len(found) == 1, [str(r) for r in found]
    race = found[0]
    assert race.second.beside and race.second.name == "cb" and race.second.stream == s1.id
    assert "ACL_CALLBACK_BLOCK" in race.fix
    host.free()


def _graph_of(stream, buf, n=4):
    stream.begin_capture()
    for _ in range(n):
        art.launch(producer, buf.view(), stream=stream, writes=[buf])
    return stream.end_capture()


def test_a_raise_mode_batch_saves_only_what_it_changes_not_every_stream(dev, streams, bufs, monkeypatch):
    # (every graph launch copied the clocks of every stream ever made: 10x the warn-mode cost)
    from ascentrt.engine import Hooks
    from ascentrt.sanitizer.state import Sanitizer
    s1, _ = streams
    buf, _, _ = bufs
    g = _graph_of(s1, buf)
    many = [dev.create_stream() for _ in range(40)]
    taken = []
    real = Sanitizer._checkpoint
    monkeypatch.setattr(Sanitizer, "_checkpoint", lambda self: taken.append(real(self)) or taken[-1])
    with art.sanitize("raise"):
        for s in many:  # every stream known to the sanitizer, and to each other
            art.launch(consumer, buf.view(), buf.view(), stream=s, reads=[buf], writes=[])
            s1.wait(s.record())
        g.launch(s1)
        assert len(Hooks.sanitizer.streams) > 40
        art.synchronize(TIMEOUT)
    saved = taken[-1]
    assert sum(len(v) for v in saved.values() if hasattr(v, "__len__")) <= 8, saved.keys()
    for s in many:
        s.destroy()


def test_a_destroyed_stream_leaves_no_clock_in_the_sanitizer(dev, streams, bufs):
    # (streams were never dropped: short-lived ones made every stream clock and batch cost more)
    from ascentrt.engine import Hooks
    s1, _ = streams
    buf, _, _ = bufs
    with art.sanitize("raise") as found:
        for _ in range(60):
            tmp = dev.create_stream()
            tmp.wait(s1.record())
            art.launch(producer, buf.view(), stream=tmp, writes=[buf])
            s1.wait(tmp.record())
            tmp.destroy()
        san = Hooks.sanitizer
        assert len(san.streams) < 10 and len(san.joined) < 10
        art.launch(producer, buf.view(), stream=s1, writes=[buf])  # still ordered after them all
        art.synchronize(TIMEOUT)
    assert found == []


def test_a_refused_notify_record_leaves_no_clock_on_a_held_event_record(dev, streams, bufs):
    # (and a race two held streams down refuses the record too: it was only a warning)
    # (the rollback cleared only the notify record's clock: the held event record released
    # with it kept one, and a wait on that event later joined it and missed a real race)
    s1, s2 = streams
    buf, x, out = bufs
    s3, s4 = dev.create_stream(), dev.create_stream()
    n, e, out2 = dev.create_notify(), art.Event(), art.malloc(N)
    with art.sanitize("raise") as found:
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        art.launch(producer, x.view(), stream=s3, writes=[x])
        s2.wait_notify(n)  # held from here
        e.record(s2)  # a held record
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        with pytest.raises(RaceError, match="notify record refused"):
            s3.record_notify(n)  # s3 is not after s1's producer
        s4.wait(e)  # after s2's held record (s4 is held too): not after s3's write of x
        art.launch(consumer, out2.view(), x.view(), stream=s4, reads=[x], writes=[out2])
        with pytest.raises(RaceError, match="notify record refused") as err:
            s1.record_notify(n)  # releases s2, whose record releases s4: its read races s3's write
        assert (err.value.race.first.stream, err.value.race.second.stream) == (s3.id, s4.id)
        s1.wait(s3.record())
        s1.record_notify(n)  # after s3 now: all goes on
        art.synchronize(TIMEOUT)
    assert [(r.first.stream, r.second.stream) for r in found] == [(s1.id, s2.id), (s3.id, s4.id)]
    out2.free()
    n.destroy()
    s3.destroy()
    s4.destroy()


def test_a_launch_with_declared_buffers_takes_the_inlined_path(streams, bufs, monkeypatch):
    # (the hot path grew calls per launch, _submit_site, _submitted, _apply, _info, and the
    # launch cost went past 3x the sanitizer-off one)
    from ascentrt.sanitizer import state
    s1, _ = streams
    buf, out, _ = bufs
    calls = []
    for name in ("submit_site", "access_info", "task_accesses"):
        real = getattr(state, name)
        monkeypatch.setattr(state, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    for name in ("_submitted", "_apply"):
        real = getattr(state.Sanitizer, name)
        monkeypatch.setattr(state.Sanitizer, name,
                            lambda self, *a, _real=real, _name=name: calls.append(_name) or _real(self, *a))
    with art.sanitize("log") as found:
        line = here() + 2
        for _ in range(3):
            art.launch(consumer, out.view(), buf.view(), stream=s1, reads=[buf], writes=[out])
        art.launch(producer, buf.view(), stream=streams[1], writes=[buf])
        art.synchronize(TIMEOUT)
    assert calls == []
    assert len(found) == 1 and found[0].first.site.endswith(f":{line}")


@pytest.mark.parametrize("height", [10, 100, 4096, 4097])
def test_a_pitched_copy_of_any_height_keeps_its_first_rows(streams, height):
    # (33..4096 rows were kept one record per row, and the cap on records dropped the first)
    s1, s2 = streams
    pitch, width = 64, 32
    dst, src = art.malloc(height * pitch), art.malloc(height * width)
    with art.sanitize("log") as found:
        art.memcpy2d_async(dst, pitch, src, width, width, height, stream=s1)
        art.memset_async(dst, 7, 16, stream=s2)  # row 0: races the copy's first row
        art.synchronize(TIMEOUT)
    assert [(r.lo, r.hi) for r in found] == [(0, 16)]
    dst.free(), src.free()


def test_a_pitched_copy_is_one_record_and_repeating_it_keeps_one(streams):
    # (a synchronous 4096-row copy made 4096 records, 48x slower; repeats piled up strided ones)
    from ascentrt.engine import Hooks
    s1, _ = streams
    rows, pitch = 4096, 64
    x, src = art.malloc(rows * pitch), art.malloc(rows * 32)
    with art.sanitize("log") as found:
        art.memcpy2d(x, pitch, src, 32, 32, rows)
        assert len(Hooks.sanitizer.shadow[id(x)]) == 1
        for _ in range(20):
            art.memcpy2d_async(x, pitch, src, 32, 32, rows, stream=s1)
        assert len(Hooks.sanitizer.shadow[id(x)]) <= 2
        art.synchronize(TIMEOUT)
    assert found == []
    x.free(), src.free()


def test_two_strided_accesses_of_one_pitch_are_compared_without_walking_rows(streams):
    # (two streams copying the column halves of a 20000-row matrix took 161 ms per pair; the
    # submitting thread's CPU time, where the check runs: a loaded machine stretches wall time)
    import time
    s1, s2 = streams
    rows, pitch = 20000, 64
    x, src = art.malloc(rows * pitch), art.malloc(rows * 32)
    with art.sanitize("log") as found:
        t0 = time.thread_time()
        for _ in range(20):
            art.memcpy2d_async(x, pitch, src, 32, 32, rows, stream=s1)          # the left halves
            art.memcpy2d_async(x.ptr + 32, pitch, src, 32, 32, rows, stream=s2)  # the right halves
        took = time.thread_time() - t0
        art.synchronize(TIMEOUT)
    assert found == [] and took < 0.5, took
    x.free(), src.free()


def test_the_fix_for_a_non_blocking_callback_offers_no_device_synchronize(streams, bufs):
    # (callbacks run on the report thread, not the device's hidden stream: a device synchronize
    # does not wait for them, yet the fix offered one)
    from ascentrt import callback
    s1, _ = streams
    host = art.malloc_host(N)
    gate, wrote, release = threading.Event(), threading.Event(), threading.Event()

    def reporter():
        gate.wait(TIMEOUT)
        callback.process_reports(TIMEOUT)

    thread = threading.Thread(target=reporter)
    thread.start()
    callback.subscribe(thread.ident, s1)

    def cb(_):
        art.memset(host, 7, N)
        wrote.set()
        release.wait(TIMEOUT)

    with art.sanitize("log") as found:
        callback.launch_callback(cb, None, s1, blocking=False)
        gate.set()
        art.Device(0).synchronize(TIMEOUT)
        assert wrote.wait(TIMEOUT)
        host.numpy()[:] = 1  # races the callback, still running
        release.set()
        thread.join(TIMEOUT)
    callback.unsubscribe(thread.ident, s1)
    assert len(found) == 1, [str(r) for r in found]
    fix = found[0].fix
    assert "ACL_CALLBACK_BLOCK" in fix and f"synchronize stream {s1.id}" in fix
    assert "device" not in fix, fix
    host.free()


def test_a_race_warning_turned_into_an_error_leaves_its_work_queued(dev, streams, bufs):
    # (it escaped before the tasks were queued: the state kept work that never ran, and a
    # correct launch later was reported against it)
    s1, s2 = streams
    a, b, out = bufs
    src = art.malloc(N)
    cap = dev.create_stream()
    cap.begin_capture()
    art.memcpy_async(b, src, stream=cap)
    art.launch(consumer, out.view(), a.view(), stream=cap, reads=[a], writes=[out])
    g = cap.end_capture()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RaceWarning)
        with art.sanitize("warn") as found:
            art.launch(producer, a.view(), stream=s1, writes=[a])
            with pytest.raises(RaceWarning):
                g.launch(s2)  # its read of a races the producer: told once queued
            assert s2._submitted > 0
            with pytest.raises(RaceWarning):
                art.launch(producer, out.view(), stream=s1, writes=[out])  # races the graph's write
            assert s1._submitted == 2
            art.synchronize(TIMEOUT)
    assert [(r.first.name, r.second.name) for r in found] == [("producer", "consumer"), ("consumer", "producer")]
    g.destroy()
    cap.destroy()
    src.free()


def test_two_strided_accesses_of_different_pitches_walk_one_period_at_most(streams):
    # (rows of pitches 64 and 96 share bytes, if at all, within one lcm (192 bytes) of where
    # both spans begin: the walk went over every row, seconds of it. The CPU time of the
    # submitting thread, where the check runs: a loaded machine stretches its wall time.)
    import time
    s1, s2 = streams
    rows = 200000
    x, src = art.malloc(rows * 96), art.malloc(rows * 8)
    with art.sanitize("log") as found:
        t0 = time.thread_time()
        for _ in range(10):
            art.memcpy2d_async(x, 64, src, 8, 8, rows, stream=s1)            # bytes 0..7 mod 64
            art.memcpy2d_async(x.ptr + 16, 96, src, 8, 8, rows, stream=s2)  # 16..23 mod 96
        took = time.thread_time() - t0
        art.synchronize(TIMEOUT)
    assert found == [] and took < 0.3, took
    x.free(), src.free()


EARLY_ALLOCATION = '''
import ascentrt as art
dev = art.set_device(0)
s1, s2 = dev.create_stream(), dev.create_stream()
buf = art.malloc(4096)
art.sanitizer.enable("log")
art.launch(lambda b: None, buf, stream=s1, writes=[buf], name="w")
art.launch(lambda b: None, buf, stream=s2, reads=[buf], name="r")
dev.synchronize()
print(art.sanitizer.reports()[0])
'''


@pytest.mark.cpu_only  # (its own process: the text is the same on sim)
@pytest.mark.parametrize("sites", ["warn", "sites"])
def test_a_buffer_allocated_before_the_sanitizer_is_named_by_the_allocator_s_site_or_so(sites):
    # (its report said "allocated at ?")
    from subprocess_util import run_program
    out = run_program(EARLY_ALLOCATION, {"ASCENTRT_LEAK_CHECK": sites})
    assert "allocated at ?" not in out, out
    if sites == "sites":  # (the allocator noted it: ~1 us per malloc, so only when asked)
        assert "(allocated at <string>:5)" in out, out
    else:
        assert "(allocated before the sanitizer was enabled; set ASCENTRT_LEAK_CHECK=sites to see where)" in out, out


@pytest.mark.parametrize("wait_first", [False, True], ids=["write-first", "wait-first"])
def test_a_value_wait_orders_its_stream_after_the_value_write_it_waits_for(dev, streams, bufs, wait_first):
    # A value write and a value wait that meets it order the two streams as a notify does
    # (aclrtValueWrite / aclrtValueWait): the consumer after the wait reads what the producer
    # wrote before the write, no race.
    s1, s2 = streams
    buf, out, _ = bufs
    word = art.malloc(8)
    art.memset(word, 0)
    with art.sanitize("log") as found:
        if wait_first:  # (queued first: s2 holds until a write that meets it)
            s2.wait_value(word, lambda w: w >= 2, "word >= 2")
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.write_value(word, 1)               # (meets nothing)
        s1.write_value(word, 2)
        if not wait_first:
            s2.wait_value(word, lambda w: w >= 2, "word >= 2")
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.synchronize(TIMEOUT)
    assert found == []
    word.free()


def test_a_value_wait_the_host_releases_lets_its_held_stream_be_checked(dev, streams, bufs):
    # No value write met the wait when it was queued, so the sanitizer held its stream; the
    # host wrote the word itself and the engine let the wait go, but the stream stayed held for
    # ever: its later tasks went unchecked (a real race missed) and piled up.
    s1, s2 = streams
    buf, out, _ = bufs
    word = art.malloc(8)
    art.memset(word, 0)
    with art.sanitize("log") as found:
        s2.wait_value(word, lambda w: w >= 1, "word >= 1")
        art.memcpy(word, np.ones(1, np.uint64), 8)                       # the host lets it go
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.launch(producer, buf.view(), stream=s1, writes=[buf])        # unordered with s2
        art.synchronize(TIMEOUT)
        assert not art.sanitizer.enabled() or not Hooks.sanitizer.held
    assert [{r.first.name, r.second.name} for r in found] == [{"consumer", "producer"}]
    word.free()


def test_a_value_write_replayed_from_a_graph_orders_the_wait_it_meets(dev, streams, bufs):
    # (the replayed write was no value write to the sanitizer: a false race between the graph's
    # producer and the consumer behind the wait)
    s1, s2 = streams
    buf, out, _ = bufs
    word = art.malloc(8)
    art.memset(word, 0)
    with art.sanitize("log") as found:
        s1.begin_capture()
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.write_value(word, 5)
        graph = s1.end_capture()
        s2.wait_value(word, lambda w: w == 5, "word == 5")
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        graph.launch(s1)
        art.synchronize(TIMEOUT)
    assert found == []
    graph.destroy()
    word.free()


def test_a_value_wait_the_word_meets_already_orders_nothing(dev, streams, bufs):
    # The word as it was met the wait, before any write: the later write and what came before
    # it are not ordered before the consumer (a race, reported).
    s1, s2 = streams
    buf, out, _ = bufs
    word = art.malloc(8)
    art.memset(word, 0)
    with art.sanitize("log") as found:
        s2.wait_value(word, lambda w: w == 0, "word == 0")
        art.launch(producer, buf.view(), stream=s1, writes=[buf])
        s1.write_value(word, 5)
        art.launch(consumer, out.view(), buf.view(), stream=s2, reads=[buf], writes=[out])
        art.synchronize(TIMEOUT)
    assert [(r.first.name, r.second.name) for r in found] == [("producer", "consumer")]
    word.free()



@pytest.mark.parametrize("how", ["blocking", "non-blocking", "callback"])
def test_an_access_inside_a_host_function_is_located_at_its_launch(streams, bufs, how):
    # (the report and its fix named the line inside the function, "record an event on stream 3
    # after `hf` (prog.py:6)": no event can be recorded there; it goes after the launch)
    from ascentrt import callback
    s1, s2 = streams
    buf, _, _ = bufs
    host = art.malloc_host(N)
    thread = None
    gate, done = threading.Event(), threading.Event()
    lines: list[int] = []

    def hf(_):  # (no buffer argument: a report of the launch's own accesses would come first)
        art.memset(host, 7, N); inside = here()  # noqa: E702  (the write's line)
        lines.append(inside)

    with art.sanitize("log") as found:
        if how == "callback":
            def reporter():
                gate.wait(TIMEOUT)
                callback.process_reports(TIMEOUT)
                done.set()
            thread = threading.Thread(target=reporter)
            thread.start()
            callback.subscribe(thread.ident, s1)
            callback.launch_callback(hf, None, s1, blocking=False); launched = here()  # noqa: E702
        else:
            art.launch_host_func(hf, None, stream=s1, blocking=how == "blocking"); launched = here()  # noqa: E702
        art.memcpy_async(buf, host, stream=s2); used = here()  # noqa: E702  (reads what hf writes)
        gate.set()
        if thread is not None:
            assert done.wait(TIMEOUT)
        art.synchronize(TIMEOUT)
    if thread is not None:
        thread.join(TIMEOUT)
        callback.unsubscribe(thread.ident, s1)
    host.free()
    assert len(found) == 1, [str(r) for r in found]
    race = found[0]
    fn = race.first if race.first.name == "hf" else race.second
    name = os.path.basename(__file__)
    assert fn.site == f"{name}:{launched}" and fn.inside == f"{name}:{lines[0]}", str(race)
    assert f"{name}:{lines[0]}" not in race.fix and f"`hf` ({name}:{launched})" in race.fix, race.fix
    assert f"{name}:{used}" in race.fix
    assert f"write in it at {name}:{lines[0]}" in str(race)
