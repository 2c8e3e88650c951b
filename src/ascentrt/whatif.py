"""`ascentrt whatif`: run one program on the simulated NPU once per variant of the preset (and
of the program's own knobs) and compare total virtual time, utilization and critical path."""

from __future__ import annotations

import csv
import difflib
import html
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from . import config
from .backends import presets as preset_files
from .backends.presets import FIELDS, PROGRAM_PREFIX, Preset, PresetError, load, parse_value, shown
from .errors import ErrorCode, InvalidArgumentError, os_cause
from .profiler import load as load_profile
from .profiler.metrics import metrics
from .profiler.critical import critical_path, describe
from .profiler.data import DATA_FILE, PART_DIR
from .profiler.export import SUMMARY_FILE
from .profiler.folders import OUTPUTS, REFUSED_NOTE, claim
from .validate import check_path, program_command, program_env, read_small_file

CLASSES = ("compute", "copy", "host")  # the executor classes a variant's utilization is given for
STDOUT, STDERR = "stdout.txt", "stderr.txt"  # a variant's own output, in its folder
TAIL_BYTES = 1 << 16  # what a failure's reason is looked for in: the end of its stderr
_VARIANT = re.compile(r"variant-([0-9]+)$")
_READS = re.compile(r"variant-([0-9]+)\.reads\.json$")
_PART = re.compile(re.escape(PART_DIR).replace(r"\{pid\}", "[0-9]+") + "$")
# "file:line: SomeWarning: text" (then, indented, the line that warned): warnings.warn's format
_WARNING = re.compile(r"^\S.*:[0-9]+: [A-Za-z_][\w.]*Warning: ")


class Stopped(BaseException):
    """A sweep stopped by a signal (SIGTERM, SIGHUP) other than Ctrl-C, handled as Ctrl-C is."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


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
        items = [v.strip() for v in values.split(",")]
        if not all(items):  # (an empty one was once dropped: 1,,2 ran two variants)
            raise InvalidArgumentError(f"--vary {spec!r}: an empty value (expected name=v1,v2,...)")
        if name.startswith(PROGRAM_PREFIX):
            knob = name[len(PROGRAM_PREFIX):]
            if not knob or any(c.isspace() for c in knob):
                raise InvalidArgumentError(f"--vary {spec!r}: a program knob needs a name without "
                                           f"spaces: {PROGRAM_PREFIX}NAME=v1,v2,...")
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
        seen = set()
        for value in parsed:  # (two variants the report could not tell apart, run twice)
            if shown(value) in seen:
                raise InvalidArgumentError(f"--vary {spec!r}: the value {shown(value)} is given "
                                           f"twice (give each value once)")
            seen.add(shown(value))
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
    """Total virtual time, utilization per executor class and the critical path of one run.
    Utilization as the profile's summary gives it: each unit's busy time, summed over the
    devices, over units x each device's window (a kernel on 1 of 4 units for the whole run is
    25%, not 100%); for copies, that of the busiest direction (how long any of its copies ran,
    over the window) where it is higher."""
    m = metrics(profile)
    busy = {}
    for cls in CLASSES:
        held = [(e["busy_ns"], e["units"] * m["devices"][e["device"]]["window_ns"])
                for e in m["executors"].values() if e["executor"] == cls]
        capacity = sum(c for _, c in held)
        busy[cls] = sum(b for b, _ in held) / capacity if capacity else 0.0
    # (copies: the busiest direction's engines, which bound the transfers; pooled over every
    # direction, an H2D engine busy 97% of the run read as a third of the copy class)
    directions = [e["utilization"] for e in m["executors"].values()
                  if e["executor"].startswith("copy ")]
    busy["copy"] = max([busy["copy"], *directions])
    path = critical_path(profile)
    return {"virtual_ms": profile.duration_ns / 1e6, "busy": busy, "critical_path": describe(path),
            "critical_ms": path["length_ns"] / 1e6}


def prepare(out: str) -> None:
    """Remove what an earlier sweep left in `out` (its variant-N folders and knob files), so
    that none reads as this sweep's; InvalidArgumentError (100003), before anything runs, for
    a variant-N folder that holds files whatif did not write (in this sweep's range too: its
    files would sit beside the new run's, as if the run had written them)."""
    try:
        entries = sorted(os.listdir(out))
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read the whatif folder {out!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    stale = []
    for name in entries:
        path = os.path.join(out, name)
        if _READS.match(name) and os.path.isfile(path):
            stale.append(path)
        elif _VARIANT.match(name) and os.path.isdir(path):
            foreign = [n for n in os.listdir(path)
                       if n not in OUTPUTS and n not in (STDOUT, STDERR) and not _PART.match(n)
                       and not REFUSED_NOTE.match(n)]
            if foreign:
                raise InvalidArgumentError(
                    f"{path!r} is left from an earlier sweep and holds files whatif did not write "
                    f"({', '.join(sorted(foreign)[:3])}): move them away or choose another "
                    f"folder (-o)", code=ErrorCode.INVALID_FILE)
            stale.append(path)
    for path in stale:
        try:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot remove {path!r}, an earlier sweep's: "
                                       f"{os_cause(exc)}", code=ErrorCode.INVALID_FILE) from None


def run_variant(i: int, combo: dict, preset: Preset, command: list[str], out: str,
                timeout: float | None) -> dict:
    """Run `command` as variant `i` under `out`/variant-i (its profile, stdout.txt, stderr.txt)
    and return its row; past `timeout` seconds it is killed with its process group."""
    folder = claim(os.path.join(out, f"variant-{i}"), overwrite=True)  # (whatif's own)
    reads = os.path.abspath(os.path.join(out, f"variant-{i}.reads.json"))
    env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_SIM_PRESET=preset.path,
               ASCENTRT_SIM_VARY=json.dumps(combo), ASCENTRT_PROFILE=os.path.abspath(folder),
               ASCENTRT_SIM_VARY_READS=reads)
    env.pop("ASCENTRT_PROFILE_PID", None)
    timed_out = False
    with open(os.path.join(folder, STDOUT), "wb") as fout, \
            open(os.path.join(folder, STDERR), "wb") as ferr:
        try:
            # Its own process group: a timeout or Ctrl-C stops what it started too, and the
            # terminal's Ctrl-C comes to whatif, which decides (the finished rows are kept).
            child = subprocess.Popen(command, env=program_env(env), stdin=subprocess.DEVNULL,
                                     stdout=fout, stderr=ferr, process_group=0)
        except OSError as exc:
            raise InvalidArgumentError(f"cannot run {command[0]!r}: {os_cause(exc)}",
                                       code=ErrorCode.INVALID_PARAM) from None
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = _kill_group(child)
        except BaseException:  # Ctrl-C or SIGTERM: the running variant stops with its group
            _kill_group(child)
            raise
    row = {"variant": i, "preset": preset.name, **combo, "exit": 128 - code if code < 0 else code,
           "read": _knobs_read(reads)}
    try:
        os.remove(reads)  # (read into the row: the run's note to whatif, no result of its own)
    except OSError:
        pass  # never written: the program looked up no knob
    if timed_out:
        row["error"] = f"timed out after {shown(timeout)} s (killed with its process group)"
    elif code == 0:
        try:
            row.update(summarize(load_profile(folder)))
        except InvalidArgumentError as exc:  # (one variant's missing profile loses no other row)
            row["error"] = (f"its profile cannot be read: {exc.message}"
                            if os.path.exists(os.path.join(folder, DATA_FILE)) else
                            f"no profile was written ({exc.message}): the program must import "
                            f"ascentrt and exit normally")
    else:
        with open(os.path.join(folder, STDERR), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))  # (its end says why)
            row["error"] = failure_reason(f.read().decode("utf-8", "replace"), code)
    _note_variant(folder, i, combo, preset)
    return row


def _kill_group(child: subprocess.Popen) -> int:
    """Kill `child` and every process in its group; its Popen exit status."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # (gone already)
        pass
    return child.wait()


def _note_variant(folder: str, i: int, combo: dict, preset: Preset) -> None:
    """Head the variant's summary.txt with the preset and the values it ran with."""
    path = os.path.join(folder, SUMMARY_FILE)
    try:
        text = read_small_file(path, "the summary", 1 << 24)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"whatif variant {i}: preset {preset.name} ({preset.path}) with "
                    f"{label(combo)}\n\n{text}")
    except (OSError, InvalidArgumentError):  # (no profile: the run failed before writing one)
        pass


def _knobs_read(path: str) -> list[str]:
    """The program knobs a run looked up through ascentrt.sim.variant() (none: it never asked)."""
    try:
        return list(json.loads(read_small_file(path, "the knobs file", 1 << 24)))
    except (OSError, ValueError, TypeError):
        return []


def failure_reason(stderr: str, code: int = 1) -> str:
    """What a failed run (Popen exit status `code`) died of: its traceback's exception line,
    else its last stderr line that is no warning (a LeakWarning printed at exit comes after
    the error) nor an exception ignored at exit; a signal is named (killed by SIGSEGV)."""
    kept, skip = [], ""  # skip: a "warning"'s indented lines, or an "ignored" one's traceback
    for line in stderr.splitlines():
        if _WARNING.match(line) or line.startswith("Exception ignored"):
            skip = "warning" if _WARNING.match(line) else "ignored"
        elif skip and (line[:1].isspace() or line.startswith("Traceback") and skip == "ignored"):
            pass
        elif skip == "ignored" and line.strip():
            skip = ""  # (the ignored exception's own line)
        elif line.strip():
            skip = ""
            kept.append(line)
    reason = kept[-1].strip() if kept else ""
    for k in range(len(kept) - 1, -1, -1):
        if kept[k].startswith("Traceback (most recent call last)"):
            raised = [line for line in kept[k + 1:] if not line[:1].isspace()]
            reason = raised[0].strip() if raised else reason
            break
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}" + (f" (last on stderr: {reason})" if reason else "")
    return reason or f"exited with code {code}, no error message on stderr"


def unread_knobs(rows: list[dict], varied: list[str]) -> list[str]:
    """The varied program knobs no run looked up (a misspelt name: every row alike); a run
    killed (a signal, a timeout) wrote none, so only one that exited is asked, and only when
    some run succeeded (runs that all failed may have failed before looking: no typo to name)."""
    exited = [r for r in rows if r["exit"] < 128]
    if not any(r["exit"] == 0 for r in exited):
        return []
    read = {name for r in exited for name in r.get("read", ())}
    return [n for n in varied if n.startswith(PROGRAM_PREFIX) and n[len(PROGRAM_PREFIX):] not in read]


def _status(r: dict) -> str:
    """A failed row's cell: why in a word or two."""
    error = r.get("error", "")
    if error.startswith("timed out"):
        return "timed out"
    if error.startswith("killed by "):
        return f"failed ({error.split()[2]})"
    return f"failed (exit {r['exit']})"


def preset_line(preset: Preset) -> str:
    """The preset a sweep varies: its name, and its file unless it is a shipped one."""
    shipped = os.path.dirname(preset.path) == os.path.dirname(os.path.abspath(preset_files.__file__))
    return f"preset {preset.name}" + ("" if shipped else f" ({preset.path})")


def table(rows: list[dict], varied: list[str], preset: Preset, out: str = "") -> str:
    """The comparison as aligned text, under the preset's name."""
    head = [*varied, "virtual ms", "compute", "copy (busiest direction)", "host funcs",
            "critical path"]
    lines = [head]
    for r in rows:
        vals = [shown(r[n]) for n in varied]
        if "virtual_ms" in r:
            b = r["busy"]
            vals += [f"{r['virtual_ms']:.3f}", f"{b['compute']:.0%}", f"{b['copy']:.0%}",
                     f"{b['host']:.0%}", r["critical_path"]]
        else:
            vals += [_status(r), "", "", "", ""]
        lines.append(vals)
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)
    failed = [f"variant {r['variant']} ({label({n: r[n] for n in varied})}) failed: "
              f"{r.get('error', '')} (its output: {_output(out, r['variant'])})"
              for r in rows if "virtual_ms" not in r]
    unread = [f"warning: no run read {n} (ascentrt.sim.variant() never looked it up: a "
              f"misspelt knob gives every value the same row)" for n in unread_knobs(rows, varied)]
    return "\n".join([preset_line(preset), text, *failed, *unread])


def _output(out: str, i: int) -> str:
    """Where variant `i`'s own output is, as the failure text says it."""
    folder = os.path.join(out, f"variant-{i}")
    return f"{os.path.join(folder, STDOUT)}, {STDERR}"


def write(rows: list[dict], varied: list[str], out: str, preset: Preset,
          note: str = "") -> tuple[str, str]:
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
            f"{html.escape(preset.path)}</p>{f'<p>{html.escape(note)}</p>' if note else ''}"
            f"<h2>Total virtual time per variant</h2>{svg}<h2>Table</h2>"
            f"<pre>{html.escape(table(rows, varied, preset, out))}</pre></body></html>")
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


def parse_timeout(text) -> float | None:
    """--timeout's seconds per variant (None: no limit); InvalidArgumentError unless > 0."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not 0 < seconds < float("inf"):  # (NaN too)
        raise InvalidArgumentError(f"--timeout takes the seconds a variant may run, > 0, got "
                                   f"{text!r}")
    return seconds


def _progress(i: int, count: int, combo: dict, row: dict, seconds: float, out: str) -> None:
    """One line on stderr per finished variant."""
    if "virtual_ms" in row:
        what = f"{row['virtual_ms']:.3f} ms virtual"
    else:
        what = f"failed: {row['error']} (its output: {_output(out, i)})"
    # (numbered as its folder variant-N and its whatif.csv row, from 0; then how far the sweep is)
    print(f"ascentrt whatif: variant {i} ({label(combo)}; {i + 1} of {count}) in {seconds:.1f} s: "
          f"{what}", file=sys.stderr, flush=True)


def _raise_stopped(signum, frame) -> None:
    """SIGTERM / SIGHUP's handler during a sweep: unwind as Ctrl-C does."""
    raise Stopped(signum)


def main(args) -> int:
    """The `ascentrt whatif` command; 130 (128 + the signal) when Ctrl-C stops the sweep."""
    try:
        return _main(args)
    except KeyboardInterrupt:  # (before the sweep, or again while its results are written)
        print("ascentrt whatif: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


def _main(args) -> int:
    command = program_command(args.command, "ascentrt whatif --vary name=v1,v2 -- python prog.py")
    out = check_path(args.out, "the whatif folder (-o)")
    timeout = parse_timeout(getattr(args, "timeout", None))
    preset = base_preset(args.preset)
    varies = parse_vary(args.vary)
    combos = variants(varies)
    check_variants(preset, combos)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot create the whatif folder {out!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    prepare(out)
    rows, stopped = sweep(preset, combos, command, out, timeout)
    varied = [name for name, _ in varies]
    print(table(rows, varied, preset, out))
    note = _stopped_note(stopped, combos, len(rows), out) if stopped else ""
    if note:
        print(f"ascentrt whatif: {note}", file=sys.stderr)
    try:
        csv_path, html_path = write(rows, varied, out, preset, note)
    except OSError as exc:  # (the rows are printed above: the runs are not lost)
        raise InvalidArgumentError(f"cannot write the whatif results into {out!r}: "
                                   f"{os_cause(exc)}", code=ErrorCode.INVALID_FILE) from None
    print(f"written: {csv_path}, {html_path}")
    if stopped is not None:
        return 128 + stopped[1]
    return 0 if all(r["exit"] == 0 and "error" not in r for r in rows) else 1


def _stopped_note(stopped: tuple[int, int], combos: list[dict], done: int, out: str) -> str:
    """What an interrupted sweep left undone."""
    i, signum = stopped
    if i == len(combos):
        return f"interrupted ({signal.Signals(signum).name}) as the sweep ended"
    return (f"interrupted ({signal.Signals(signum).name}) during variant {i} "
            f"({label(combos[i])}; its output so far: {_output(out, i)}): it and the "
            f"{len(combos) - i - 1} after it did not finish; {done} did, in the table")


def sweep(preset: Preset, combos: list[dict], command: list[str], out: str,
          timeout: float | None) -> tuple[list[dict], tuple[int, int] | None]:
    """Run every variant in turn, a progress line each; the rows that finished, and (variant,
    signal) when Ctrl-C (or SIGTERM / SIGHUP) stopped the sweep, else None."""
    rows: list[dict] = []
    handlers = {}
    if threading.current_thread() is threading.main_thread():  # (signals reach only that one)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            handlers[signum] = signal.signal(signum, _raise_stopped)
    try:
        for i, combo in enumerate(combos):
            started = time.monotonic()
            row = run_variant(i, combo, preset, command, out, timeout)
            rows.append(row)
            _progress(i, len(combos), combo, row, time.monotonic() - started, out)
    except KeyboardInterrupt:  # (the variant it stopped is the first without a row)
        return rows, (len(rows), int(signal.SIGINT))
    except Stopped as exc:
        return rows, (len(rows), exc.signum)
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return rows, None
