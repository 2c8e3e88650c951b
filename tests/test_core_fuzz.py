"""Random ints, sizes and objects thrown at the core API: every refusal is an AscentError with
a code, nothing crashes, and the runtime still works afterwards (a bounded run in CI)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ascentrt as art

INTS = st.one_of(st.integers(-2**70, 2**70), st.sampled_from([0, 1, -1, 2**31, 2**63, 2**64]))
JUNK = st.one_of(INTS, st.none(), st.floats(allow_nan=True), st.text(max_size=3), st.binary(max_size=8),
                 st.booleans(), st.just(object()), st.just(np.zeros(4, np.uint8)))


def _pool(dev):
    """Live and freed buffers, a pinned buffer, a stream: the operands to mix with junk."""
    live, dead = art.malloc(256), art.malloc(256)
    dead.free()
    return [live, dead, live[16:48], live.view(np.float32), art.malloc_host(256)]


def _not_gigabytes(size):
    """`size`, but 64 MiB for a pinned size from 64 MiB to 1 TiB: pinning gigabytes that the
    host has succeeds, as it should, and only costs seconds (each page is touched); sizes past
    the host's memory are still asked for, and refused."""
    return 1 << 26 if type(size) is int and 1 << 26 < size < 1 << 40 else size


CALLS = [
    lambda a, b, c: art.malloc(a),
    lambda a, b, c: art.free(a),
    lambda a, b, c: art.memcpy(a, b, c),
    lambda a, b, c: art.memcpy(a, b, c, kind=3),
    lambda a, b, c: art.memset(a, b, c),
    lambda a, b, c: art.memcpy_async(a, b, c, stream=None),
    lambda a, b, c: art.memset_async(a, b, c),
    lambda a, b, c: art.memcpy2d(a, 16, b, 16, c, 2),
    lambda a, b, c: art.launch(art.kernels.fill, a, b),
    lambda a, b, c: art.launch(a, b, c),
    lambda a, b, c: art.malloc_host(_not_gigabytes(a)),
    lambda a, b, c: art.Event().record(a),
    lambda a, b, c: art.default_stream().wait(a),
    lambda a, b, c: art.default_stream().synchronize(a),
    lambda a, b, c: art.Device(a),
    lambda a, b, c: art.set_wait_timeout(a),
]


@pytest.mark.long
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_bad_input_is_refused_with_a_code_and_nothing_breaks(data):
    dev = art.set_device(0)
    operands = _pool(dev)
    arg = st.one_of(JUNK, st.sampled_from(operands))
    try:
        for _ in range(6):
            call = data.draw(st.sampled_from(CALLS))
            a, b, c = data.draw(arg), data.draw(arg), data.draw(arg)
            try:
                result = call(a, b, c)
            except art.AscentError as exc:
                assert int(exc.code) > 0, exc
                continue
            if isinstance(result, (art.DeviceBuffer, art.HostBuffer)):
                result.free()
        try:
            art.synchronize(timeout=10)
        except art.TaskError:
            pass  # a queued kernel that failed on its arguments: reported, as it should be
    finally:
        art.set_wait_timeout(None)
        for buf in operands:
            if getattr(buf, "alive", False) and hasattr(buf, "free"):
                buf.free()
    # Still a working runtime.
    x = art.malloc(64)
    art.memset(x, 7)
    assert (x.numpy() == 7).all()
    x.free()
