"""What a profile adds to each task stays cheap: the fields the engine stamps a profiled task
with live in the task's own compact field array (no dict per task), and the cpu device's clock
is read without a Python call (the engine reads it three times per profiled task)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

import ascentrt as art

PROGRAM = textwrap.dedent('''
    import gc
    import ascentrt as art
    from ascentrt.kernels import noop
    from ascentrt.profiler.recorder import Recorder

    stream = art.set_device(0).create_stream()
    for _ in range(200):  # the class's first tasks, made before any profile ran
        art.launch(noop, stream=stream)
    stream.synchronize(30)
    with_dict = []
    seen = Recorder.tasks_done
    def tasks_done(self, s, tasks):
        with_dict.extend(any(type(r) is dict for r in gc.get_referents(t)) for t in tasks)
        return seen(self, s, tasks)
    Recorder.tasks_done = tasks_done
    with art.profile():
        for _ in range(200):
            art.launch(noop, stream=stream)
        stream.synchronize(30)
    print(len(with_dict), sum(with_dict))
''')


@pytest.mark.skipif(not (3, 11) <= sys.version_info[:2] < (3, 13),
                    reason="how CPython 3.11 and 3.12 lay out instance attributes")
def test_a_profiled_task_keeps_its_timestamps_without_a_dict_of_its_own():
    # (a fresh process: which fields share the compact layout is settled by the first tasks)
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "ASCENTRT_BACKEND": "cpu"})
    assert proc.returncode == 0, proc.stderr
    seen, with_dict = map(int, proc.stdout.split())
    assert seen == 200 and with_dict == 0


def test_the_cpu_device_clock_is_perf_counter_ns_itself():
    backend = art.Device(0)._backend
    assert backend.properties().backend == "cpu"
    assert backend.now_ns is time.perf_counter_ns
