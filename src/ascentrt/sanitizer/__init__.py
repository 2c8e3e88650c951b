"""The stream race sanitizer: finds two accesses to the same bytes, one a write, that nothing orders.

Turn it on for a whole program with ASCENTRT_SANITIZE=warn|raise|log (1 means warn), or for a
region with `with ascentrt.sanitize(mode):`. Modes: warn (each new race a RaceWarning, printed
to stderr, and the program goes on), raise (the launch that completes a race raises RaceError
before it is queued; one found in work queued already is a RaceWarning), log (collect only).
`reports()` returns the races found so far.

Turning it on while work is in flight starts from a synchronized state: work queued before is
taken as ordered before everything queued after (its accesses are not known). Off, it costs the
launch path one test of an empty hook.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from .. import forksafe
from ..config import sanitize_mode
from ..engine import Hooks
from ..errors import InvalidArgumentError, warn_at_caller
from ..memory.registry import REGISTRY
from ..validate import check_path, write_text_file
from .report import Access, Race, RaceError, RaceWarning
from .state import Sanitizer

MODES = ("warn", "raise", "log")
_lock = forksafe.lock()
_found: list[Race] = []  # reports of earlier sessions (kept after the sanitizer is turned off)


def parse_mode(text: str) -> str:
    """warn, raise or log (1 / on mean warn), as ASCENTRT_SANITIZE reads them, but not off;
    raises InvalidArgumentError naming the allowed ones."""
    try:
        value = sanitize_mode(text)
    except InvalidArgumentError:
        value = "off"  # (its message lists off too, which this place refuses)
    if value == "off":
        raise InvalidArgumentError(f"not a mode to run the sanitizer in: {text!r} (use warn, "
                                   f"raise or log)")
    return value


def _announce(race: Race, new: bool) -> None:
    # Raise mode raises what it can refuse; a race it cannot (work queued already, released
    # by a record the runtime queued itself) is a warning, never silence.
    san = Hooks.sanitizer
    if new and san is not None and san.mode in ("warn", "raise"):
        pair = (race.first.site, race.second.site)
        if pair not in san.warned:  # (a pair of lines racing on 50 buffers: one warning)
            san.warned.add(pair)
            warn_at_caller(f"ascentrt sanitizer: {race}", RaceWarning)


def enable(mode: str = "warn") -> None:
    """Turn the sanitizer on (from a synchronized state), or change its mode."""
    mode = parse_mode(mode)
    with _lock:
        current = Hooks.sanitizer
        if current is not None:
            current.mode = mode
            return
        san = Sanitizer(mode, _announce, _count_found)
        REGISTRY.observe(san)
        Hooks.sanitizer = san


def disable() -> None:
    """Turn the sanitizer off; its reports stay available from reports()."""
    with _lock:
        san = Hooks.sanitizer
        if san is None:
            return
        Hooks.sanitizer = None
        REGISTRY.unobserve(san)
        _found.extend(san.reports())


def enabled() -> bool:
    """Whether the sanitizer is on."""
    return Hooks.sanitizer is not None


def reports() -> list[Race]:
    """Every race found so far (this session and earlier ones), in the order found."""
    san = Hooks.sanitizer
    return _found + (san.reports() if san is not None else [])


def clear() -> None:
    """Forget the reports found so far."""
    _found.clear()
    san = Hooks.sanitizer
    if san is not None:
        with san.lock:
            san.races.clear()


REPORT_FILE = "races-{pid}.json"  # each process's own file in the report folder
RUNNING_FILE = "running-{pid}.json"  # made as a process starts checking, rewritten with each
                                     # race it finds (their texts); gone once it reported
_counted: list[str] = []  # the texts of the races this process found, as its progress file holds them
_inherited = [0]  # reports a forked child got from its parent (the parent's to write)
_report_folder: list[str | None] = [None]  # where this process writes its reports at exit
_written: list[int] = [0]  # the pid whose reports were written (once per process)
_reported: list[str] = []  # the texts its report file holds (a race found after it: added)


class _Token:
    """What multiprocessing's after-fork registry keeps (it holds objects weakly)."""


_MP_TOKEN = _Token()
_mp_registered: list[int] = [0]  # the pid that registered it (a fork's child has not yet)


def write_reports_at_exit(folder: str) -> None:
    """At exit, write this process's race reports into folder `folder` as races-<pid>.json
    (its pid, command line and the races' texts: each process of a program writes its own,
    for `ascentrt sanitize`; a forked child too, a multiprocessing one included, which ends
    without running atexit); raises InvalidArgumentError (100003) now when `folder` is not a
    path. Until it has written them, a running-<pid>.json file says the process has not
    reported. A write that fails at exit is said on stderr with the races' texts, so that they
    are not lost."""
    folder = check_path(folder, "the race report folder")  # (an int: a descriptor written and closed)
    _report_folder[0] = folder
    _mark_running(folder)
    atexit.register(_write_reports)
    mp_util = sys.modules.get("multiprocessing.util")
    if mp_util is not None:  # (a multiprocessing child may end with os._exit, skipping atexit)
        _before_fork()  # (importing ascentrt as it starts, before it drops its finalizers)
        mp_util.Finalize(_MP_TOKEN, _write_reports, exitpriority=-100)  # (later, in its target)


def _record() -> dict:
    return {"pid": os.getpid(), "command": list(sys.argv)}


def _mark_running(folder: str) -> None:
    """Say in `folder` that this process checks and has not reported yet, with the races it
    found so far (best effort: a folder it cannot write is said when it reports)."""
    name = RUNNING_FILE.format(pid=os.getpid())
    try:  # (whole or not at all: a process killed as it rewrites it leaves the last one)
        tmp = write_text_file(os.path.join(folder, f".{name}.tmp"),
                              json.dumps({**_record(), "races": _counted}),
                              "the race report's progress file to")
        os.replace(tmp, os.path.join(folder, name))
    except (InvalidArgumentError, OSError):
        pass


def _count_found(race: Race) -> None:
    """A new race: into the progress file at once, so that a process that ends without its
    report (os._exit, a signal) still has it counted and named; one found after the report was
    written (by the program's teardown after the exit handlers) into the report, written again."""
    folder = _report_folder[0]
    if folder is None:
        return
    if _written[0] != os.getpid():
        _counted.append(str(race))
        _mark_running(folder)
    else:
        _reported.append(str(race))
        _write_report_file(folder, [str(race)])


def _write_reports() -> None:
    """Write this process's reports into its report folder (once; a race found later is
    added by _count_found)."""
    folder = _report_folder[0]
    if folder is None or _written[0] == os.getpid():
        return
    _written[0] = os.getpid()
    _reported[:] = [str(r) for r in reports()[_inherited[0]:]]
    if not _write_report_file(folder, _reported):
        return
    try:
        os.remove(os.path.join(folder, RUNNING_FILE.format(pid=os.getpid())))
    except OSError:
        pass


def _write_report_file(folder: str, new: list[str]) -> bool:
    """Write races-<pid>.json with the texts of _reported; False when it cannot be written
    (said on stderr with `new`, the races not said before, so that they are not lost)."""
    record = {**_record(), "races": _reported}
    path = os.path.join(folder, REPORT_FILE.format(pid=os.getpid()))
    try:
        write_text_file(path, json.dumps(record), "the race report to")
    except InvalidArgumentError as err:  # (at exit no caller can catch it: say it, with the races)
        print(f"ascentrt: error: {err.in_words()}; {len(new)} race(s) found"
              f"{':' if new else ''}", file=sys.stderr)
        for text in new:
            print(f"  - {text}", file=sys.stderr)
        return False
    return True


def _write_in_multiprocessing_child(_token: _Token) -> None:
    """In a multiprocessing child started by fork (it ends with os._exit, skipping atexit):
    write the reports as it exits, after its own children (run from the registry of
    after-fork hooks, once the child has dropped the finalizers it inherited)."""
    sys.modules["multiprocessing.util"].Finalize(_MP_TOKEN, _write_reports, exitpriority=-100)


def _json_files(folder: str, prefix: str) -> list[tuple[str, object]]:
    """(name, what it holds) of each <prefix>*.json file in `folder`, by name: the parsed JSON,
    or the exception reading it raised (a process killed mid-write, or one that removed it)."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found: list[tuple[str, object]] = []
    for name in names:
        if name.startswith(prefix) and name.endswith(".json"):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    found.append((name, json.load(fh)))
            except (OSError, ValueError) as exc:
                found.append((name, exc))
    return found


def _pid_and_command(record: Any) -> dict:
    """{"pid", "command"} of a report or progress file's JSON (KeyError, TypeError or
    ValueError when it holds no such thing)."""
    return {"pid": int(record["pid"]), "command": [str(a) for a in record["command"]]}


def unreported(folder: str) -> list[dict]:
    """The processes that started checking into `folder` and have not written their reports:
    {"pid", "command", "races"} each (a process still running, or one that ended without its
    exit handlers: killed by a signal, os._exit), "races" the texts of those it found so far
    (None when its progress file does not say: written by an older version)."""
    found = []
    for name, record in _json_files(folder, "running-"):
        if isinstance(record, FileNotFoundError):
            continue  # (removed meanwhile: it reported)
        try:
            entry = _pid_and_command(record)
        except (KeyError, TypeError, ValueError):  # (unreadable: what it found is not known)
            digits = name[len("running-"):-len(".json")]
            entry = {"pid": int(digits) if digits.isdigit() else 0, "command": []}
        races = record.get("races") if isinstance(record, dict) else None
        entry["races"] = [str(t) for t in races] if isinstance(races, list) else None
        found.append(entry)
    return found


def read_reports(folder: str) -> list[dict]:
    """The race reports the processes of a program wrote into `folder` (write_reports_at_exit),
    by pid: {"pid", "command", "races"} each; a file that cannot be read is a record saying so."""
    found = []
    for name, record in _json_files(folder, "races-"):
        try:
            if isinstance(record, Exception):
                raise record
            found.append({**_pid_and_command(record), "races": [str(t) for t in record["races"]]})  # type: ignore[index]
        except (OSError, ValueError, KeyError, TypeError) as exc:  # (a process killed mid-write)
            found.append({"pid": 0, "command": [], "races": [f"the report {name} cannot be read: {exc}"]})
    return sorted(found, key=lambda r: r["pid"])


def _before_fork() -> None:
    """A process that reports at exit and may start multiprocessing children by fork, or is
    such a child (one a fork server started, which imports ascentrt as it unpickles its
    target): have each of them report too, as it exits (once per process: the registry of
    after-fork hooks outlives the fork; a child runs it after it has dropped its finalizers)."""
    mp_util = sys.modules.get("multiprocessing.util")
    if _report_folder[0] is not None and mp_util is not None and _mp_registered[0] != os.getpid():
        _mp_registered[0] = os.getpid()
        mp_util.register_after_fork(_MP_TOKEN, _write_in_multiprocessing_child)


def _after_fork_in_child() -> None:
    _inherited[0] = len(reports())
    _counted.clear()  # (the parent's, which it reports itself)
    _reported.clear()
    if _report_folder[0] is not None:  # (its own report, under its own pid)
        _mark_running(_report_folder[0])


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def sanitize(mode: str = "warn") -> Iterator[list[Race]]:
    """Check the work submitted inside the block; yields the list of its reports (filled at exit)."""
    previous = Hooks.sanitizer.mode if Hooks.sanitizer is not None else None
    before = len(reports())
    out: list[Race] = []
    enable(mode)
    try:
        yield out
    finally:
        out.extend(reports()[before:])
        if previous is None:
            disable()
        else:
            enable(previous)


__all__ = ["Access", "MODES", "Race", "RaceError", "RaceWarning", "clear", "disable", "enable",
           "enabled", "parse_mode", "read_reports", "reports", "sanitize", "unreported",
           "write_reports_at_exit"]
