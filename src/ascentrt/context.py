"""Contexts: a device plus a default stream and the streams made in it, current per host thread.

Each device has one primary context, shared by every thread and kept alive by a use count
(CANN's aclrtSetDevice / aclrtResetDevice); explicit contexts (aclrtCreateContext) have their
own default stream. Releasing a device's primary context to zero destroys every context of
that device and resets the device (its streams and its memory).
"""

from __future__ import annotations

import itertools
import threading

from .handles import Handle
from . import interrupts
from . import forksafe
from .device import Device, resolve_device, set_device
from .engine import ENGINE
from .engine.scheduler import teardown_budget
from .engine.sync import synchronize_streams, warn_discarded
from .errors import AscentError, AscentTimeoutError, DeadlockError, ErrorCode, InvalidArgumentError, InvalidHandleError
from .validate import check_flag

_ids = itertools.count(1)


class _ThreadContext(threading.local):
    """This host thread's current context (a class default: reading it unset raises nothing)."""

    context: "Context | None" = None


_current = _ThreadContext()
_lock = forksafe.lock()
_primary: dict[int, "Context"] = {}     # device id -> its live primary context
_uses: dict[int, int] = {}              # device id -> primary context use count
_contexts: dict[int, list] = {}         # device id -> every live context of the device
DRAIN_S = 2.0   # how long a teardown (a device release, a context or stream destroy) waits for stuck work


class Context(Handle):
    """A device and a default stream; streams made through it are destroyed with it."""

    def __init__(self, device=None, *, _primary: bool = False):
        self.device = resolve_device(device)
        self.id = next(_ids)
        self.primary = _primary
        self.destroyed = False
        self._streams: list = []
        self._default = self.device.default_stream if _primary else self.device.create_stream(0)
        with _lock:
            _contexts.setdefault(self.device.id, []).append(self)

    def _check_alive(self) -> None:
        if self.destroyed:
            raise InvalidHandleError(f"context {self.id} was destroyed", code=ErrorCode.RT_CONTEXT_NULL)

    @property
    def default_stream(self):
        """The context's default stream (the device's own one for the primary context)."""
        self._check_alive()
        return self._default

    def create_stream(self, priority: int = 0, *, stop_on_failure: bool = False):
        """A new stream on the context's device, destroyed when the context is."""
        self._check_alive()
        stream = self.device.create_stream(priority, stop_on_failure=stop_on_failure)
        self._streams = [s for s in self._streams if s._refuse != "destroyed"]
        self._streams.append(stream)
        stream._context = self  # (owns() in O(1): the facade asks it on every stream call)
        return stream

    def owns(self, stream) -> bool:
        """Whether `stream` is this context's default stream or was made through it."""
        return stream is self._default or getattr(stream, "_context", None) is self

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for the work of the context's device (as CANN's aclrtSynchronizeDevice)."""
        self._check_alive()
        self.device.synchronize(timeout)

    def destroy(self) -> None:
        """Destroy the context's streams, waiting for their work as long as it can finish (stuck
        work is discarded); the primary one cannot be."""
        if self.primary:
            raise InvalidArgumentError("a primary context is released with release_primary(), "
                                       "not destroyed")
        self._check_alive()
        self._teardown(wait=True)

    close = destroy

    def _teardown(self, wait: bool, what: str = "") -> None:
        """Destroy the context and its streams (`what` did it: warnings name it)."""
        self.destroyed = True
        with _lock:
            peers = _contexts.get(self.device.id, [])
            if self in peers:
                peers.remove(self)
        owned = self._owned_streams()
        try:
            if wait:
                settle(owned)
                # Then refuse more, and let what other threads queued meanwhile run: a launch
                # that returned without error runs, never dropped as "could not finish".
                closed = []
                for s in owned:
                    try:
                        s._close()
                        closed.append(s)
                    except InvalidHandleError:
                        pass  # destroyed (or being destroyed) by another thread
                settle(closed)
        finally:  # (a Ctrl-C while it waits: the context is gone, so are its streams)
            dropped = {}
            for s in owned:
                try:
                    dropped[s.id] = s.destroy(force=True)
                except InvalidHandleError:
                    pass  # destroyed concurrently
            warn_discarded(what or f"destroying context {self.id}", dropped)
        if _current.context is self:
            _current.context = None

    def _owned_streams(self) -> list:
        """The live streams this context destroys with itself."""
        owned = list(self._streams) + ([] if self.primary else [self._default])
        return [s for s in owned if s._refuse != "destroyed"]

    def __repr__(self) -> str:
        kind = "primary" if self.primary else "explicit"
        return f"Context(id={self.id}, device={self.device.id}, {kind})"


def current_context() -> Context | None:
    """This host thread's current context, or None (new threads have none)."""
    ctx = _current.context
    if ctx is not None and ctx.destroyed:
        _current.context = ctx = None
    return ctx


def set_current_context(ctx: Context | None) -> None:
    """Make `ctx` this thread's current context (and its device the current device)."""
    if ctx is not None:
        if not isinstance(ctx, Context):
            raise InvalidArgumentError(f"set_current_context takes a Context, got {type(ctx).__name__}")
        ctx._check_alive()
        set_device(ctx.device.id)
    _current.context = ctx


def create_context(device) -> Context:
    """A new explicit context on `device`, made current for this thread (aclrtCreateContext)."""
    ctx = Context(device)
    set_current_context(ctx)
    return ctx


def retain_primary(device) -> Context:
    """Count one more use of `device`'s primary context (creating it) and make it current."""
    dev = device if isinstance(device, Device) else Device(device)
    with _lock:
        ctx = _primary.get(dev.id)
        _uses[dev.id] = _uses.get(dev.id, 0) + 1
    if ctx is None:
        ctx = Context(dev, _primary=True)
        with _lock:
            _primary[dev.id] = ctx
    set_current_context(ctx)
    return ctx


def primary_uses(device_id: int) -> int:
    """How many unreleased retain_primary calls device `device_id` has."""
    return _uses.get(device_id, 0)


def release_primary(device, *, force: bool = False) -> int:
    """Undo one retain_primary (all of them with force); returns the uses left.

    At zero every context of the device is destroyed and the device reset (pending work gets
    a short grace period, then is discarded). Raises InvalidArgumentError (507007) when the
    device has no use left to release.
    """
    force = check_flag(force, "force")
    dev = device if isinstance(device, Device) else Device(device)
    with _lock:
        uses = _uses.get(dev.id, 0)
        if uses <= 0:
            raise InvalidArgumentError(f"device {dev.id} is not set (nothing to reset)",
                                       code=ErrorCode.RT_CONTEXT_RELEASE_ERROR)
        uses = 0 if force else uses - 1
        _uses[dev.id] = uses
        if uses:
            return uses
        _primary.pop(dev.id, None)
        doomed = list(_contexts.get(dev.id, []))
    try:
        with teardown_budget():
            dev.synchronize(DRAIN_S)
    except Exception as exc:
        if interrupts.raised_by_handler(exc):  # (the program's own, as a Ctrl-C here is: it comes out,
            raise                   # once the release below is whole)
        # failed or stuck work is discarded by the reset below
    finally:  # (a Ctrl-C or the program's handler only cut the grace short)
        _reset(dev, doomed)
    return 0


def _reset(dev: Device, doomed: list) -> None:
    """The end of a device's last release: its contexts destroyed without waiting and the
    device reset, each whatever another raised (the first error comes out once all ran)."""
    first: BaseException | None = None
    for ctx in doomed:
        try:
            ctx._teardown(wait=False, what=f"device {dev.id} reset")
        except BaseException as exc:
            first = first or exc
    try:
        dev.reset()
    except BaseException as exc:
        first = first or exc
    if first is not None:
        raise first


# A signal must not cut a last release between its count and its reset (the device would be
# counted free with its contexts and memory alive, and nothing could release it again): it
# comes once the release is whole. The drain's wait inside stays one a signal may end.
interrupts.protect(release_primary, _reset)


def wait_while_it_can_finish(stream, wait) -> AscentError | None:
    """Call wait(DRAIN_S) (a synchronize or a destroy of `stream`) again and again until it
    returns (None), or until the stream is stuck: waiting, timed or not, for a record that
    nothing queued will make (then the timeout error of the last call), or in a cycle (a
    DeadlockError, whichever of the two the wait happened to raise first)."""
    while True:
        try:
            with teardown_budget():
                wait(DRAIN_S)
            return None
        except (AscentTimeoutError, DeadlockError) as exc:
            if interrupts.raised_by_handler(exc):  # (the program's own handler raised one: it comes out)
                raise
            with ENGINE.lock:
                found = ENGINE.diagnose([stream], timed=True)
            if found is None:
                continue
            if found[0] == "cycle" and not isinstance(exc, DeadlockError):
                return DeadlockError(found[1])
            return exc


def settle(streams) -> None:
    """Wait for the work of `streams` as long as it can finish (a destroy loses nothing that
    would still run); a stuck stream is left to be discarded."""
    for s in streams:
        try:
            wait_while_it_can_finish(s, lambda t, s=s: synchronize_streams([s], t, "context destroy"))
        except Exception as exc:
            if interrupts.raised_by_handler(exc):  # (the program's own, as a Ctrl-C here is: it comes out)
                raise
            # a destroy is not where task errors are reported


def drain(contexts) -> None:
    """Give the pending work of these contexts' streams DRAIN_S seconds in all (not per stream:
    stuck streams are then discarded together, not one after the other)."""
    streams = [s for ctx in contexts for s in ctx._owned_streams()]
    if not streams:
        return
    clock = streams[0]._dq.backend.now_ns
    deadline = clock() + int(DRAIN_S * 1e9)
    for s in streams:
        left = (deadline - clock()) / 1e9
        if left <= 0:
            break
        try:
            with teardown_budget():
                synchronize_streams([s], left, "context teardown")
        except Exception as exc:
            if interrupts.raised_by_handler(exc):  # (the program's own, as a Ctrl-C here is: it comes out)
                raise
            # teardown is not where task errors or stuck waits are reported


def is_default_stream(stream) -> bool:
    """Whether `stream` is the default stream of a device or of a live context."""
    if stream._internal:
        return True
    with _lock:
        return any(c._default is stream for cs in _contexts.values() for c in cs)
