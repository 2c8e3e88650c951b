"""Profile output folders: a run never writes over an earlier one unless told to, and the
parts the processes of a run write inside it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import warnings

from ..errors import ErrorCode, InvalidArgumentError, os_cause
from ..usage import process_alive
from ..validate import read_small_file
from .csvexport import FILES as CSV_FILES
from .data import DATA_FILE, LOST, PART_DIR, RUNNING, MissingPart, part_path
from .export import REPORT_FILE, SUMMARY_FILE, TRACE_FILE
from .profile import Profile, read

PROGRESS_FILE = "progress.json"
# What a process of a run notes in its part folder as it starts (its pid and command line): a
# part that never comes is then named with what it ran (see missing).
START_FILE = "process.json"
# What a process of a run leaves in its part folder while it writes its part at exit: it ends on
# its own then (`ascentrt prof` does not pass on a signal it may have had already, see
# writing_at_exit)
WRITING_FILE = "writing-at-exit"
_NOT_A_PART = (PROGRESS_FILE, START_FILE, WRITING_FILE)  # notes, not outputs (never moved up)
OUTPUTS = (DATA_FILE, TRACE_FILE, REPORT_FILE, SUMMARY_FILE, *CSV_FILES, PROGRESS_FILE)
_PART = re.compile(re.escape(PART_DIR).replace(r"\{pid\}", r"([0-9]+)") + "$")
# Why ascentrt refused a process of an `ascentrt prof` run at its start (a wrong setting): the
# run's error says it, instead of guessing that the program never imported ascentrt.
REFUSED = PART_DIR + ".refused"
REFUSED_NOTE = re.compile(re.escape(REFUSED).replace(r"\{pid\}", "[0-9]+") + "$")


REPLACE_HINT = "replace it with --force (overwrite=True in ascentrt.profile)"


def claim(path: str, overwrite: bool = False, replace_hint: str = REPLACE_HINT) -> str:
    """Make folder `path` ready for one run's outputs and return it. A folder that holds an
    earlier run's outputs is refused (InvalidArgumentError 100003) unless `overwrite`, which
    removes them first; other files in it are left alone."""
    try:
        os.makedirs(path, exist_ok=True)
        # (a part folder without a profile, what a run that wrote none left, is no profile)
        earlier = sorted(n for n in os.listdir(path) if n in OUTPUTS
                         or _PART.match(n) and _holds_profile(os.path.join(path, n)))
    except OSError as exc:
        raise InvalidArgumentError(f"cannot create the profile folder {path!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    if earlier and not overwrite:
        raise InvalidArgumentError(
            f"{path!r} already holds a profile ({', '.join(earlier[:3])}"
            f"{', ...' if len(earlier) > 3 else ''}): choose another folder, or {replace_hint}",
            code=ErrorCode.INVALID_FILE)
    clear_leftovers(path)
    for name in earlier:
        target = os.path.join(path, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        else:
            os.remove(target)
    return path


def _holds_profile(path: str) -> bool:
    """Whether part folder `path` holds a part written (not only an interrupted run's progress)."""
    try:
        return not os.path.isdir(path) or any(n not in _NOT_A_PART for n in os.listdir(path))
    except OSError:
        return True  # (one that cannot be looked into is not taken for nothing)


def still_writing(root: str) -> list[int]:
    """The pids of the processes of a run into `root` that are alive and have not written their
    part yet (a process the program started that outlives it)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    pids = sorted(int(m.group(1)) for m in map(_PART.match, names) if m)
    return [pid for pid in pids if not os.path.exists(os.path.join(part_path(root, pid), DATA_FILE))
            and process_alive(pid)]


def clear_leftovers(root: str) -> None:
    """Remove from profile folder `root` what holds no profile: part folders with nothing but a
    progress file (a process that stopped, or was killed, before writing its part) and refusal
    notes."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        try:
            if REFUSED_NOTE.match(name):
                os.remove(os.path.join(root, name))
            elif m := _PART.match(name):
                if not process_alive(int(m.group(1))):  # (a live one may write its part yet)
                    for note in _NOT_A_PART:
                        with contextlib.suppress(OSError):
                            os.remove(os.path.join(root, name, note))
                os.rmdir(os.path.join(root, name))  # (only when empty: OSError otherwise)
        except OSError:
            pass


def note_writing(part: str) -> bool:
    """Note in part folder `part` that its process is writing its part at exit; returns whether
    it could (best effort). Removed with end_writing."""
    try:
        with open(os.path.join(part, WRITING_FILE), "w"):
            return True
    except OSError:
        return False


def end_writing(part: str) -> None:
    """Remove the note_writing note from part folder `part` (if there)."""
    with contextlib.suppress(OSError):
        os.remove(os.path.join(part, WRITING_FILE))


def writing_at_exit(root: str, pid: int) -> bool:
    """Whether process `pid` of a run into `root` is writing its part at exit (note_writing)."""
    return os.path.exists(os.path.join(part_path(root, pid), WRITING_FILE))


def note_start(part: str, pid: int, command: list) -> None:
    """Note in part folder `part` that process `pid` running `command` started writing a part
    there (best effort: a part that never comes is still named, by its pid, see missing)."""
    try:
        with open(os.path.join(part, START_FILE), "w", encoding="utf-8") as f:
            json.dump({"pid": pid, "command": [str(a) for a in command]}, f)
    except OSError:
        pass


def own_command() -> list[str]:
    """This process's command line: as the system has it (Linux), else the interpreter's argv."""
    try:
        return _command_of("self")
    except OSError:
        return [sys.executable, *sys.argv]


def _command_of(pid: int | str) -> list[str]:
    """The command line of process `pid` ("self": this one) as Linux's /proc has it."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def missing(root: str, owner: int | None = None, exclude: tuple = ()) -> list[MissingPart]:
    """The processes of a run into `root` whose part is not there: those that started one and
    ended without writing it (LOST), those that still run (RUNNING); with `owner` (the pid
    of the run's ASCENTRT_PROFILE_PID), also the live processes of the run that have not
    started one yet (found by their environment, where the system shows it: Linux). Pids in
    `exclude` are left out."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found: dict[int, MissingPart] = {}
    written = set()
    for pid in sorted(int(m.group(1)) for m in map(_PART.match, names) if m):
        part = part_path(root, pid)
        if pid in exclude or os.path.exists(os.path.join(part, DATA_FILE)):
            written.add(pid)  # (one that wrote its part and is ending: not missing)
            continue
        command: list = []
        try:
            note = json.loads(read_small_file(os.path.join(part, START_FILE), "a start note", 1 << 20))
            if isinstance(note, dict) and isinstance(note.get("command"), list):
                command = [str(a) for a in note["command"]]
        except (OSError, ValueError, InvalidArgumentError):
            pass  # (none: a process that ended before it could note one, or an older run)
        found[pid] = MissingPart(pid, RUNNING if process_alive(pid) else LOST, command)
    if owner is not None:
        for pid, command in _processes_of_run(owner):
            if pid not in found and pid not in exclude and pid not in written:
                found[pid] = MissingPart(pid, RUNNING, command)
    return [found[pid] for pid in sorted(found)]


def _processes_of_run(owner: int) -> list[tuple[int, list]]:
    """(pid, command line) of the live processes, other than `owner`, started with
    ASCENTRT_PROFILE_PID=owner in their environment (Linux's /proc; elsewhere none)."""
    mark = f"\0ASCENTRT_PROFILE_PID={owner}\0".encode()
    found: list[tuple[int, list]] = []
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid in (owner, os.getpid()):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read()
            if mark not in env + b"\0" or not process_alive(pid):
                continue
            command = _command_of(pid)
        except OSError:
            continue  # (another user's, or one that ended meanwhile)
        found.append((pid, command))
    return found


def note_refusal(root: str, pid: int, text: str) -> None:
    """Leave in profile folder `root` why ascentrt refused process `pid` at its start (best
    effort: the process exits anyway)."""
    try:
        with open(os.path.join(root, REFUSED.format(pid=pid)), "w", encoding="utf-8") as f:
            f.write(text)
    except OSError:
        pass


def refusals(root: str) -> list[str]:
    """The reasons processes of a run into `root` were refused at their start (note_refusal)."""
    found = []
    try:
        for name in sorted(os.listdir(root)):
            if REFUSED_NOTE.match(name):
                found.append(read_small_file(os.path.join(root, name), "a refusal note", 1 << 16).strip())
    except (OSError, InvalidArgumentError):
        pass
    return found


def parts(root: str, unreadable: list[str] | None = None) -> list[Profile]:
    """The parts child processes have written into profile folder `root`, by pid; the reasons
    those written but unreadable were left out go to `unreadable` (when given)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    pids = sorted(int(m.group(1)) for m in map(_PART.match, names) if m)
    found = []
    for pid in pids:
        if os.path.exists(os.path.join(part_path(root, pid), DATA_FILE)):
            try:
                found.append(read(part_path(root, pid)))
            except InvalidArgumentError as exc:  # one bad part does not lose the others
                if unreadable is not None:
                    unreadable.append(f"the profile process {pid} wrote cannot be read: {exc.message}")
                warnings.warn(f"ascentrt: the part of process {pid} is left out of the profile "
                              f"(its folder stays): {exc}", RuntimeWarning, stacklevel=2)
    return found


def assemble(root: str, pid: int, command: list, unreadable: list[str] | None = None,
             owner: int | None = None) -> Profile | None:
    """Make the parts the processes of an `ascentrt prof` run wrote into `root` its profile:
    the part of process `pid` (the program; else the only part) becomes the folder's own, with
    the others as its parts and the processes whose part is missing named (see missing; with
    `owner`, the run's ASCENTRT_PROFILE_PID) (then the folder is written again: its trace shows
    them all). None when no process wrote a readable part (why those written were not:
    `unreadable`)."""
    found = parts(root, unreadable)
    if not found:
        return None
    main = next((p for p in found if p.pid == pid), found[0] if len(found) == 1 else None)
    others = [p for p in found if p is not main]
    lacking = missing(root, owner, exclude=tuple(p.pid for p in found))
    if main is not None and not others and not lacking:  # one process: its outputs move up as they are
        part = part_path(root, main.pid)
        for name in os.listdir(part):
            if name in _NOT_A_PART:  # (a note a process killed as it wrote its part left)
                os.remove(os.path.join(part, name))
            else:
                os.replace(os.path.join(part, name), os.path.join(root, name))
        os.rmdir(part)
        return main
    if main is None:  # the program itself recorded nothing: a profile that only has the parts
        main = Profile(command=list(command), pid=pid, origin_ns=min(p.origin_ns for p in found))
    main.parts = others
    main.missing = lacking
    main.save(root)
    if main in found:
        shutil.rmtree(part_path(root, main.pid))
    return main
