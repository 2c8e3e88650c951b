"""Per-process device usage files: this process publishes its memory and streams, `ascentrt info`
reads every other live process's (as npu-smi lists the processes on each NPU).

One small JSON file per process, `<pid>.json` in ASCENTRT_USAGE_DIR. A daemon thread rewrites
it at most every PUBLISH_EVERY_S seconds while the process has devices, and only when a figure
changed: malloc, free and launch do nothing for it (they stay as fast as with publishing off).
The file is replaced atomically (a temporary file, then a rename) and removed at a normal
exit. A forked child does not publish: its inherited file is its parent's. Readers skip files
they cannot parse and delete those of dead processes (a pid reused since is told apart by
its start time).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import stat
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any

from . import forksafe
from . import config
from .device import when_devices_exist
from .memory.stats import reserved_bytes

PUBLISH_EVERY_S = 1.0  # how stale another process's figures in `ascentrt info` may be
FORMAT = 1
_FILE = re.compile(r"(\d+)\.json|\.(\d+)-\w+\.tmp")  # a usage file, or a writer's temporary one
_PROGRAM_CHARS = 200  # a long command line is cut to this in the file


@dataclass(frozen=True)
class DeviceUsage:
    """What one process holds on one device."""

    device: int
    memory_used: int      # bytes in live buffers
    memory_reserved: int  # bytes the process's pools took from the device (used + cached)
    streams: int          # live streams (the default stream once created)


@dataclass(frozen=True)
class ProcessUsage:
    """What another live process published: who it is and what it holds on each device."""

    pid: int
    program: str               # its command line, cut to 200 characters
    since: float               # when it began publishing (seconds since the epoch)
    devices: tuple[DeviceUsage, ...]
    backend: str = ""          # its devices' backend: cpu, or sim:<preset>


def folder() -> str:
    """The folder of the usage files (ASCENTRT_USAGE_DIR, else one per user in the temp dir)."""
    user = os.getuid() if hasattr(os, "getuid") else os.getlogin()
    return config.get("ASCENTRT_USAGE_DIR") or os.path.join(tempfile.gettempdir(),
                                                              f"ascentrt-usage-{user}")


def _own_folder(where: str, make: bool = True) -> bool:
    """Whether `where` (made 0700 if need be) is this user's and closed to others: in a shared
    temp dir another user could make the folder first and plant links in it. Warns once when not."""
    if make:
        os.makedirs(where, mode=0o700, exist_ok=True)
    st = os.stat(where, follow_symlinks=False)
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    if mine and stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o077:
        return True
    _warn_not_private(where, st, mine)
    return False


_warned_folders: set[str] = set()


def _warn_not_private(where: str, st: os.stat_result, mine: bool) -> None:
    """Say once per folder why usage is neither published nor read there (else `ascentrt info`
    reports no other process, silently)."""
    why = ("is not a folder" if not stat.S_ISDIR(st.st_mode) else "belongs to another user" if not mine
           else f"has mode {stat.S_IMODE(st.st_mode):04o}, open to other users")
    _warn_once(where, f"{why}: device usage is neither published nor read there (it must be this "
                      f"user's alone: chmod 700)")


def _warn_once(where: str, what: str) -> None:
    """Warn once per folder that usage cannot be used there: '<the folder> <what>'."""
    if where in _warned_folders:
        return
    _warned_folders.add(where)
    named = f"ASCENTRT_USAGE_DIR={where}" if config.is_set("ASCENTRT_USAGE_DIR") else f"usage folder {where}"
    # (explicit: one line, as it may come from the publishing thread, with no caller to show)
    warnings.warn_explicit(f"ascentrt: {named} {what}", UserWarning, "ascentrt", 0)


def _warn_not_published(where: str, exc: OSError) -> None:
    """Say once per folder that usage cannot be published there (a file in its place, a path
    that cannot be made), unless why was said already."""
    reason = "it is not a folder" if os.path.exists(where) and not os.path.isdir(where) \
        else exc.strerror or type(exc).__name__
    _warn_once(where, f"cannot be written ({reason}): this process's device usage is not "
                      f"published for `ascentrt info`")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) of a process; None where /proc has
    no such entry (no /proc on this system, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()  # the name, in (), may hold spaces
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int) -> bool:
    """Whether `pid` is a running process (another user's too; not a zombie)."""
    return _alive(pid, None)


def _alive(pid: int, start_ticks: int | None) -> bool:
    """Whether `pid` is a running process that started at `start_ticks` (None: not checked)."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        pass  # another user's live process
    except (OSError, OverflowError):
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return True  # nothing more to check by
    state, started = stat
    return state not in "ZX" and (start_ticks is None or started == start_ticks)


def _program() -> str:
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if argv:
        argv[0] = os.path.basename(argv[0])
    return " ".join(" ".join(argv).split())[:_PROGRAM_CHARS]  # (one line: `-c` code has newlines)


def _device_usage(dev: Any) -> dict:
    free, total = dev.mem_info()
    used = total - free
    reserved = reserved_bytes(dev) or used  # (pool off: what is used)
    return {"device": dev.id, "memory_used": used, "memory_reserved": reserved,
            "streams": len(dev.streams())}


class _Publisher:
    """Writes this process's usage file from a daemon thread; removes it at exit."""

    def __init__(self, devices: list, where: str):
        self.devices = devices
        self.folder = where
        self.path = os.path.join(where, f"{os.getpid()}.json")
        stat = _proc_stat(os.getpid())
        backend = config.get("ASCENTRT_BACKEND")
        if backend == "sim":
            backend += ":" + config.get("ASCENTRT_SIM_PRESET")
        self.header = {"format": FORMAT, "pid": os.getpid(), "program": _program(),
                       "since": time.time(), "start_ticks": stat[1] if stat else None,
                       "backend": backend}
        self.lock = forksafe.lock()  # one writer at a time: the thread, publish(), exit
        self.stopped = forksafe.event()
        self.written: str | None = None  # the text the file holds

    def publish(self) -> None:
        with self.lock:
            if self.stopped.is_set():
                return
            text = json.dumps({**self.header, "devices": [_device_usage(d) for d in self.devices]})
            if text == self.written:
                return
            tmp = None
            try:
                if not _own_folder(self.folder):
                    raise PermissionError(f"{self.folder} is not this user's alone")
                # A fresh name, made exclusively: never a file (or link) someone else put there.
                fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{os.getpid()}-", suffix=".tmp")
                with os.fdopen(fd, "w") as fh:
                    fh.write(text)
                os.replace(tmp, self.path)  # readers see the old file or the new one, never half
            except OSError as exc:
                self.stopped.set()  # an unwritable folder: stop publishing, never fail the program
                if tmp is not None:
                    _remove(tmp)
                _warn_not_published(self.folder, exc)
                return
            self.written = text

    def run(self) -> None:
        global _publisher
        with _start_lock:  # (the process's one publisher: a start cut before it was noted
            if _publisher is None:  # is this one; a second made meanwhile ends at once)
                _publisher = self
            elif _publisher is not self:
                return
        self.publish()
        while not self.stopped.wait(PUBLISH_EVERY_S):
            self.publish()

    def stop(self) -> None:
        self.stopped.set()
        with self.lock:  # (after a write in progress, so no write follows the removal)
            if self.written is not None:
                _remove(self.path)


_publisher: _Publisher | None = None
_start_lock = forksafe.lock()


def _start(devices: list) -> None:
    """Begin publishing once the devices exist (ASCENTRT_USAGE_PUBLISH=0: never)."""
    global _publisher
    with _start_lock:
        if _publisher is not None or sys.is_finalizing() or not config.get("ASCENTRT_USAGE_PUBLISH"):
            return  # (devices first made during interpreter shutdown: past the exit cleanup)
        publisher = _Publisher(devices, folder())
        try:
            forksafe.start_thread(publisher.run, "ascentrt-usage")
        except RuntimeError:  # (Python 3.12+: no new thread once the exit has begun)
            return
        if _publisher is None:  # (else its thread noted itself: see run)
            _publisher = publisher


def publish() -> None:
    """Write this process's usage file now rather than within PUBLISH_EVERY_S (no-op when
    publishing is off or the process has no devices yet)."""
    if _publisher is not None:
        _publisher.publish()


def _stop_at_exit() -> None:
    if _publisher is not None:
        _publisher.stop()


def _forget_in_child() -> None:
    """After fork: the child has no publishing thread, and the file is the parent's."""
    global _publisher
    _publisher = None


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass  # gone already, or another user's


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def _parse(text: str, pid: int) -> tuple[ProcessUsage, int | None]:
    """The usage in a file's text and the start ticks it claims; raises ValueError, KeyError,
    TypeError or AttributeError on anything else."""
    data = json.loads(text)
    if data["format"] != FORMAT or data["pid"] != pid:
        raise ValueError("another format, or another process's file")
    ticks = data["start_ticks"]
    devices = tuple(DeviceUsage(_count(d["device"]), _count(d["memory_used"]),
                                _count(d["memory_reserved"]), _count(d["streams"]))
                    for d in data["devices"])
    usage = ProcessUsage(pid, str(data["program"]), float(data["since"]), devices,
                         str(data.get("backend", "")))
    return usage, None if ticks is None else _count(ticks)


def can_read(where: str | None = None) -> bool:
    """Whether other processes' usage can be read in `where` (default: folder()): it is this
    user's alone, or does not exist yet (nothing published); False is said once in a warning."""
    where = where or folder()
    try:
        return _own_folder(where, make=False)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def processes(where: str | None = None) -> list[ProcessUsage]:
    """The usage other live processes published in `where` (default: folder()), by pid.

    Files of dead processes are deleted; unreadable or malformed files are skipped."""
    where = where or folder()
    try:
        if not _own_folder(where, make=False):
            return []  # not ours alone: nothing in it is to be trusted (or deleted)
        names = os.listdir(where)
    except OSError:
        return []  # no process has published yet
    found = []
    for name in names:
        match = _FILE.fullmatch(name)
        if match is None:
            continue
        pid = int(match[1] or match[2])
        path = os.path.join(where, name)
        if pid == os.getpid() or pid == 0:
            continue  # this process shows its own figures directly
        if match[2]:  # a temporary file: left behind only if its writer died mid-write
            if not _alive(pid, None):
                _remove(path)
            continue
        try:
            with open(path) as fh:
                usage, ticks = _parse(fh.read(), pid)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            if not _alive(pid, None):
                _remove(path)
            continue
        if _alive(pid, ticks):
            found.append(usage)
        else:
            _remove(path)
    return sorted(found, key=lambda u: u.pid)


when_devices_exist(_start)
atexit.register(_stop_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
