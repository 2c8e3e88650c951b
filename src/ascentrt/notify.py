"""Notifies: a wait-until-recorded signal between streams, reset by the wait that consumes it."""

from __future__ import annotations

import collections
import itertools

from .device import Device, register_handle_type, resolve_device
from .engine import ENGINE, Hooks
from .errors import ErrorCode, InvalidHandleError, StreamStateError
from .stream import Stream, resolve_stream
from .handles import Handle

_ids = itertools.count(1)


class Notify(Handle):
    """record() sets it; wait_and_reset() blocks a stream until it is set, then clears it."""

    handle_kind = "notify"

    def __init__(self, device: Device | int | None = None) -> None:
        """A notify of `device`; 207009 where its model holds no more (a preset's max_notifies)."""
        self.device = resolve_device(device)
        limit = self.device._backend.properties().max_notifies
        if limit:  # a modelled device holds a bounded number
            live = self.device._notifies
            with ENGINE.lock:  # (the count and the entry at once: other threads create them too)
                if len(live) >= limit:
                    raise StreamStateError(f"device {self.device.id} already has {limit} notifies, "
                                           f"the most its model allows: destroy one first",
                                           code=ErrorCode.RT_NO_NOTIFY_RESOURCE)
                live.add(self)
        self.id = next(_ids)
        self._set = False
        self._set_ns = 0  # when the record that set it ran (a simulated device: its latency)
        self._waiters: collections.deque[Stream] = collections.deque()  # streams blocked on it (engine-owned)
        self._destroyed = False

    def _check_alive(self) -> None:
        if self._destroyed:
            raise InvalidHandleError(f"notify {self.id} was destroyed")

    def record(self, stream: Stream | None = None) -> None:
        """Set the notify once `stream` reaches this point."""
        resolve_stream(stream).record_notify(self)

    def wait_and_reset(self, stream: Stream | None = None, timeout: float | None = None) -> None:
        """Block `stream` until the notify is set, then reset it; `timeout` seconds fails the wait."""
        resolve_stream(stream).wait_notify(self, timeout)

    def reset(self) -> None:
        """Clear a record no wait has consumed yet (CANN's aclrtNotifyBatchReset, one notify)."""
        self._check_alive()
        with ENGINE.lock:
            was_set, self._set = self._set, False
        if was_set and Hooks.sanitizer is not None:
            Hooks.sanitizer.notify_reset(self)

    def destroy(self) -> None:
        """Release the notify; twice raises InvalidHandleError."""
        self._check_alive()
        self._destroyed = True
        self.device._notifies.discard(self)

    close = destroy

    def __repr__(self) -> str:
        return f"Notify(id={self.id}, device={self.device.id})"


register_handle_type("notify", Notify)


def record_notify(notify: Notify, stream: Stream | None = None) -> None:
    """Set `notify` once `stream` reaches this point (CANN's aclrtRecordNotify)."""
    resolve_stream(stream).record_notify(notify)


def wait_and_reset_notify(notify: Notify, stream: Stream | None = None, timeout: float | None = None) -> None:
    """Block `stream` until `notify` is set, then reset it (CANN's aclrtWaitAndResetNotify)."""
    resolve_stream(stream).wait_notify(notify, timeout)
