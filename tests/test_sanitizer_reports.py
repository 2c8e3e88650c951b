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
