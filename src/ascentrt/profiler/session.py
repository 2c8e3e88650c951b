"""Profiling sessions: `with ascentrt.profile(path)`, start()/stop(), and ASCENTRT_PROFILE."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from typing import TYPE_CHECKING

from .. import forksafe, interrupts
from ..errors import AscentError, ErrorCode, InvalidArgumentError
from ..validate import check_flag, check_path
from . import clock

if TYPE_CHECKING:
    from .profile import Profile
    from .recorder import Checkpoint, Recorder
# (the folders, the recorder and the exporters are imported where a session uses them: every
# process imports this module, and few of them profile)

_lock = forksafe.lock()
_running: "list[Session]" = []     # started and not yet stopped, oldest first
_recorder: Recorder | None = None  # the one recording every running session shares
_from_env: "Session | None" = None  # the session ASCENTRT_PROFILE started in this process


def active_recorder():
    """The recorder of the running sessions, or None (the cheap check ranges and marks make)."""
    return _recorder


class Session:
    """One profiling run; `with` starts and stops it, and the folder is written at the stop.

    Sessions nest: one started while another runs shares its recording, and gets what was
    recorded between its own start and stop; the other keeps recording throughout."""

    def __init__(self, path: str | os.PathLike | None = None, overwrite: bool = False):
        # (an int would be taken by open() as a descriptor: written into and closed)
        self.path: str | None = None if path is None else check_path(path, "profile path")
        self.overwrite = check_flag(overwrite, "overwrite")  # ("no" would replace a profile)
        from . import folders
        self.replace_hint = folders.REPLACE_HINT  # (how a refusal of a taken folder says to replace it)
        self.profile: Profile | None = None
        self._recorder: Recorder | None = None
        self._since: Checkpoint | None = None
        self._progress_stop: threading.Event | None = None
        self._part = False  # whether it writes the part of a process of a run (start_from_env)

    @property
    def running(self) -> bool:
        """Whether this session is recording now."""
        return self._recorder is not None

    def start(self) -> "Session":
        """Start recording (sharing the recording of sessions already running); raises
        AscentError (100002) if this session already ran, InvalidArgumentError (100003) if its
        folder holds an earlier profile (see `overwrite`) or a running session's."""
        global _recorder
        from . import folders
        from .recorder import Recorder
        with _lock:
            if self._recorder is not None or self.profile is not None:
                raise AscentError("this profile session was started already; create a new one",
                                  code=ErrorCode.REPEAT_INITIALIZE)
            # (the recorder before the folder: a setting it refuses, such as ASCENTRT_BACKEND,
            # leaves no folder behind)
            fresh = _recorder is None
            rec = Recorder() if _recorder is None else _recorder
            if self.path is not None:
                taken = [s.path for s in _running if s.path is not None
                         and os.path.abspath(s.path) == os.path.abspath(self.path)]
                if taken:
                    raise InvalidArgumentError(f"{self.path!r} is the folder of a profile that "
                                               f"is running: give this one another folder",
                                               code=ErrorCode.INVALID_FILE)
                folders.claim(self.path, self.overwrite, self.replace_hint)
            if fresh:
                _recorder = rec
                rec.start()
                self._since = rec.origin
            else:
                self._since = rec.edge()
            self._recorder = rec
            _running.append(self)
        return self

    def stop(self, write: bool = True) -> Profile:
        """Stop recording, write the folder (when a path was given) and return the Profile.
        The folder's profile includes the parts child processes wrote into it."""
        global _recorder
        from . import folders
        from .export import collector_paused
        write = check_flag(write, "write")
        with _lock:
            rec = self._recorder
            if rec is None:
                if self.profile is not None:
                    return self.profile
                raise AscentError("this profile session is not running",
                                  code=ErrorCode.UNINITIALIZE)
            _running.remove(self)
            self._recorder = None
            last = not _running
            if last:
                rec.stop()
                _recorder = None
            until = None if last else rec.edge(closing=True)
        if self._progress_stop is not None:
            self._progress_stop.set()
            assert self.path is not None  # (only a session with a folder reports progress)
            try:
                os.remove(os.path.join(self.path, folders.PROGRESS_FILE))
            except OSError:
                pass  # never written: the run was shorter than one progress period
        assert self._since is not None  # (set by start)
        with collector_paused():
            self.profile = rec.finish(consume=last, window=(self._since, until))
            if write and self.path is not None:
                self.profile.parts = folders.parts(self.path)
                # (the run's owner also names the processes of its run that have not
                # started a part yet: they outlive it)
                owner = os.getpid() if self is _from_env and \
                    os.environ.get("ASCENTRT_PROFILE_PID") == str(os.getpid()) else None
                self.profile.missing = folders.missing(self.path, owner)
                self.profile.save(self.path)
                if self._part:  # (its start note: the part is here now)
                    with contextlib.suppress(OSError):
                        os.remove(os.path.join(self.path, folders.START_FILE))
        return self.profile

    def snapshot(self) -> Profile:
        """The profile so far (the session keeps running), or the final one after stop()."""
        rec, since = self._recorder, self._since
        if rec is not None and since is not None:
            return rec.finish(window=(since, None))
        if self.profile is None:
            raise AscentError("this profile session never ran", code=ErrorCode.UNINITIALIZE)
        return self.profile

    def diagnose(self, range: str | None = None) -> list:
        """The diagnosis of what was recorded (so far, while running); with `range`, of what
        happened inside the user ranges of that name (see Profile.diagnose)."""
        return self.snapshot().diagnose(range)

    def metrics(self) -> dict:
        """Utilization, latency, API time and bandwidth figures of what was recorded."""
        return self.snapshot().metrics()

    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._recorder is not None:
            self.stop()

    def _stop_at_exit(self) -> None:
        """Stop and write, as the process exits; a failure is one line on stderr. A SIGINT,
        SIGTERM or SIGHUP that comes meanwhile (a second Ctrl-C, a CI cancel) is held until the
        profile is written, then does what it does (ends the process, by default); a second
        one of the same kind comes at once (see interrupts.hold_ending)."""
        if not self.running:
            return
        from . import folders
        held = interrupts.hold_ending()
        # (a part's process tells `ascentrt prof` it ends on its own: see folders.writing_at_exit)
        noted = self._part and self.path is not None and folders.note_writing(self.path)
        try:
            try:
                self.stop()
            except Exception as exc:  # exiting: say what went wrong, in one line
                print(f"ascentrt: could not write the profile to {self.path}: {exc}",
                      file=sys.stderr)
            except KeyboardInterrupt:  # (a second Ctrl-C: said, not a traceback)
                print(f"ascentrt: a second interrupt cut the profile written to {self.path} "
                      f"short (the first was held)", file=sys.stderr)
            finally:
                self._release_at_exit(held)
        finally:
            # (after the release: where a signal held ends the process, the note stays; taken
            # away before, `ascentrt prof` could see the program, still ending, as one that goes
            # on, and pass that signal on again)
            if noted and self.path is not None:
                folders.end_writing(self.path)

    def _release_at_exit(self, held: bool) -> None:
        """interrupts.release_ending(held) once the profile is written at exit, saying which
        signal came meanwhile where it ends the process or raises."""
        def tell(signum: int) -> None:
            if interrupts.handler_of(signum) == signal.SIG_DFL:  # (it ends the process now)
                print(f"ascentrt: {signal.Signals(signum).name} came while the profile was "
                      f"written to {self.path}: it was held until the profile was written",
                      file=sys.stderr, flush=True)
        try:
            interrupts.release_ending(held, tell)  # (a signal held meanwhile is handled here)
        except KeyboardInterrupt:  # (exiting already: said, not a traceback)
            with contextlib.suppress(OSError, ValueError):  # (a closed stderr: nothing to say)
                print(f"ascentrt: an interrupt came while the profile was written to "
                      f"{self.path}: it was held until the profile was written", file=sys.stderr)

    def _report_progress(self, every_s: float = 1.0) -> None:
        """Write PROGRESS_FILE into the folder every `every_s` seconds (for `ascentrt prof`)."""
        assert self.path is not None  # (a session with a folder)
        from . import folders
        stop = self._progress_stop = forksafe.event()
        path = os.path.join(self.path, folders.PROGRESS_FILE)
        started = time.monotonic()

        def loop():
            while not stop.wait(every_s):
                rec = self._recorder
                if rec is None:
                    return
                state = {"elapsed_s": round(time.monotonic() - started, 1),
                         "tasks": sum(len(b) for b in list(rec.per_stream.values())),
                         "api_calls": len(rec.calls)}
                try:
                    with open(path + ".tmp", "w") as fh:
                        json.dump(state, fh)
                    os.replace(path + ".tmp", path)
                except OSError:
                    return  # the folder went away: progress is a courtesy, not a duty

        threading.Thread(target=loop, name="ascentrt-profile-progress", daemon=True).start()


def profile(path: str | os.PathLike | None = None, overwrite: bool = False) -> Session:
    """`with ascentrt.profile("out") as prof:` records everything; `prof.diagnose()` after.

    The folder `path` gets trace.json (Perfetto / chrome://tracing), CSV summaries,
    report.html and profile.json (read back with ascentrt.profiler.load). None: nothing written.
    A folder that holds an earlier profile is refused unless `overwrite`. Inside another
    running profile (`ascentrt prof`, say), this one gets what ran in its own block.
    """
    return Session(path, overwrite)


def start(path: str | os.PathLike | None = None, overwrite: bool = False) -> Session:
    """Start a profiling session without `with`; stop it with `stop()`."""
    return Session(path, overwrite).start()


def stop() -> Profile:
    """Stop the newest running session (and write its folder); raises AscentError (100001) if
    none runs."""
    s = _running[-1] if _running else None
    if s is None:
        raise AscentError("no profile is running", code=ErrorCode.UNINITIALIZE)
    return s.stop()


def start_from_env(path: str) -> Session | None:
    """Profile the whole program into `path` (ASCENTRT_PROFILE); written when it exits.

    The first process claims the folder (ASCENTRT_PROFILE_PID; one that holds an earlier
    profile is refused). Processes it starts that import ascentrt, and processes forked from
    it, record their own parts into child-<pid>/ inside it; the first one's profile lists them
    and its trace.json shows them all on one timeline, a process per pid. (`ascentrt prof`
    claims the folder itself: every process of the program writes a part, and it assembles
    them once the program has exited.) A process of the run writes its part whether or not the
    first one still runs (one that outlives it too); one that cannot write its part runs
    unprofiled, with a warning (None), and is never refused.
    """
    global _from_env
    from .. import config
    from . import folders
    from .data import part_path
    owner = config.get("ASCENTRT_PROFILE_PID")
    # A part for a process of a run other than its owner: the owner's folder is there (it
    # claims it before starting anything), whether the owner still runs or not (a child that
    # outlives it is still a process of its run, not a new run). A stale or made-up pid whose
    # folder is not there names no run: that process's profile goes to the top of the folder.
    child = bool(owner) and owner != str(os.getpid()) and os.path.isdir(path)
    if child:
        path = part_path(path, os.getpid())
    else:  # (absolute: a child that changes directory still writes here)
        os.environ["ASCENTRT_PROFILE"] = path = os.path.abspath(path)
        os.environ["ASCENTRT_PROFILE_PID"] = str(os.getpid())
    # A part in a child-<pid>/ already there is from an earlier process of this run that had
    # the same pid: it is replaced, not refused (the run's folder was claimed empty).
    s = Session(path, overwrite=child)
    s.replace_hint = "delete it (ASCENTRT_PROFILE never replaces a profile)"
    if not child:
        s = _from_env = s.start()
    else:
        try:
            s = _from_env = s.start()
        except AscentError as exc:  # (a folder gone or not writable: the process still runs)
            warnings.warn(f"ascentrt: process {os.getpid()} of the profiled run is not profiled: "
                          f"{exc}", RuntimeWarning, stacklevel=2)
            return None
        s._part = True
        folders.note_start(path, os.getpid(), folders.own_command())
    s._report_progress()
    atexit.register(s._stop_at_exit)
    _note_uncaught_exceptions()
    mp_util = sys.modules.get("multiprocessing.util")
    if child and mp_util is not None:  # a multiprocessing child ends with os._exit, no atexit
        mp_util.register_after_fork(s, _stop_at_multiprocessing_exit)
    return s


def _note_uncaught_exceptions() -> None:
    """Mark the profile with an exception that ends the program (before the hook prints it):
    the diagnosis then tells work cut off by it from work stuck on a wait."""
    from .data import EXIT_MARK
    previous = sys.excepthook

    def hook(kind, value, tb):
        rec = _recorder
        if rec is not None and kind is not SystemExit:
            # (its first line: the type and the start of the message, however many lines)
            text = traceback.format_exception_only(kind, value)
            first = text[0].strip().splitlines()[0] if text and text[0].strip() else kind.__name__
            rec.add_mark(EXIT_MARK + first, clock.now_ns(), threading.get_ident())
        previous(kind, value, tb)
    sys.excepthook = hook


def _after_fork_in_child() -> None:
    """A forked child inherits the parent's sessions, which are not its to write: it drops
    them, and under ASCENTRT_PROFILE records its own part, as a process started anew does."""
    global _recorder, _from_env  # (_lock: renewed by forksafe's hook, which runs first)
    profiled = _from_env is not None and _from_env.running
    for s in _running:
        s._recorder = None
    _running.clear()
    rec, _recorder, _from_env = _recorder, None, None
    if rec is not None:
        rec.detach()
    if not profiled:
        return
    from .. import config
    try:
        start_from_env(config.get("ASCENTRT_PROFILE"))
    except AscentError as exc:  # (the top of the folder refused: not a process of that run)
        print(f"ascentrt: process {os.getpid()} is not profiled: {exc}", file=sys.stderr)


def _stop_at_multiprocessing_exit(s: Session) -> None:
    """Write `s` when this multiprocessing child exits: its finalizers run then. (Registered
    from its after-fork hooks, which run once it has cleared the finalizers it started with.)"""
    from multiprocessing import util
    util.Finalize(s, s._stop_at_exit, exitpriority=-100)  # (after its own children are joined)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
