"""The profiler: record what the runtime did, export traces / CSV / HTML, diagnose problems.

    with ascentrt.profile("out") as prof:
        ...                      # everything the runtime does is recorded
    for finding in prof.diagnose():
        print(finding)

`ASCENTRT_PROFILE=dir python prog.py` (or `ascentrt prof -- python prog.py`) profiles a whole
program. `load(dir)` reads a run back as a Profile.
"""

from typing import TYPE_CHECKING

from .data import (Allocation, ApiCall, DeviceInfo, MarkRecord, MemorySample, RangeRecord,
                   StreamInfo, TaskRecord)
from .finding import Finding
# (each submodule that shares a name with a function here before the function: importing a
# submodule binds its name in the package, and the function must be the name that stays)
from .metrics import metrics
from .profile import Profile
from .profile import read as load
from .ranges import mark, range
from .session import Session, profile, start, stop

if TYPE_CHECKING:
    from .analysis import diagnose

# The analysis loads on first use: every process imports the package (its ranges and
# sessions), few of them analyse a profile.
_LAZY = {"diagnose": ("analysis", "diagnose")}


def __getattr__(name: str):
    """The names of _LAZY, imported on first use (and kept: later reads find them here)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f"{__name__}.{where[0]}"), where[1])
    globals()[name] = value
    return value


__all__ = ["Allocation", "ApiCall", "DeviceInfo", "Finding", "MarkRecord", "MemorySample",
           "Profile", "RangeRecord", "Session", "StreamInfo", "TaskRecord", "diagnose", "load",
           "mark", "metrics", "profile", "range", "start", "stop"]
