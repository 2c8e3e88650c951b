"""The race sanitizer with accesses that arrive as they run (host functions, blocking
callbacks, a replayed graph's host nodes): one that comes after an access ordered after it is
no race, whatever the order in which the two reach the sanitizer; an unordered one still is."""

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import ascentrt as art

TIMEOUT = 20
N = 4096


@pytest.fixture
def streams(dev):
    made = [dev.create_stream() for _ in range(3)]
    yield made
    for s in made:
        s.synchronize(TIMEOUT)
        s.destroy()


@pytest.fixture
def buf(dev):
    made = art.malloc(N)
    yield made
    art.synchronize(TIMEOUT)
    made.free()


def reader(b):
    float(b.sum())


def writer(b):
    b[:] = 2


def gated_fill(gate: threading.Event, done: threading.Event | None = None):
    """A host function that writes its buffer (a synchronous copy) once `gate` is set: its write
    reaches the sanitizer after whatever the test queues meanwhile."""
    src = np.ones(N, np.uint8)

    def fill(b):
        gate.wait(TIMEOUT)
        art.memcpy(b, src)
        if done is not None:
            done.set()
    return fill


@pytest.mark.parametrize("mode", ["log", "raise"])
def test_a_host_function_s_write_reaching_it_after_an_ordered_reader_is_no_race(streams, buf, mode):
    # (the reader's access was kept first; the write, checked only for whether the reader was
    # ordered before it, was reported, and in raise mode failed the host function)
    s1, s2, _ = streams
    gate = threading.Event()
    with art.sanitize(mode) as found:
        art.launch_host_func(gated_fill(gate), buf, stream=s1)
        s2.wait(s1.record())
        art.launch(reader, buf.view(), stream=s2, reads=[buf], name="consumer")
        gate.set()
        art.synchronize(TIMEOUT)
    assert found == [], [str(r) for r in found]
    assert buf.numpy()[0] == 1


def test_a_replayed_graph_s_host_function_write_reaching_it_late_is_no_race(dev, streams, buf):
    s1, s2, s3 = streams
    gate = threading.Event()
    cap = dev.create_stream()
    cap.begin_capture()
    art.launch_host_func(gated_fill(gate), buf, stream=cap)
    graph = cap.end_capture()
    cap.destroy()
    with art.sanitize("log") as found:
        graph.launch(s3)
        s2.wait(s3.record())
        art.launch(reader, buf.view(), stream=s2, reads=[buf], name="consumer")
        gate.set()
        art.synchronize(TIMEOUT)
    assert found == [], [str(r) for r in found]


def test_a_host_function_s_late_write_still_races_an_unordered_reader(streams, buf):
    s1, s2, _ = streams
    gate = threading.Event()
    with art.sanitize("log") as found:
        art.launch_host_func(gated_fill(gate), buf, stream=s1)
        art.launch(reader, buf.view(), stream=s2, reads=[buf], name="consumer")
        gate.set()
        art.synchronize(TIMEOUT)
    # (one race of the two tasks: the function's argument access and its late write inside)
    assert [{r.first.name, r.second.name} for r in found] == [{"consumer", "fill"}], [str(r) for r in found]


@pytest.mark.cpu_only
def test_a_late_write_keeps_its_stream_s_later_write_for_what_comes_after(streams, buf):
    # (the host function's write, arriving last, dropped its stream's later kernel's write as
    # covered by its own: a reader ordered after the function but not the kernel went unseen)
    s1, s2, _ = streams
    gate, done = threading.Event(), threading.Event()
    with art.sanitize("log") as found:
        art.launch_host_func(gated_fill(gate, done), buf, stream=s1)
        between = s1.record()
        art.launch(writer, buf.view(), stream=s1, writes=[buf], name="later_writer")
        gate.set()
        assert done.wait(TIMEOUT)  # (not a synchronization the sanitizer sees)
        s2.wait(between)
        art.launch(reader, buf.view(), stream=s2, reads=[buf], name="consumer")
        art.synchronize(TIMEOUT)
    assert [(r.first.name, r.second.name) for r in found] == [("later_writer", "consumer")], \
        [str(r) for r in found]


@pytest.mark.cpu_only
def test_a_blocking_callback_s_write_reaching_it_after_an_ordered_reader_is_no_race(streams, buf):
    from ascentrt import callback
    s1, s2, _ = streams
    gate, done = threading.Event(), threading.Event()
    src = np.ones(N, np.uint8)

    def reporter():
        gate.wait(TIMEOUT)
        callback.process_reports(TIMEOUT)
        done.set()

    def cb(_):
        art.memcpy(buf, src)

    thread = threading.Thread(target=reporter)
    thread.start()
    callback.subscribe(thread.ident, s1)
    with art.sanitize("log") as found:
        callback.launch_callback(cb, None, s1, blocking=True)
        s2.wait(s1.record())
        art.launch(reader, buf.view(), stream=s2, reads=[buf], name="consumer")
        gate.set()
        assert done.wait(TIMEOUT)
        art.synchronize(TIMEOUT)
    thread.join(TIMEOUT)
    callback.unsubscribe(thread.ident, s1)
    assert found == [], [str(r) for r in found]


def test_one_non_blocking_host_function_racing_one_kernel_is_one_report(tmp_path):
    # (its argument access and what it touched inside made two reports on cpu, one on sim)
    prog = tmp_path / "hf.py"
    prog.write_text(textwrap.dedent("""
        import numpy as np, ascentrt as art
        dev = art.set_device(0); s = dev.create_stream(); b = art.malloc(4096)
        def touch(buf): buf.numpy(np.float32)[:] = 3.0
        art.launch_host_func(touch, b, stream=s, blocking=False)
        art.launch(art.kernels.fill, b.view(np.float32), 1.0, stream=s)
        dev.synchronize(); b.free()
    """))
    proc = subprocess.run([sys.executable, "-m", "ascentrt.cli", "sanitize", "--mode", "log", "--",
                           "python", str(prog)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 66 and "1 race(s) found" in proc.stderr, proc.stderr
