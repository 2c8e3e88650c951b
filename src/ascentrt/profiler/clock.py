"""The profiler's clock: the one the devices' task timestamps use (virtual time on sim)."""

from __future__ import annotations

from time import perf_counter_ns

from .. import config
from ..backends.sim import TIMELINE

now_ns = perf_counter_ns  # rebound by choose() when a profile starts


def _virtual_ns() -> int:
    # (as SimBackend.now_ns: inside a task the simulation runs, such as a host function, its
    # start plus what its operations took so far; a call there would read no time otherwise)
    frames = TIMELINE.local.frames
    return TIMELINE.now + frames[-1].offset if frames else TIMELINE.now


def choose() -> None:
    """Use the simulated timeline's clock when devices are simulated, else perf_counter_ns."""
    global now_ns
    now_ns = _virtual_ns if config.get("ASCENTRT_BACKEND") == "sim" else perf_counter_ns
