"""Writing one profiling run's folder: trace, CSVs, HTML report, profile.json, summary."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

from ..errors import ErrorCode, InvalidArgumentError, os_cause
from ..validate import check_path
from .analysis import diagnose
from .csvexport import FILES as CSV_FILES, write_csvs
from .data import DATA_FILE, ProfileData
from .report import write_html
from .summary import sections, summary_text
from .trace import write_trace

TRACE_FILE = "trace.json"
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.txt"
# What a folder holds, in the order a reader wants them (said after `ascentrt prof`)
OUTPUT_FILES = (REPORT_FILE, SUMMARY_FILE, TRACE_FILE, *CSV_FILES, DATA_FILE)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off while a profile is made or written: that makes
    hundreds of thousands of short-lived containers and no cycles, and every collection the
    allocations set off would walk all the profile's records again (50k tasks: a quarter of
    the time of the write)."""
    enabled = gc.isenabled()
    try:
        gc.disable()  # (inside the try: an interrupt right here still puts it back)
        yield
    finally:
        if enabled:
            gc.enable()


def write_folder(profile: ProfileData, path) -> str:
    """Write every output of `profile` into folder `path` (created if missing); returns it.
    Raises InvalidArgumentError (100003) naming the folder and the cause when it cannot."""
    path = check_path(path, "the profile folder")  # (an int would be written as a descriptor)
    try:
        with collector_paused():
            _write_all(profile, path)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write the profile folder {path!r}: "
                                   f"{os_cause(exc)}", code=ErrorCode.INVALID_FILE) from None
    return path


def _write_all(profile: ProfileData, path: str) -> None:
    """Write the outputs of `profile` into folder `path`, profile.json first."""
    os.makedirs(path, exist_ok=True)
    _write_streamed(os.path.join(path, DATA_FILE), profile.write_json)
    _write_streamed(os.path.join(path, TRACE_FILE), lambda fh: write_trace(profile, fh))
    write_csvs(profile, path)
    findings = diagnose(profile)
    tables = sections(profile, findings)  # (once: the report and the summary show the same)
    _write_streamed(os.path.join(path, REPORT_FILE),
                    lambda fh: write_html(profile, fh, findings, tables))
    with open(os.path.join(path, SUMMARY_FILE), "w", encoding="utf-8") as fh:
        fh.write(summary_text(profile, findings, tables) + "\n")


def _write_streamed(path: str, write) -> None:
    """write(fh) into `path` through a temporary file (a reader never sees half a file); the
    writers encode a chunk of records at a time, so no output is held whole."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            write(fh)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # (open() itself may have failed)
            os.remove(tmp)  # (a failed write leaves nothing behind)
        raise
    os.replace(tmp, path)
