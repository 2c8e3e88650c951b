"""The terminal summary of a profile: a few tables and the diagnosis, plain text or rich."""

from __future__ import annotations

from collections import defaultdict

from ..units import format_bytes
from .analysis import diagnose
from .metrics import metrics
from .data import (MISSING_STATES, PART_DIR, WORK_KINDS, ProfileData, calls_made, calls_made_count,
                   own_clock, top_sites)


def _ms(ns) -> str:
    return f"{ns / 1e6:.2f}"


def sections(profile: ProfileData, findings=None) -> list[tuple[str, list[str], list[list[str]]]]:
    """The summary as (title, headers, rows) tables."""
    m = metrics(profile)
    out = []
    if profile.parts or profile.missing:
        out.append(_processes(profile))
    rows = [[f"{d}", str(v["tasks"]), _ms(v["window_ns"]), _ms(v["busy_ns"]),
             f"{v['utilization']:.0%}"] for d, v in m["devices"].items()]
    out.append(("Devices", ["device", "tasks", "window ms", "busy ms", "utilization"], rows))
    rows = [[f"{v['device']}", f"{v['stream']}", str(v["tasks"]), _ms(v["busy_ns"]),
             f"{v['utilization']:.0%}"] for v in m["streams"].values()]
    out.append(("Streams", ["device", "stream", "tasks", "busy ms", "utilization"], rows))
    rows = [[f"{v['device']}", v["executor"], str(v["units"]), _ms(v["busy_ns"]),
             f"{v['utilization']:.0%}"] for v in m["executors"].values() if v["busy_ns"]]
    # (a kernel on all of 24 AI cores for 0.04 ms is 0.96 unit-ms: read beside the window, a
    # plain "busy ms" made compute look like the bottleneck)
    out.append(("Executors (busy: each unit's busy time, summed; utilization: busy / (units x "
                "window))", ["device", "executor", "units", "busy unit-ms", "utilization"], rows))
    kernels = defaultdict(list)
    for t in profile.tasks:  # (runs that completed: a task cut off or dropped has no duration)
        if t.kind in WORK_KINDS and not t.fate:
            kernels[(t.kind, t.name)].append(t.duration_ns)
    top = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:8]
    rows = [[name, kind, str(len(d)), _ms(sum(d)), f"{sum(d) / len(d) / 1e3:.1f}"]
            for (kind, name), d in top]
    out.append(("Top tasks", ["name", "kind", "count", "total ms", "avg us"], rows))
    top_api = sorted(m["api"].items(), key=lambda kv: -kv[1]["total_ns"])[:8]
    made = defaultdict(list)
    for c, _ in calls_made(profile.api_calls, waits=True):
        made[c.name].append(c)
    rows = [[name, str(v["count"]), _ms(v["total_ns"]), f"{v['mean_ns'] / 1e3:.1f}",
             top_sites(made[name], 2)] for name, v in top_api]
    out.append(("Host API", ["api", "calls", "total ms", "avg us", "call sites"], rows))
    queued, disp = m["queued_ns"], m["dispatch_latency_ns"]
    rows = [[label, str(v["count"]), f"{v['p50'] / 1e3:.1f}", f"{v['p90'] / 1e3:.1f}",
             f"{v['p99'] / 1e3:.1f}", f"{v['max'] / 1e3:.1f}"]
            for label, v in (("queued in stream (enqueue -> start)", queued),
                             ("dispatch latency (idle stream)", disp))
            if v["count"]]
    out.append(("Device tasks: queueing and dispatch (us)" + _switch_note(profile, disp),
                ["", "count", "p50", "p90", "p99", "max"], rows))
    rows = [[name, str(v["count"]), format_bytes(v["bytes"]), f"{v['gb_per_s']:.2f}",
             str(v["synchronous"])] for name, v in m["copy_bandwidth"].items()]
    out.append(("Copies (device copy tasks, and synchronous memcpy calls: their time is the "
                "call's)", ["direction", "count", "bytes", "GB/s", "of them synchronous"], rows))
    rows = [["host (pinned)" if d < 0 else str(d), format_bytes(v["peak_allocated"]),
             format_bytes(v["peak_reserved"]),
             format_bytes(v["capacity"]) if v.get("capacity") else "-"]
            for d, v in sorted(m["memory"].items())]
    out.append(("Memory peak", ["device", "allocated", "reserved", "capacity"], rows))
    return [s for s in out if s[2]]


def _processes(profile: ProfileData) -> tuple[str, list[str], list[list[str]]]:
    """The Processes table: each process of the run with its part, and those whose part is
    missing (lost, or still running), with what is known of them."""
    virtual = [p for p in [profile, *profile.parts] if own_clock(p)]
    rows = [[str(p.pid), "own clock" if p in virtual else "-" if virtual else
             _ms(p.origin_ns - profile.origin_ns), _ms(p.duration_ns), str(len(p.tasks)),
             str(calls_made_count(p.api_calls)), " ".join(p.command)]
            for p in [profile, *profile.parts]]
    rows += [[str(m.pid), "-", "-", "-", "-", f"(no part, {MISSING_STATES[m.state]}) "
              + (" ".join(m.command).replace("\n", "; ") or "(command not known)")]
             for m in profile.missing]
    title = (f"Processes (one timeline in trace.json; the tables below are pid "
             f"{profile.pid}'s, each child's own are in {PART_DIR.format(pid='<pid>')}/")
    if virtual:  # (each simulated process has a virtual clock of its own)
        title += ("; on sim each process runs its own virtual timeline from its own start: "
                  "times do not order events across processes")
    return (title + ")", ["pid", "start ms", "duration ms", "tasks", "API calls", "command"], rows)


def _switch_note(profile: ProfileData, disp: dict) -> str:
    """On the cpu backend a woken executor thread waits for the GIL, which the interpreter
    hands over only every switch interval: say so where the dispatch latency shows it."""
    import sys
    interval_ns = sys.getswitchinterval() * 1e9
    if any(d.backend != "cpu" for d in profile.devices) or disp["p99"] < interval_ns / 2:
        return ""
    return (f"; dispatch p99 is near the interpreter's switch interval "
            f"({interval_ns / 1e6:.1f} ms, sys.setswitchinterval): a woken executor waited for "
            f"the GIL while the host thread ran Python, not for the runtime")


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def headline(profile: ProfileData) -> str:
    """One line: duration, tasks, API calls, devices, and what produced the timings."""
    work = sum(t.kind in WORK_KINDS for t in profile.tasks)
    return (f"profile: {profile.duration_ns / 1e6:.1f} ms, {len(profile.tasks)} tasks "
            f"({work} kernels/copies/memsets/host functions), {calls_made_count(profile.api_calls)} API calls, "
            f"{len(profile.devices)} device(s); {timing_source(profile)}")


def timing_source(profile: ProfileData) -> str:
    """'cpu backend (real time)', 'sim backend, preset P (virtual time)', or 'no device was
    set up' (none to name: a program whose device was refused got no backend)."""
    kinds = sorted({(d.backend, d.preset, d.preset_source) for d in profile.devices})
    parts = [f"sim backend, preset {p}{f' ({src})' if src else ''} (virtual time)" if b == "sim"
             else f"{b} backend (real time)" for b, p, src in kinds] or ["no device was set up"]
    uncosted = sorted({name for d in profile.devices for name in d.uncosted})
    if uncosted:
        parts.append(f"kernels with no declared cost (the preset's default duration): "
                     f"{', '.join(uncosted[:5])}{' ...' if len(uncosted) > 5 else ''}")
    return ", ".join(parts)


def races_text(profile: ProfileData) -> str:
    """The races the sanitizer found while profiling (it was on too), one line each with the
    tasks and program lines involved, as report.html lists them; "" when there are none."""
    found = [(p, r) for p in [profile, *profile.parts] for r in p.races]
    if not found:
        return ""
    times = sum(r.count for _, r in found)
    lines = [f"Races found by the sanitizer: {len(found)} ({times} time(s)): correctness "
             f"problems, each a pair of tasks with no ordering between them"]
    for i, (p, r) in enumerate(found, 1):
        where = f"(pid {p.pid}) " if profile.parts else ""
        lines.append(f"{i}. {where}{r.text}")
    return "\n".join(lines)


def findings_text(findings, scope: str = "", races: int = 0) -> str:
    """The diagnosis as text ('no problems found' when empty); `scope` says what it covers
    when that is not the whole profile (scope.Scope.label()); `races`: how many races the
    summary lists beside it (then "no problems" says it is about performance only)."""
    title = f"Diagnosis of {scope} (the tables above cover the whole run)" if scope else "Diagnosis"
    if not findings and races:
        return (f"{title}: no performance problems found (the {races} race(s) listed above are "
                f"correctness problems, not performance findings).")
    if not findings:
        return f"{title}: no problems found."
    parts = [f"{title}: {len(findings)} finding(s)"]
    for i, f in enumerate(findings, 1):
        parts.append(f"{i}. {f}")
    return "\n".join(parts)


def summary_text(profile: ProfileData, findings=None, tables=None, scope: str = "") -> str:
    """The whole summary as plain text (`tables`: sections(profile, findings), if made already;
    `scope`: what the findings cover, see findings_text)."""
    if findings is None:
        findings = diagnose(profile)
    parts = [headline(profile)]
    for title, headers, rows in tables if tables is not None else sections(profile, findings):
        parts.append(f"\n{title}\n{format_table(headers, rows)}")
    races = races_text(profile)
    if races:
        parts.append("\n" + races)
    parts.append("\n" + findings_text(findings, scope, _race_count(profile)))
    return "\n".join(parts)


def print_summary(profile: ProfileData, findings=None, file=None, scope: str = "") -> None:
    """Print the summary: with rich tables when rich is installed and the output is a terminal
    (`scope`: what the findings cover, see findings_text)."""
    import sys
    file = file or sys.stdout
    if findings is None:
        findings = diagnose(profile)
    try:
        if not file.isatty():
            raise ImportError
        from rich.console import Console
        from rich.table import Table
    except (ImportError, AttributeError, ValueError):
        print(summary_text(profile, findings, scope=scope), file=file)
        return
    races = races_text(profile)
    # (every string is the runtime's or the program's own text: no rich markup, no
    # highlighting, which split "device(s)" into four colours and fails on a "[/x]" in a name)
    console = Console(file=file, markup=False, highlight=False)
    console.print(headline(profile))
    for title, headers, rows in sections(profile, findings):
        table = Table(title=title, title_justify="left")
        for h in headers:
            table.add_column(h)
        for r in rows:
            table.add_row(*[str(x) for x in r])
        console.print(table)
    if races:
        console.print(races)
    console.print(findings_text(findings, scope, _race_count(profile)))


def _race_count(profile: ProfileData) -> int:
    """How many races the profile (with its parts) recorded."""
    return sum(len(p.races) for p in [profile, *profile.parts])
