"""Profiling sessions: `with ascentrt.profile(path)`, start()/stop(), and ASCENTRT_PROFILE."""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

from ..errors import AscentError, ErrorCode, InvalidArgumentError
from .profile import Profile
from .recorder import Recorder

_lock = threading.Lock()
_active: "Session | None" = None
PROGRESS_FILE = "progress.json"


def active_recorder():
    """The recorder of the running session, or None (the cheap check ranges and marks make)."""
    s = _active
    return s._recorder if s is not None else None


class Session:
    """One profiling run; `with` starts and stops it, and the folder is written at the stop."""

    def __init__(self, path: str | os.PathLike | None = None):
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentError(f"profile path must be a folder path or None, got "
                                       f"{type(path).__name__}")
        self.path: str | None = None if path is None else os.fspath(path)
        self.profile: Profile | None = None
        self._recorder: Recorder | None = None
        self._progress_stop: threading.Event | None = None

    @property
    def running(self) -> bool:
        """Whether this session is recording now."""
        return self._recorder is not None

    def start(self) -> "Session":
        """Start recording; raises AscentError (100002) if a profile is already running."""
        global _active
        with _lock:
            if _active is not None:
                raise AscentError("a profile is already running; stop it before starting another",
                                  code=ErrorCode.REPEAT_INITIALIZE)
            if self.profile is not None:
                raise AscentError("this profile session already ran; create a new one",
                                  code=ErrorCode.REPEAT_INITIALIZE)
            if self.path is not None:
                try:
                    os.makedirs(self.path, exist_ok=True)
                except OSError as exc:
                    raise InvalidArgumentError(f"cannot create the profile folder {self.path!r}: "
                                               f"{exc.strerror or exc}",
                                               code=ErrorCode.INVALID_FILE) from None
            rec = Recorder()
            rec.start()
            self._recorder = rec
            _active = self
        return self

    def stop(self, write: bool = True) -> Profile:
        """Stop recording, write the folder (when a path was given) and return the Profile."""
        global _active
        with _lock:
            rec = self._recorder
            if rec is None:
                if self.profile is not None:
                    return self.profile
                raise AscentError("this profile session is not running",
                                  code=ErrorCode.UNINITIALIZE)
            rec.stop()
            self._recorder = None
            _active = None
        if self._progress_stop is not None:
            self._progress_stop.set()
            assert self.path is not None  # (only a session with a folder reports progress)
            try:
                os.remove(os.path.join(self.path, PROGRESS_FILE))
            except OSError:
                pass  # never written: the run was shorter than one progress period
        self.profile = rec.finish(consume=True)
        if write and self.path is not None:
            self.profile.save(self.path)
        return self.profile

    def snapshot(self) -> Profile:
        """The profile so far (the session keeps running), or the final one after stop()."""
        rec = self._recorder
        if rec is not None:
            return rec.finish()
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

    def _report_progress(self, every_s: float = 1.0) -> None:
        """Write PROGRESS_FILE into the folder every `every_s` seconds (for `ascentrt prof`)."""
        assert self.path is not None  # (a session with a folder)
        stop = self._progress_stop = threading.Event()
        path = os.path.join(self.path, PROGRESS_FILE)
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


def profile(path: str | os.PathLike | None = None) -> Session:
    """`with ascentrt.profile("out") as prof:` records everything; `prof.diagnose()` after.

    The folder `path` gets trace.json (Perfetto / chrome://tracing), CSV summaries,
    report.html and profile.json (read back with ascentrt.profiler.load). None: nothing written.
    """
    return Session(path)


def start(path: str | os.PathLike | None = None) -> Session:
    """Start a profiling session without `with`; stop it with `stop()`."""
    return Session(path).start()


def stop() -> Profile:
    """Stop the running session (and write its folder); raises AscentError (100001) if none."""
    s = _active
    if s is None:
        raise AscentError("no profile is running", code=ErrorCode.UNINITIALIZE)
    return s.stop()


def start_from_env(path: str) -> Session:
    """Profile the whole program into `path` (ASCENTRT_PROFILE); written when it exits.

    The first process claims the folder (ASCENTRT_PROFILE_PID); processes it starts that
    import ascentrt too write into child-<pid>/ inside it instead of over its profile.
    """
    from .. import config
    owner = config.get("ASCENTRT_PROFILE_PID")
    if owner and owner != str(os.getpid()):
        path = os.path.join(path, f"child-{os.getpid()}")
    else:
        os.environ["ASCENTRT_PROFILE_PID"] = str(os.getpid())
    s = Session(path).start()
    s._report_progress()

    def at_exit():
        if s.running:
            try:
                s.stop()
            except Exception as exc:  # exiting: say what went wrong, in one line
                import sys
                print(f"ascentrt: could not write the profile to {path}: {exc}", file=sys.stderr)

    atexit.register(at_exit)
    return s
