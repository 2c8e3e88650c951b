"""The HTML report: one self-contained file (no network) with the timeline, memory over time and
the allocations on one time axis, the summary tables and the diagnosis."""

from __future__ import annotations

import functools
import html
import io
import os
from typing import TextIO

from .data import ProfileData
from .analysis import diagnose
from .summary import headline, sections
from .views import program_name, write_view_data

def _table_html(title: str, headers, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(x))}</td>" for x in r) + "</tr>"
                   for r in rows)
    return (f"<section class='table'><h3>{html.escape(title)}</h3><table><thead><tr>{head}</tr>"
            f"</thead><tbody>{body}</tbody></table></section>")


def _findings_html(findings) -> str:
    if not findings:
        return "<p class='ok'>No problems found.</p>"
    parts = []
    for f in findings:
        ev = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>"
                     for k, v in f.evidence.items())
        tasks = (f"<p class='tasks'>tasks (device/stream/task): "
                 f"{html.escape(', '.join(f.task_ids[:12]))}</p>" if f.task_ids else "")
        parts.append(f"<div class='finding' data-kind='{html.escape(f.kind)}'>"
                     f"<h3>{html.escape(f.title)}</h3><p><b>Cause.</b> {html.escape(f.cause)}</p>"
                     f"<ul>{ev}</ul>{tasks}<p><b>Try.</b> {html.escape(f.advice)}</p></div>")
    return "".join(parts)


def _races_html(profile: ProfileData) -> str:
    if not profile.races:
        return ""
    items = "".join(f"<li>{html.escape(r.text)}</li>" for r in profile.races)
    return f"<h2>Races ({len(profile.races)})</h2><ul class='races'>{items}</ul>"


def render_html(profile: ProfileData, findings=None, tables=None) -> str:
    """The report as one HTML document (inline CSS and JavaScript, data embedded as JSON);
    `tables`: sections(profile, findings), if made already."""
    out = io.StringIO()
    write_html(profile, out, findings, tables)
    return out.getvalue()


def write_html(profile: ProfileData, fh: TextIO, findings=None, tables=None) -> None:
    """Write render_html(profile, findings, tables) to the open text file `fh`, its data a
    piece at a time (the page is never held whole)."""
    if findings is None:
        findings = diagnose(profile)
    tables = "".join(_table_html(*s) for s in (tables if tables is not None else sections(profile, findings)))
    program = program_name(profile.command)
    title = f"{program} \u2014 ascentrt profile" if program else "ascentrt profile"
    command = f"{' '.join(map(str, profile.command))}; " if profile.command else ""
    fields = dict(title=html.escape(title), command=html.escape(command),
                  headline=html.escape(headline(profile)), started=html.escape(profile.started_at),
                  findings=_findings_html(findings), count=len(findings),
                  races=_races_html(profile), tables=tables, css=_asset("report.css"),
                  js=_asset("report.js"))
    before, after = _TEMPLATE.split("{data}")
    fh.write(before.format(**fields))
    write_view_data(profile, fh)
    fh.write(after.format(**fields))


@functools.cache
def _asset(name: str) -> str:
    """The text of a file shipped beside this module (the report's CSS and script)."""
    with open(os.path.join(os.path.dirname(__file__), name), encoding="utf-8") as fh:
        return fh.read()


_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title><style>{css}</style></head>
<body>
<div id="errors"></div>
<script>window.addEventListener('error',function(e){{document.getElementById('errors').textContent+='script error: '+e.message+'\\n';}});</script>
<h1>{title}</h1>
<p class="muted">{command}{headline}; started {started} UTC</p>
{races}<h2>Diagnosis ({count})</h2>
{findings}
<h2>Timeline</h2>
<p class="muted">One time axis for the timeline, memory and allocations: wheel on any of them to
zoom all, drag to pan. <button id="reset-zoom">reset zoom</button></p>
<div class="legend" id="legend"></div>
<div id="views">
<svg id="timeline" xmlns="http://www.w3.org/2000/svg"></svg>
<h2>Memory over time</h2>
<svg id="memory" xmlns="http://www.w3.org/2000/svg"></svg>
<h2>Allocations</h2>
<p class="muted">Each buffer allocated while profiling, stacked in allocation order and coloured
by call site (the key lists the sites by bytes); grey: all allocated bytes. Hover a band for its
details, click it to mark the buffers of the same call site.</p>
<div id="allocations"></div>
</div>
<p id="alloc-detail"></p>
<h2>Summary</h2>
<div class="tables">{tables}</div>
<script type="application/json" id="profile-data">{data}</script>
<script>{js}</script>
</body></html>
"""
