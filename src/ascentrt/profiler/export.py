"""Writing one profiling run's folder: trace, CSVs, HTML report, profile.json, summary."""

from __future__ import annotations

import json
import os

from .analysis import diagnose
from .csvexport import write_csvs
from .data import DATA_FILE, ProfileData
from .report import render_html
from .summary import summary_text
from .trace import trace_json

TRACE_FILE = "trace.json"
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.txt"


def write_folder(profile: ProfileData, path) -> str:
    """Write every output of `profile` into folder `path` (created if missing); returns it."""
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    _write_json(os.path.join(path, DATA_FILE), profile.to_json())
    _write_json(os.path.join(path, TRACE_FILE), trace_json(profile))
    write_csvs(profile, path)
    findings = diagnose(profile)
    with open(os.path.join(path, REPORT_FILE), "w", encoding="utf-8") as fh:
        fh.write(render_html(profile, findings))
    with open(os.path.join(path, SUMMARY_FILE), "w", encoding="utf-8") as fh:
        fh.write(summary_text(profile, findings) + "\n")
    return path


def _write_json(path: str, data) -> None:
    tmp = path + ".tmp"
    text = json.dumps(data, separators=(",", ":"))  # dumps uses the C encoder; dump does not
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
