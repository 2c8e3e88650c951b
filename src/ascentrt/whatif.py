"""`ascentrt whatif`: run one program on the simulated NPU once per variant of the preset (and
of the program's own knobs) and compare total virtual time, utilization and critical path."""

from __future__ import annotations

import csv
import difflib
import html
import itertools
import json
import os
import subprocess

from . import config
from .backends import presets as preset_files
from .backends.presets import FIELDS, PROGRAM_PREFIX, Preset, PresetError, load, parse_value, shown
from .errors import ErrorCode, InvalidArgumentError, os_cause
from .profiler import load as load_profile
from .profiler.critical import critical_path, describe
from .profiler.export import SUMMARY_FILE
from .profiler.folders import claim
from .profiler.intervals import total, union
from .validate import check_path, program_command, program_env

CLASSES = {"compute": ("kernel", "memset"), "copy": ("copy",), "host": ("host_func",)}


def parse_vary(specs: list[str]) -> list[tuple[str, list]]:
    """[(field, [values])] from 'name=v1,v2' specs: preset fields (each value checked alone,
    type and bounds) or program.NAME knobs; InvalidArgumentError naming what is wrong."""
    out: list[tuple[str, list]] = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        if not sep or not name or not values.strip():
            raise InvalidArgumentError(f"--vary {spec!r}: expected name=v1,v2,...")
        if any(name == seen for seen, _ in out):  # (the later one silently won the table)
            raise InvalidArgumentError(f"--vary: {name} is varied twice: give its values in one "
                                       f"--vary {name}=v1,v2,...")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if name.startswith(PROGRAM_PREFIX):
            parsed = [_knob(v) for v in items]
        elif name in FIELDS:  # (the rules between fields wait for whole variants: check_variants)
            try:
                parsed = [parse_value(name, v, "--vary") for v in items]
            except PresetError as exc:
                raise InvalidArgumentError(str(exc)) from None
        else:
            close = difflib.get_close_matches(name, list(FIELDS), n=1)
            raise InvalidArgumentError(f"--vary: unknown field {name!r}"
                                       f"{f' (did you mean {close[0]!r}?)' if close else ''} "
                                       f"(preset fields: {', '.join(FIELDS)}; the program's own "
                                       f"knobs as {PROGRAM_PREFIX}NAME)")
        out.append((name, parsed))
    if not out:
        raise InvalidArgumentError("whatif needs at least one --vary name=v1,v2,...")
    return out


def _knob(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def variants(varies: list[tuple[str, list]]) -> list[dict]:
    """Every combination of the varied values, in order."""
    names = [n for n, _ in varies]
    return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in varies))]


def label(combo: dict) -> str:
    """A variant's values as 'name=value, ...' (25000000000, not 25000000000.0)."""
    return ", ".join(f"{n}={shown(v)}" for n, v in combo.items())


def check_variants(preset: Preset, combos: list[dict]) -> None:
    """Apply each variant's preset fields together and check the rules between fields
    (default_block_dim <= compute_units, small_copy_bytes with small_copy_bandwidth, ...);
    InvalidArgumentError naming the variants that break one, before anything runs."""
    bad = []
    for i, combo in enumerate(combos):
        fields = {k: v for k, v in combo.items() if not k.startswith(PROGRAM_PREFIX)}
        try:
            preset.varied(fields, where=f"variant {i} ({label(combo)})")
        except PresetError as exc:
            bad.append(str(exc))
    if bad:
        raise InvalidArgumentError(
            f"--vary: {len(bad)} of {len(combos)} variant(s) break a rule between preset "
            f"{preset.name}'s fields, so none ran: {'; '.join(bad[:3])}"
            f"{'; ...' if len(bad) > 3 else ''}")


def summarize(profile) -> dict:
    """Total virtual time, busy share per executor class and the critical path of one run."""
    duration = profile.duration_ns or 1
    busy = {}
    for cls, kinds in CLASSES.items():
        spans = union((t.start_ns, t.end_ns) for t in profile.tasks if t.kind in kinds)
        busy[cls] = total(spans) / duration
    path = critical_path(profile)
    return {"virtual_ms": profile.duration_ns / 1e6, "busy": busy, "critical_path": describe(path),
            "critical_ms": path["length_ns"] / 1e6}


def run(preset: Preset, combos: list[dict], command: list[str], out: str) -> list[dict]:
    """Run `command` once per variant under `out`/variant-N; returns one row per variant."""
    rows = []
    for i, combo in enumerate(combos):
        folder = claim(os.path.join(out, f"variant-{i}"), overwrite=True)  # (whatif's own)
        reads = os.path.abspath(os.path.join(out, f"variant-{i}.reads.json"))
        if os.path.exists(reads):
            os.remove(reads)  # (an earlier sweep's)
        env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_SIM_PRESET=preset.path,
                   ASCENTRT_SIM_VARY=json.dumps(combo), ASCENTRT_PROFILE=os.path.abspath(folder),
                   ASCENTRT_SIM_VARY_READS=reads)
        env.pop("ASCENTRT_PROFILE_PID", None)
        try:
            done = subprocess.run(command, env=program_env(env), capture_output=True, text=True)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot run {command[0]!r}: {exc.strerror or exc}",
                                       code=ErrorCode.INVALID_PARAM) from None
        row = {"variant": i, "preset": preset.name, **combo, "exit": done.returncode,
               "read": _knobs_read(reads)}
        if done.returncode == 0:
            row.update(summarize(load_profile(folder)))
        else:
            row["error"] = failure_reason(done.stderr)
        _note_variant(folder, i, combo, preset)
        rows.append(row)
    return rows


def _note_variant(folder: str, i: int, combo: dict, preset: Preset) -> None:
    """Head the variant's summary.txt with the preset and the values it ran with."""
    path = os.path.join(folder, SUMMARY_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"whatif variant {i}: preset {preset.name} ({preset.path}) with "
                    f"{label(combo)}\n\n{text}")
    except OSError:  # (no profile: the run failed before writing one)
        pass


def _knobs_read(path: str) -> list[str]:
    """The program knobs a run looked up through ascentrt.sim.variant() (none: it never asked)."""
    try:
        with open(path, encoding="utf-8") as f:
            return list(json.load(f))
    except (OSError, ValueError):
        return []


def failure_reason(stderr: str) -> str:
    """What a failed run died of: its exception's last line (not a warning printed at exit
    after it), else its last line of output."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0].split(" ")[0]
        if head.endswith(("Error", "Exception", "Interrupt", "Exit")) and "Warning" not in head:
            return line
    return lines[-1] if lines else "(no output)"


def unread_knobs(rows: list[dict], varied: list[str]) -> list[str]:
    """The varied program knobs no run looked up (a misspelt name: every row alike)."""
    read = {name for r in rows for name in r.get("read", ())}
    return [n for n in varied if n.startswith(PROGRAM_PREFIX) and n[len(PROGRAM_PREFIX):] not in read]


def preset_line(preset: Preset) -> str:
    """The preset a sweep varies: its name, and its file unless it is a shipped one."""
    shipped = os.path.dirname(preset.path) == os.path.dirname(os.path.abspath(preset_files.__file__))
    return f"preset {preset.name}" + ("" if shipped else f" ({preset.path})")


def table(rows: list[dict], varied: list[str], preset: Preset) -> str:
    """The comparison as aligned text, under the preset's name."""
    head = [*varied, "virtual ms", "compute", "copy", "host", "critical path"]
    lines = [head]
    for r in rows:
        vals = [shown(r[n]) for n in varied]
        if "virtual_ms" in r:
            b = r["busy"]
            vals += [f"{r['virtual_ms']:.3f}", f"{b['compute']:.0%}", f"{b['copy']:.0%}",
                     f"{b['host']:.0%}", r["critical_path"]]
        else:
            vals += [f"failed (exit {r['exit']})", "", "", "", ""]
        lines.append(vals)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)
    failed = [f"variant {r['variant']} ({label({n: r[n] for n in varied})}) failed: "
              f"{r.get('error', '')}" for r in rows if "virtual_ms" not in r]
    unread = [f"warning: no run read {n} (ascentrt.sim.variant() never looked it up: a "
              f"misspelt knob gives every value the same row)" for n in unread_knobs(rows, varied)]
    return "\n".join([preset_line(preset), text, *failed, *unread])


def write(rows: list[dict], varied: list[str], out: str, preset: Preset) -> tuple[str, str]:
    """whatif.csv and whatif.html (the table and a bar chart of virtual time) in `out`."""
    csv_path, html_path = os.path.join(out, "whatif.csv"), os.path.join(out, "whatif.html")
    fields = ["variant", "preset", *varied, "virtual_ms", "busy_compute", "busy_copy",
              "busy_host", "critical_ms", "critical_path", "exit", "error"]
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            flat = dict(r, **{n: shown(r[n]) for n in varied})
            for k, v in r.get("busy", {}).items():
                flat[f"busy_{k}"] = round(v, 4)
            w.writerow(flat)
    ok = [r for r in rows if "virtual_ms" in r]
    top = max((r["virtual_ms"] for r in ok), default=1) or 1
    bars = []
    for j, r in enumerate(ok):
        width = 500 * r["virtual_ms"] / top
        y = 10 + j * 28
        bars.append(f"<text x='0' y='{y + 14}'>{html.escape(label({n: r[n] for n in varied}))}"
                    f"</text><rect x='260' y='{y}' width='{width:.1f}' height='20' fill='#4a7bd0'/>"
                    f"<text x='{265 + width:.1f}' y='{y + 14}'>{r['virtual_ms']:.3f} ms</text>")
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' width='900' height='{20 + 28 * len(ok)}' "
           f"font-family='sans-serif' font-size='12'>{''.join(bars)}</svg>")
    title = f"ascentrt whatif: preset {preset.name}"
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title></head><body><h1>{html.escape(title)}</h1><p>preset file: "
            f"{html.escape(preset.path)}</p>"
            f"<h2>Total virtual time per variant</h2>{svg}<h2>Table</h2>"
            f"<pre>{html.escape(table(rows, varied, preset))}</pre></body></html>")
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(page)
    return csv_path, html_path


def base_preset(name: str | None) -> Preset:
    """The preset a sweep varies: --preset, else ASCENTRT_SIM_PRESET (as every sim run reads)."""
    if name:
        return load(name)  # (a PresetError: the command says it with its code)
    try:
        return load(config.get("ASCENTRT_SIM_PRESET"))
    except PresetError as exc:
        raise InvalidArgumentError(f"ASCENTRT_SIM_PRESET: {exc}") from None


def main(args) -> int:
    """The `ascentrt whatif` command."""
    command = program_command(args.command, "ascentrt whatif --vary name=v1,v2 -- python prog.py")
    out = check_path(args.out, "the whatif folder (-o)")
    preset = base_preset(args.preset)
    varies = parse_vary(args.vary)
    combos = variants(varies)
    check_variants(preset, combos)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot create the whatif folder {out!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    rows = run(preset, combos, command, out)
    varied = [name for name, _ in varies]
    print(table(rows, varied, preset))
    try:
        csv_path, html_path = write(rows, varied, out, preset)
    except OSError as exc:  # (the rows are printed above: the runs are not lost)
        raise InvalidArgumentError(f"cannot write the whatif results into {out!r}: "
                                   f"{os_cause(exc)}", code=ErrorCode.INVALID_FILE) from None
    print(f"written: {csv_path}, {html_path}")
    return 0 if all(r["exit"] == 0 for r in rows) else 1
