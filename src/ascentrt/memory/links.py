"""What the memory layer needs from the runtime above it, registered by that runtime when it
is imported (device.py): the memory layer never imports upward (see DESIGN.md, Layers).

Streams reach the memory layer as objects with this protocol: `.device`, `._completed`,
`._submitted`, `._spawned`, `._awaited_positions()`, `._order_after(event)`; devices with `._memory`,
`._backend`, `.internal_event()`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..backends.base import Backend


def _unset(*args: Any) -> Any:
    raise RuntimeError("ascentrt.memory used before the runtime registered with it")


class Links:
    """The runtime's callbacks: each is replaced by register()."""

    # Devices, streams and tasks are objects of the layers above: Any here.
    resolve_device: Callable[[Any], Any] = staticmethod(_unset)  # None | int | Device -> Device (raises on bad ids)
    current_device: Callable[[], Any] = staticmethod(_unset)  # () -> this thread's current Device
    stream_type: type[Any] = type(None)     # the Stream class (nothing is one until registered)
    current_task: Callable[[], Any] = staticmethod(lambda: None)  # the task the calling executor thread runs
    busy_streams: Callable[[], list] = staticmethod(lambda: [])  # every stream with work in flight, any device
    host_backend: Callable[[], Backend] = staticmethod(_unset)  # the backend that allocates pinned host memory
    # Each device's set of streams with work in flight (the engine's own sets, in one list that
    # grows as devices are made): a stream-less free whose sets are all empty waits for nothing.
    active_sets: list[set] = []
    thread: Any = None  # the runtime's thread-local holder of `.device` (None until set_device or current_device)
    # (stream, position) pairs -> True once each stream's work up to its position is done;
    # False at once where the calling thread may not wait for them (see device._wait_reached)
    wait_reached: Callable[[tuple], bool] = staticmethod(lambda waits: False)
    # (running task, (stream, position) pairs) -> whether the task comes before those
    # positions through the event waits queued before them (see engine.ordered_before)
    ordered_before: Callable[[Any, tuple], bool] = staticmethod(lambda task, waits: False)
    # (device or host buffer) -> a new allocation of its size and kind with its bytes (deepcopy)
    copy_allocation: Callable[[Any], Any] = staticmethod(_unset)


def register(**callbacks: Any) -> None:
    """Set the runtime's callbacks, classes and shared objects (names as the attributes of Links)."""
    for name, fn in callbacks.items():
        if not hasattr(Links, name):
            raise AttributeError(f"memory.links has no slot {name!r}")
        setattr(Links, name, staticmethod(fn) if callable(fn) and not isinstance(fn, type) else fn)
