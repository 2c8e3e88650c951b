"""The profiler's clock: the one the devices' task timestamps use (virtual time on sim)."""

from __future__ import annotations

from time import perf_counter_ns

from .. import config
from ..backends.sim import TIMELINE

now_ns = perf_counter_ns  # rebound by choose() when a profile starts


def _virtual_ns() -> int:
    # Inside a task the simulation runs (a host function, or a blocking callback's report
    # thread acting for one), the time its own device reads there: the task's start as its
    # profile records it (dispatched and released) plus what its operations took so far, the
    # time what it submits is stamped with. (The timeline's event time read 1 us before a host
    # function's start, and its launches lost their launch -> task arrows.)
    tl = TIMELINE
    frames = tl.local.frames
    frame = frames[-1] if frames else tl.acting_frame() if tl.inflight else None
    if frame is None:
        return tl.now
    dq = getattr(getattr(frame.task, "stream", None), "_dq", None)
    return tl.now + frame.offset if dq is None else dq.backend.now_ns()


def choose() -> None:
    """Use the simulated timeline's clock when devices are simulated, else perf_counter_ns."""
    global now_ns
    now_ns = _virtual_ns if config.get("ASCENTRT_BACKEND") == "sim" else perf_counter_ns
