"""Shared fixtures: a fresh stream per test, and a device left clean afterwards.

`pytest --backend sim` runs the same tests on the simulated NPU (make test does, for the
semantics files). Tests marked `cpu_only` need a device whose kernels run in real time
(a kernel blocking on a host gate, wall-clock durations, executor threads): they are skipped
there, with that reason. Tests marked `serial` (wall-clock figures that another test running
beside them would skew) run alone: `make test` runs the rest on three processes (pytest-xdist,
`-m "not serial"`), cpu_only ones among them, then these (`-m serial`). A cpu_only test is
serial only where it says so: most wait on gates, events and timeouts that only end later
under load, and run beside the others as well as alone.
"""

import os
import sys

import pytest

# The suite starts about a thousand interpreters and several pytest processes, so per-process
# costs add up:
# - OpenBLAS starts a thread per core when numpy loads (~25 ms of CPU per interpreter here);
#   no test needs a multithreaded BLAS (the runtime's streams are the parallelism under test).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # (before numpy: this process and its children)
# - pytest rewrites every test module's asserts on import, ~4 s of CPU per process collecting
#   the suite; it keeps the rewritten modules in tests/__pycache__ (ignored by git) unless
#   bytecode writing is off, as PYTHONDONTWRITEBYTECODE makes it. The pytest processes write
#   it still (as `make bytecode` does for the package); the programs the tests start do not.
sys.dont_write_bytecode = False


def pytest_addoption(parser):
    parser.addoption("--backend", default=None, choices=("cpu", "sim"),
                     help="run the tests on this backend (sets ASCENTRT_BACKEND)")


def pytest_configure(config):
    config.addinivalue_line("markers", "cpu_only: needs the cpu backend (kernels that block on host gates, wall-clock durations, executor threads)")
    config.addinivalue_line("markers", "serial: runs alone, after the tests run in parallel (a wall-clock figure)")
    config.addinivalue_line("markers", "long: takes seconds of CPU (whole programs, a test run, a build): started first")
    backend = config.getoption("--backend")
    if backend:
        os.environ["ASCENTRT_BACKEND"] = backend  # before any device exists


def pytest_collection_modifyitems(config, items):
    # The long tests first (a stable sort: the rest keep their order): pytest-xdist hands out
    # tests in this order, and one started last would leave the other worker idle meanwhile.
    # The cpu_only ones last: each worker runs its share in this order, so what one of them
    # leaves behind in its process (a buffer it never frees, say) meets no test but the
    # cpu_only ones after it, as when they all ran in one process after the rest.
    items.sort(key=lambda item: ("cpu_only" in item.keywords, item.get_closest_marker("long") is None))
    if os.environ.get("ASCENTRT_BACKEND") != "sim":
        return
    skip = pytest.mark.skip(reason="cpu_only: kernels that block on host gates, wall-clock "
                                   "durations or executor threads; the sim backend models time")
    for item in items:
        if "cpu_only" in item.keywords:
            item.add_marker(skip)


import ascentrt as art  # noqa: E402  (after the backend is chosen)


@pytest.fixture
def dev():
    """Device 0, made current for the test's thread."""
    return art.set_device(0)


@pytest.fixture
def stream(dev):
    """A stream destroyed (with its pending work discarded) after the test."""
    s = dev.create_stream()
    yield s
    if s._refuse != "destroyed":
        s.destroy(force=True)


@pytest.fixture
def buf(dev):
    """A 256 KiB device buffer, freed after the test (files with a buffer of their own override it)."""
    b = art.malloc(1 << 18)
    yield b
    b.free()


@pytest.fixture
def streams(dev):
    """Two streams of device 0, drained and destroyed after the test (unless it did)."""
    made = [dev.create_stream() for _ in range(2)]
    yield made
    for s in made:
        if s._refuse != "destroyed":
            s.synchronize(20)
            s.destroy()


@pytest.fixture(autouse=True)
def _acl_left_uninitialized():
    """A test that acl.init'ed the facade and did not finalize it is finalized after it: the
    next test on the same worker (acl's own init tests) would otherwise meet 100002."""
    yield
    acl = sys.modules.get("ascentrt.acl")
    if acl is not None and acl._init_count[0] > 0:
        acl.finalize()
