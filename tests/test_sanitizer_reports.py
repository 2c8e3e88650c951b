"""The race sanitizer's reports: one per refused launch in raise mode, and what a report's fix
orders (the program's own streams)."""

import inspect
import os

import numpy as np
import pytest

import ascentrt as art
from ascentrt import sanitizer

TIMEOUT = 20
K = art.kernels


@pytest.fixture
def streams(dev):
    made = [dev.create_stream() for _ in range(2)]
    yield made
    for s in made:
        s.synchronize(TIMEOUT)
        s.destroy()


def test_two_refused_launches_on_one_stream_are_two_reports_each_naming_its_own_line(dev, streams):
    # (the refused launch never took its task id, the next one on its stream got the same, and
    # its race was counted into the first's report: the error for the second named the first)
    s1, s2 = streams
    buf, out, host = art.malloc(1 << 16), art.malloc(1 << 16), art.malloc_host(1 << 12)
    here = os.path.basename(__file__)
    errors = []
    with art.sanitize("raise"):
        art.launch(K.fill, buf.view(np.float32), 1.0, stream=s1)
        for how in ("kernel", "copy"):
            try:
                if how == "kernel":
                    art.launch(K.copy, out.view(np.float32), buf.view(np.float32), stream=s2)
                else:
                    art.memcpy2d_async(buf, 256, host, 256, 64, 4, stream=s2)
            except sanitizer.RaceError as exc:
                errors.append((exc, inspect.trace()[0].lineno))
        art.synchronize(TIMEOUT)
        found = sanitizer.reports()
    assert len(errors) == 2
    for exc, line in errors:
        assert exc.race.second.site == f"{here}:{line}" and exc.race.count == 1, str(exc)
    assert [r.second.task_kind for r in found] == ["kernel", "copy"], [str(r) for r in found]
    for b in (buf, out, host):
        b.free()


def test_query_event_wait_status_complete_orders_the_host_after_the_waited_work(dev):
    # (acl.rt.query_event_wait_status found every wait on the event passed, so the work the
    # event recorded done, but the host was not ordered after it: a correct program raced)
    import time

    import ascentrt.acl as acl
    from ascentrt.acl import constants as C
    acl.init()
    acl.rt.set_device(0)
    a, b, c = (acl.rt.create_stream()[0] for _ in range(3))
    n = 1 << 14
    p, o = acl.rt.malloc(n, 0)[0], acl.rt.malloc(n, 0)[0]
    e = acl.rt.create_event_with_flag(C.ACL_EVENT_SYNC)[0]
    with art.sanitize("log") as found:
        acl.rt.launch_kernel(K.fill, ((p, np.float32, (n // 4,)), 1.0), a)
        acl.rt.record_event(e, a)
        acl.rt.stream_wait_event(c, e)
        deadline = time.monotonic() + TIMEOUT
        while acl.rt.query_event_wait_status(e)[0] != C.ACL_EVENT_WAIT_STATUS_COMPLETE:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        acl.rt.launch_kernel(K.copy, ((o, np.float32, (n // 4,)), (p, np.float32, (n // 4,))), b)
        acl.rt.synchronize_device()
    assert found == [], [str(r) for r in found]
    acl.rt.destroy_event(e)
    for s in (a, b, c):
        acl.rt.destroy_stream(s)
    for x in (p, o):
        acl.rt.free(x)
