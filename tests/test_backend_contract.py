"""Every kernel run, copy, fill, timestamp, host wait and executor of the runtime goes through
the device's backend: a backend that records its calls sees all of them."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import ascentrt as art
from ascentrt.backends import KINDS, CpuBackend

PROGRAM = textwrap.dedent('''
    import collections, json, sys, threading
    import numpy as np
    from ascentrt.backends import KINDS, CpuBackend
    from ascentrt.backends.base import OP_NAMES

    calls = collections.Counter()
    waited = threading.Condition()

    class Recording(CpuBackend):
        """The cpu backend, counting each contract call (and each operation by kind)."""
        def alloc(self, nbytes, host=False):
            calls["alloc_host" if host else "alloc"] += 1
            return super().alloc(nbytes, host)
        def start_queue(self, name, serve):
            calls["start_queue"] += 1
            return super().start_queue(name, serve)
        def execute(self, op):
            calls[OP_NAMES[op.kind]] += 1
            if op.fn is not None:
                calls["fn:" + getattr(op.fn, "__name__", "?")] += 1
            return super().execute(op)
        def new_signal(self):
            calls["new_signal"] += 1
            return super().new_signal()
        def host_wait(self, signal, timeout_s):
            with waited:
                calls["host_wait"] += 1
                waited.notify_all()
            return super().host_wait(signal, timeout_s)
        def now_ns(self):
            calls["now_ns"] += 1
            return super().now_ns()

    def held_until_the_host_waits():
        """A host function that holds its stream until the host's next wait: the synchronize
        after it finds work still to wait for, however late the program gets there (on a
        loaded machine the stream had finished first, and no wait was needed)."""
        seen = calls["host_wait"]
        def hold():
            with waited:
                waited.wait_for(lambda: calls["host_wait"] > seen, timeout=10)
        return hold

    KINDS["recording"] = Recording
    import ascentrt as art

    dev = art.Device(0)
    assert dev.properties.backend == "cpu" and type(dev._backend) is Recording
    s = dev.create_stream()
    a, b = art.malloc(4096), art.malloc(4096)
    host = art.malloc_host(4096)
    host.numpy()[:] = 7
    art.memcpy_async(a, host, stream=s)                        # copy 1
    art.memset_async(b, 1, stream=s)                           # fill 1
    art.launch(art.kernels.add, b.view(np.uint8), a.view(np.uint8), b.view(np.uint8), stream=s)
    art.launch_host_func(held_until_the_host_waits(), stream=s)  # host 1
    s.synchronize(timeout=10)
    art.memcpy(host, b)                                        # copy 2 (synchronous)
    assert (host.numpy() == 8).all()
    art.memset(a, 0)                                           # fill 2 (synchronous)
    art.memcpy2d(host, 64, a, 64, 32, 8)                       # copy 3 (pitched, synchronous)
    s.begin_capture()
    art.launch(art.kernels.fill, a.view(np.uint8), 5, stream=s)
    graph = s.end_capture()
    art.launch_host_func(held_until_the_host_waits(), stream=s)  # host 2
    graph.launch(s)                                            # kernel 2 (a replayed node)
    ev = art.Event(timing=True)
    ev.record(s)
    ev.synchronize(timeout=10)
    assert (a.numpy() == 5).all()
    p = dev.properties
    calls["executors"] = p.compute_units + p.copy_engines + p.host_func_threads
    print(json.dumps(calls))
''')


def test_every_operation_wait_and_timestamp_goes_through_the_backend():
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "ASCENTRT_BACKEND": "recording"})
    assert proc.returncode == 0, proc.stderr
    calls = json.loads(proc.stdout.strip().splitlines()[-1])
    # The replayed graph runs as a segment that executes its node through the backend too.
    assert calls["fn:add"] == 1 and calls["fn:fill"] == 1 and calls["fn:_run_segment"] == 1
    assert calls["kernel"] == 3 and calls["copy"] == 3 and calls["fill"] == 2 and calls["host"] == 2
    assert calls["alloc"] == 1 and calls["alloc_host"] >= 1   # device memory; pinned host chunks
    assert calls["start_queue"] == calls["executors"]              # one per executor
    assert calls["new_signal"] >= 2 and calls["host_wait"] >= 2   # stream and event synchronize
    assert calls["now_ns"] >= 1                                   # the timing event's stamp


def test_an_unknown_backend_is_refused_by_name():
    with pytest.raises(art.InvalidArgumentError, match="unknown backend 'tpu'.*known: cpu"):
        art.config.SETTINGS["ASCENTRT_BACKEND"].parse("tpu")


def test_the_cpu_backend_says_what_it_is():
    props = CpuBackend("x", 1 << 20, (2, 1, 1)).properties()
    assert (props.backend, props.name, props.memory_bytes, props.executors) == ("cpu", "x", 1 << 20, (2, 1, 1))
    assert art.Device(0).properties.backend == "cpu" and KINDS["cpu"] is CpuBackend


def test_a_sim_backend_without_a_preset_is_refused_by_name():
    from ascentrt.backends import make_backend
    with pytest.raises(ValueError, match="preset"):
        make_backend("sim", "x", 0, (1, 1, 1))
