"""Argument checks shared by the public API and the commands: timeouts, the program to run."""

from __future__ import annotations

import importlib.util
import os
import signal
import stat
import sys
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .errors import ErrorCode, InvalidArgumentError, os_cause

if TYPE_CHECKING:  # (subprocess is imported by the commands that start a program, not by every process)
    import subprocess


def check_finite(value, what: str) -> float:
    """A finite number >= 0 (an int or float, numpy's too; not a bool), as a float (an int too
    large for a float is none: 10**400 once reached math.isfinite as an OverflowError); raises
    InvalidArgumentError naming `what` (a str, None or 0j is no number: none counts as 0)."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) \
            and 0 <= float(value) < float("inf")  # (NaN fails the comparison)
    except OverflowError:
        ok = False
    if not ok:
        raise InvalidArgumentError(f"{what} must be a finite number >= 0 (an int or float, numpy's "
                                   f"too; not a bool), got {value!r:.40}")
    return float(value)


def as_int(value: object) -> int | None:
    """A Python or numpy int (not a bool) as an int; None for anything else."""
    if type(value) is int:
        return value
    if isinstance(value, np.integer) or isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return None


def check_size(nbytes: object, what: str = "nbytes", allow_zero: bool = False) -> int:
    """Validate a byte count (a real int, not negative or absurd); raises InvalidArgumentError."""
    if type(nbytes) is not int and not isinstance(nbytes, np.integer):
        raise InvalidArgumentError(f"{what} must be an int, got {type(nbytes).__name__}")
    nbytes = int(nbytes)
    if nbytes < 0 or (nbytes == 0 and not allow_zero):
        raise InvalidArgumentError(f"{what} must be {'>= 0' if allow_zero else '> 0'}, got {nbytes}")
    if nbytes >= 1 << 62:
        raise InvalidArgumentError(f"{what} is too large: {nbytes}")
    return nbytes


def as_group(group, singles: tuple, what: str) -> tuple:
    """What a call declares as a group (reads, writes, tasks to wait for), as a tuple taken once
    (a generator is read only once); one object of the `singles` types counts as one."""
    if type(group) is tuple:
        return group
    if isinstance(group, singles):
        return (group,)
    try:
        return tuple(group)
    except TypeError:
        raise InvalidArgumentError(f"{what} takes a list, got {type(group).__name__}") from None


def check_name(name) -> None:
    """A task's name: a str or None (profiles and reports show it as text)."""
    if name is not None and type(name) is not str:
        raise InvalidArgumentError(f"name must be a str or None, got {type(name).__name__}")


def check_flag(value, what: str) -> bool:
    """A yes/no argument: a bool (or the ints 0 and 1, numpy's bools too); raises
    InvalidArgumentError for anything else ("no" is a true string, NaN a true float)."""
    if value is True or value is False:
        return value
    if isinstance(value, (int, np.bool_, np.integer)) and value in (0, 1):
        return bool(value)
    raise InvalidArgumentError(f"{what} must be True or False, got {value!r:.40}")


def enum_member(cls, value):
    """The member of IntEnum `cls` that `value` names (a member, or an int, numpy's too), or
    None: a float, a bool or a str names none (1.0 and True equal 1, "1" would hash apart)."""
    if isinstance(value, cls):
        return value
    if type(value) is bool or not isinstance(value, (int, np.integer)):
        return None
    try:
        return cls(int(value))
    except ValueError:
        return None


def check_path(path, what: str) -> str:
    """A file or folder path: a str or os.PathLike, as a str (an int would be taken as an open
    file descriptor by open(), written into and closed); raises InvalidArgumentError with
    INVALID_FILE."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if type(path) is not str or not path or "\0" in path:
        raise InvalidArgumentError(f"{what} must be a path (a non-empty str or os.PathLike), got "
                                   f"{path!r:.60}", code=ErrorCode.INVALID_FILE)
    return path


def write_text_file(path, text: str, what: str, make_folder: bool = False) -> str:
    """Write `text` to `path` (check_path first; its folder made too with `make_folder`);
    returns the path as a str. InvalidArgumentError (100003) naming `what` and the cause when
    it cannot be written."""
    path = check_path(path, what)
    try:
        if make_folder:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot write {what} {path!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    return path


def read_small_file(path: str, what: str, most_bytes: int) -> str:
    """The UTF-8 text of regular file `path` of at most `most_bytes`; InvalidArgumentError
    (100003) naming `what` and the file when it is not one (a FIFO would block, /dev/zero never
    ends), is larger, cannot be read or is not UTF-8. (FileNotFoundError is raised as it is.)"""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # (a FIFO's open blocks too)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {what} {path!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise InvalidArgumentError(f"{what} {path!r}: {kind}", code=ErrorCode.INVALID_FILE)
        if info.st_size > most_bytes:
            raise InvalidArgumentError(f"{what} {path!r}: {info.st_size} bytes, more than the "
                                       f"{most_bytes} it may have", code=ErrorCode.INVALID_FILE)
        with open(fd, "rb", closefd=False) as fh:
            data = fh.read(most_bytes + 1)  # (one that grew since: its size is checked again)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read {what} {path!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_FILE) from None
    finally:
        os.close(fd)
    if len(data) > most_bytes:
        raise InvalidArgumentError(f"{what} {path!r}: more than the {most_bytes} bytes it may "
                                   f"have", code=ErrorCode.INVALID_FILE)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(f"{what} {path!r}: not UTF-8 text ({exc.reason} at byte "
                                   f"{exc.start})", code=ErrorCode.INVALID_FILE) from None


def check_timeout(timeout) -> float | None:
    """None (wait forever) or a positive number of seconds; raises InvalidArgumentError (107000)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgumentError(f"timeout must be None or seconds > 0, got {timeout!r}",
                                   code=ErrorCode.RT_PARAM_INVALID)
    if not timeout > 0:  # also rejects NaN
        raise InvalidArgumentError(f"timeout must be None or seconds > 0, got {timeout!r}",
                                   code=ErrorCode.RT_PARAM_INVALID)
    # Beyond what threading can wait for (TIMEOUT_MAX, ~292 years) a timeout means forever.
    return None if timeout >= threading.TIMEOUT_MAX else float(timeout)


def program_command(command: list, usage: str) -> list:
    """The program a command runs (what follows `--`); `python` / `python3` mean this
    interpreter. Raises InvalidArgumentError naming `usage` when there is none."""
    command = list(command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise InvalidArgumentError(f"nothing to run: {usage}")
    if command[0] in ("python", "python3"):
        command[0] = sys.executable  # the interpreter ascentrt is installed in
    if os.path.basename(command[0]).startswith("python"):
        script = _python_script(command[1:])
        # (exists, not isfile: Python also runs a folder or zip with __main__.py, and a pipe
        # such as /dev/stdin; what it cannot run, it says itself)
        if script is not None and not os.path.exists(script):
            raise InvalidArgumentError(f"no such file: {script!r} (the script to run)",
                                       code=ErrorCode.INVALID_FILE)
    return command


def _python_script(args: list) -> str | None:
    """The script a python command line runs, or None (-c, -m, - or standard input)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-" or not arg.startswith("-"):
            return None if arg == "-" else arg
        if arg in ("--check-hash-based-pycs",):
            i += 1  # (its value is the next argument)
        elif not arg.startswith("--"):  # short options, maybe several in one: -uc CODE, -Wignore
            for k, flag in enumerate(arg[1:], 1):
                if flag in "cm":
                    return None
                if flag in "WX":
                    if k == len(arg) - 1:
                        i += 1  # (its value is the next argument, else the rest of this one)
                    break
        i += 1
    return None


# A folder whose acl.py makes a program's `import acl` load ascentrt's pyACL facade.
ACL_SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "acl", "shim")


def pyacl_installed() -> bool:
    """Whether a real pyACL (a module named acl, CANN's) is importable here."""
    try:
        return importlib.util.find_spec("acl") is not None
    except (ImportError, ValueError):
        return False


def program_env(env: dict, always: bool = False) -> dict:
    """`env` with the acl shim first on PYTHONPATH, so that a program's `import acl` gets
    ascentrt's facade; unless (always False) a real pyACL is installed: it keeps the name."""
    if not always and pyacl_installed():
        return env
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != ACL_SHIM_DIR]
    return dict(env, PYTHONPATH=os.pathsep.join([ACL_SHIM_DIR, *paths]))


def start_program(command: list, env: dict) -> subprocess.Popen:
    """Start `command` with environment `env`; raises InvalidArgumentError (100000) saying why
    it cannot start ("no such file or directory", "permission denied")."""
    import subprocess
    try:
        return subprocess.Popen(command, env=env)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot run {command[0]!r}: {os_cause(exc)}",
                                   code=ErrorCode.INVALID_PARAM) from None


def wait_exit_status(child: subprocess.Popen, timeout: float | None = None) -> int:
    """Wait for `child` and return its exit status as a shell gives it: 128 + n when signal n
    ended it (Popen says -n, which as the command's own exit status would read as 256 - n)."""
    code = child.wait(timeout)
    return 128 - code if code < 0 else code



# Signals that stop a command running a program: passed on to the program when another process
# sent them to the command alone (the terminal sends them to both, as its process group).
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How long a signal a process sent waits to be passed on while the program shares the command's
# process group: one sent to the group (kill -INT -PGID, a CI cancel) reached the program too,
# and a program that ends within this got it once, not twice.
GROUP_GRACE_S = 2.0


class Waited(NamedTuple):
    """How a program wait_program waited for ended."""

    code: int              # its exit status (wait_exit_status's)
    passed: int | None     # the last signal passed on to it, or None
    shared: int | None     # a signal not passed on: it came while the program shared the
                           # command's process group and the program ended within the grace


def _shares_group(child: subprocess.Popen) -> bool:
    """Whether `child` is in this process's process group (a signal to the group reaches it)."""
    try:
        return os.getpgid(child.pid) == os.getpgrp()
    except OSError:
        return False


BUSY_POLL_S = 0.05  # how often a signal waiting for a program that ends on its own looks again


def wait_program(child: subprocess.Popen, every: float = 1.0, tick=None, ending=None) -> Waited:
    """Wait for `child` (start_program's) and return its exit status (wait_exit_status's) and
    the signals that came meanwhile (see Waited). SIGINT, SIGTERM or SIGHUP that another
    process sent to this command alone (kill) is passed on to the program, which is waited for
    (no orphan left running); one from the terminal is not (it went to the program too). One a
    process sent while the program shares this command's process group may have gone to the
    whole group (kill -- -PGID, which no signal's details tell from a kill of this command
    alone): it is passed on only if the program still runs GROUP_GRACE_S later, so that one
    sent to the group reaches the program once, not twice (which cut the writing of its
    profile). While `ending()` says the program ends on its own (it writes its profile at exit,
    holding such a signal until it is written), the grace lasts: one sent to the group would
    come twice, and a second one ends that writing at once; another one of the same kind sent
    meanwhile is passed on at once (to end a write that is stuck). `tick()` is called every
    `every` seconds meanwhile."""
    import subprocess
    waits = hasattr(signal, "sigtimedwait") and threading.current_thread() is threading.main_thread()
    if not waits:  # (no sigtimedwait: macOS; or not the main thread: no signals here)
        while True:
            try:
                return Waited(wait_exit_status(child, timeout=every), None, None)
            except subprocess.TimeoutExpired:
                if tick is not None:
                    tick()
    watched = {*PASSED_ON, signal.SIGCHLD}  # (SIGCHLD: the program ended, no wait for a tick)
    # Blocked, they wait to be taken here: the program (started before) keeps its own mask.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    passed: int | None = None
    held: int | None = None  # a signal waiting out the grace
    due = 0.0
    try:
        while child.poll() is None:
            wait_s = every if held is None else max(0.0, min(every, due - time.monotonic()))
            info = signal.sigtimedwait(watched, wait_s)
            if held is not None and time.monotonic() >= due and child.poll() is None:
                if ending is not None and ending():  # (it ends on its own: looked at again soon)
                    due = time.monotonic() + BUSY_POLL_S
                else:
                    child.send_signal(held)  # (the program still runs: it was this command's alone)
                    passed, held = held, None
            if info is None:
                if tick is not None:
                    tick()
            elif info.si_signo != signal.SIGCHLD and info.si_code <= 0:  # (sent by a process)
                if not _shares_group(child):
                    passed = info.si_signo
                    child.send_signal(passed)
                elif info.si_signo in (held, passed) and ending is not None and ending():
                    # (a second one of the same kind while it writes its profile at exit: to end
                    # a stuck write; another kind it got from the group, and holds, as the first)
                    passed, held = info.si_signo, None
                    child.send_signal(passed)
                elif held is None:
                    held, due = info.si_signo, time.monotonic() + GROUP_GRACE_S
            # (si_code > 0: from the kernel, the terminal, which sent the program one too)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return Waited(wait_exit_status(child), passed, held)
