"""The profiler: record what the runtime did, export traces / CSV / HTML, diagnose problems.

    with ascentrt.profile("out") as prof:
        ...                      # everything the runtime does is recorded
    for finding in prof.diagnose():
        print(finding)

`ASCENTRT_PROFILE=dir python prog.py` (or `ascentrt prof -- python prog.py`) profiles a whole
program. `load(dir)` reads a run back as a Profile.
"""

from .analysis import diagnose
from .finding import Finding
from .metrics import metrics
from .data import (Allocation, ApiCall, DeviceInfo, MarkRecord, MemorySample, RangeRecord,
                   StreamInfo, TaskRecord)
from .profile import Profile
from .profile import read as load
from .ranges import mark, range
from .session import Session, profile, start, stop

__all__ = ["Allocation", "ApiCall", "DeviceInfo", "Finding", "MarkRecord", "MemorySample",
           "Profile", "RangeRecord", "Session", "StreamInfo", "TaskRecord", "diagnose", "load",
           "mark", "metrics", "profile", "range", "start", "stop"]
