"""Writing one profiling run's folder: trace, CSVs, HTML report, profile.json, summary."""

from __future__ import annotations

import os

from .analysis import diagnose
from .csvexport import write_csvs
from .data import DATA_FILE, ProfileData
from .report import write_html
from .summary import sections, summary_text
from .trace import write_trace

TRACE_FILE = "trace.json"
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.txt"


def write_folder(profile: ProfileData, path) -> str:
    """Write every output of `profile` into folder `path` (created if missing); returns it."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    _write_streamed(os.path.join(path, DATA_FILE), profile.write_json)
    _write_streamed(os.path.join(path, TRACE_FILE), lambda fh: write_trace(profile, fh))
    write_csvs(profile, path)
    findings = diagnose(profile)
    tables = sections(profile, findings)  # (once: the report and the summary show the same)
    _write_streamed(os.path.join(path, REPORT_FILE), lambda fh: write_html(profile, fh, findings, tables))
    with open(os.path.join(path, SUMMARY_FILE), "w", encoding="utf-8") as fh:
        fh.write(summary_text(profile, findings, tables) + "\n")
    return path


def _write_streamed(path: str, write) -> None:
    """write(fh) into `path` through a temporary file (a reader never sees half a file); the
    writers encode a chunk of records at a time, so no output is held whole."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            write(fh)
    except BaseException:
        os.remove(tmp)  # (a failed write leaves nothing behind)
        raise
    os.replace(tmp, path)
