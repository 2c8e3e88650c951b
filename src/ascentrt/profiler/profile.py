"""A profiling run as one object: its records (data.ProfileData) with the analysis and writers."""

from __future__ import annotations

import json
import os

from ..errors import AscentError, ErrorCode, InvalidArgumentError
from ..validate import check_path, read_small_file
from .data import DATA_FILE, ProfileData, part_path

# (the analysis and the writers are imported by the methods that use them: the profiler's
# package imports this module, and most processes that import ascentrt never read a profile)

MOST_BYTES = 1 << 31  # a profile.json larger is none ascentrt wrote (millions of tasks take less)


class Profile(ProfileData):
    """Everything one profiling run recorded; `diagnose()` names what slowed it down."""

    def diagnose(self, range: str | None = None) -> list:
        """The findings of the analysis (see ascentrt.profiler.analysis), most costly first;
        with `range`, of what happened inside the user ranges of that name only (raises
        InvalidArgumentError naming the known ranges when there is none)."""
        from .analysis import diagnose
        from .scope import within
        return diagnose(self) if range is None else within(self, range).diagnose()

    def metrics(self) -> dict:
        """Utilization, latency, API time and bandwidth figures (see profiler.metrics)."""
        from .metrics import metrics
        return metrics(self)

    def save(self, path: str | os.PathLike) -> str:
        """Write every output (trace, CSVs, HTML report, profile.json) into folder `path`;
        raises InvalidArgumentError (100003) when it is not a path or cannot be written."""
        from .export import write_folder
        return write_folder(self, path)


def read(path: str | os.PathLike) -> Profile:
    """Load a profile folder (or its profile.json) written by a profiling run, with the parts
    of its child processes (a part whose folder is gone is left out)."""
    path = check_path(path, "the profile folder")  # (an int would be read as a descriptor)
    file = os.path.join(path, DATA_FILE) if os.path.isdir(path) else path
    try:
        # (a regular file of a bounded size: a FIFO would hang the reader, /dev/zero fill memory)
        text = read_small_file(file, "the profile", MOST_BYTES)
    except FileNotFoundError:
        raise InvalidArgumentError(f"no profile at {path!r} (expected a folder with {DATA_FILE})",
                                   code=ErrorCode.INVALID_FILE) from None
    try:
        data = json.loads(text)
        prof = Profile.from_json(data)  # (checks every field: see data._COLUMNS)
    except (ValueError, KeyError, TypeError) as exc:  # (JSON's too)
        cause = exc.message if isinstance(exc, AscentError) else exc
        raise InvalidArgumentError(f"{file!r} is not a readable ascentrt profile: {cause}",
                                   code=ErrorCode.INVALID_FILE) from None
    folder = os.path.dirname(file)
    prof.parts = [read(part) for part in (part_path(folder, pid) for pid in data.get("parts", []))
                  if os.path.exists(os.path.join(part, DATA_FILE))]
    return prof
