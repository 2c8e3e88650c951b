"""Devices: their backends, properties and memory, and the per-thread current device.

The handle types made by a device (Stream, Event, Notify) live in modules above this one;
they register themselves here (register_handle_type) so that device.py never imports them.
"""

from __future__ import annotations

import atexit
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, cast

import numpy as np

from . import forksafe
from . import config
from .backends import PresetError, load_preset, make_backend
from .backends.presets import variant_fields
from .backends.sim import TIMELINE, defer_in_step
from .interrupts import add_deferrer, deliver, install as install_interrupts, protect, raised_by_handler
from .engine import ENGINE, PRIORITY_LEVELS, DeviceQueues, check_sync_allowed, current_task
from .engine.scheduler import ordered_before
from .engine.sync import synchronize_streams, warn_discarded
from .engine.task import COMPUTE, COPY_ENGINE, HOST_EXECUTOR
from .errors import (DeadlockError, ErrorCode, InvalidArgumentError, InvalidDeviceError,
                     OutOfMemoryError, StreamStateError, warn_at_caller)
from .memory import leaks, links
from .memory.registry import REGISTRY
from .memory.allocator import DeviceAllocator
from .memory.buffer import DeviceBuffer, exported_buffers
from .validate import check_timeout


@dataclass(frozen=True)
class DeviceProperties:
    """What a device is: its name, backend, memory, executors and stream priority range."""

    id: int
    name: str
    backend: str
    total_memory: int
    compute_units: int
    copy_engines: int
    host_func_threads: int
    stream_priority_range: tuple[int, int]  # (lowest priority, highest priority), smaller = higher
    preset: str = ""                        # the hardware model of a sim device
    preset_source: str = ""                 # ... where not the stock one: its file, fields varied
    # (H2D, D2H, D2D) engines where each direction has its own (sim); () where any engine
    # takes any copy (cpu)
    copy_engines_per_direction: tuple[int, ...] = ()


_devices: list["Device"] | None = None
_devices_lock = forksafe.lock()


class _ThreadDevice(threading.local):
    """This host thread's current device (a class default: reading it unset raises nothing)."""

    device: "Device | None" = None


_current = _ThreadDevice()
_handle_types: dict[str, type] = {}  # "stream" / "event" / "notify" -> class, registered by their modules
# Those classes live above this module (they import it), so the hints here name them Any.
_table_observers: list[Callable[[list["Device"]], None]] = []  # told once the devices exist


def register_handle_type(kind: str, cls: type) -> None:
    """Called by stream.py, event.py and notify.py: the class a device makes for `kind`."""
    _handle_types[kind] = cls


def when_devices_exist(callback: Callable[[list["Device"]], None]) -> None:
    """Call `callback(devices)` once this process's devices exist (at once if they do already)."""
    _table_observers.append(callback)
    if _devices is not None:
        callback(_devices)


def _table() -> list["Device"]:
    global _devices
    if _devices is None:
        with _devices_lock:
            if _devices is not None:  # (made by another thread meanwhile)
                return _devices  # type: ignore[unreachable]
            config.get("ASCENTRT_PURE_PYTHON")  # (read at import, where a bad value is not refused)
            count = config.get("ASCENTRT_DEVICES")
            config.check_all()  # (every other setting too: refused before any work is queued)
            ENGINE.sites = config.get("ASCENTRT_CALL_SITES")
            table = []
            for i in range(count):
                dev = object.__new__(Device)
                dev._init(i)
                table.append(dev)
            _devices = table
        for callback in _table_observers:
            callback(table)
    return _devices


def _warn_cpu_only_settings(preset: str) -> None:
    """Warn (once per process: device 0 is made once) about executor settings a sim device ignores."""
    ignored = [env for env in config.CPU_ONLY_SETTINGS if config.is_set(env)]
    if ignored:
        warn_at_caller(f"ascentrt: {', '.join(ignored)} ignored on sim: the preset {preset!r} gives the "
                       f"executors (vary them with ascentrt whatif --vary or ASCENTRT_SIM_VARY)", UserWarning)


def device_count() -> int:
    """How many devices there are (ASCENTRT_DEVICES, default 1)."""
    return len(_table())


def more_devices_hint(count: int) -> str:
    """What a refused device id adds: how many devices there are and how to have more."""
    return (f"this process has {count} device(s): set ASCENTRT_DEVICES=N before its first use "
            f"of ascentrt for N of them")


def _check_id(device_id: object) -> int:
    count = device_count()
    if type(device_id) is not int or not 0 <= device_id < count:
        hint = f" ({more_devices_hint(count)})" if type(device_id) is int and device_id >= count else ""
        raise InvalidDeviceError(f"device id must be an int in [0, {count}), got {device_id!r}{hint}")
    return device_id


def set_device(device_id: int) -> "Device":
    """Make `device_id` this host thread's current device (as CANN's aclrtSetDevice); returns it."""
    dev = _table()[_check_id(device_id)]
    _current.device = dev
    # (a thread that chose a device uses the runtime: on sim, a wait of another thread's that
    # only it can end passes at the real pace while it lives, as for one that made a call)
    TIMELINE.note_thread(threading.current_thread())
    return dev


def current_device() -> "Device":
    """This host thread's current device (device 0 until set_device is called)."""
    dev = _current.device
    if dev is None:  # kept as the thread's own from here on: the hot paths read it inline
        dev = _current.device = _table()[0]
    return dev


def resolve_device(device: Device | int | None = None) -> "Device":
    """None: this thread's current device; an int: Device(i); a Device: itself. Raises on bad ids."""
    if device is None:
        return current_device()
    return device if isinstance(device, Device) else Device(device)


def _busy_streams() -> list:
    """Every stream with work in flight, on any device that exists."""
    busy = []
    for dq in ENGINE.devices:  # a loop: an idle device (the common case) costs one test
        if dq.active:
            busy += list(dq.active)  # a snapshot: executors change the set meanwhile
    return busy


class Device:
    """One device: `Device(i)` returns the same object each time for the same id."""

    def __new__(cls, device_id: int = 0) -> "Device":
        return _table()[_check_id(device_id)]

    def _init(self, device_id: int) -> None:
        self.id = device_id
        capacity = config.get("ASCENTRT_DEVICE_MEMORY")
        sizes = [0, 0, 0]
        sizes[COMPUTE] = config.get("ASCENTRT_COMPUTE_UNITS")
        sizes[COPY_ENGINE] = config.get("ASCENTRT_COPY_ENGINES")
        sizes[HOST_EXECUTOR] = config.get("ASCENTRT_HOST_FUNC_THREADS")
        executors = cast("tuple[int, int, int]", tuple(sizes))  # one size per executor class
        kind = config.get("ASCENTRT_BACKEND")
        if kind == "sim":  # the preset gives memory and executors, unless memory is set
            setting = "ASCENTRT_SIM_PRESET"  # (the error names the setting it came from)
            try:
                preset = load_preset(config.get(setting))
                setting = "ASCENTRT_SIM_VARY"
                changes = variant_fields(config.get(setting))
                if changes:
                    preset = preset.varied(changes)
            except PresetError as exc:
                raise InvalidArgumentError(f"{setting}: {exc}") from None
            # (the preset's memory unless the setting gives one; a what-if variant's wins)
            given = config.is_set("ASCENTRT_DEVICE_MEMORY")
            if given and "memory_bytes" in changes:
                given = False
                if device_id == 0:
                    warn_at_caller("ascentrt: ASCENTRT_DEVICE_MEMORY ignored: the what-if variant "
                                   "sets memory_bytes", UserWarning)
            capacity = capacity if given else 0
            if device_id == 0:
                _warn_cpu_only_settings(preset.name)
            self._backend = backend = make_backend(kind, f"{preset.name}-sim{device_id}", capacity,
                                                   executors, preset)
            add_deferrer(defer_in_step)  # (a signal waits for the step the main thread runs)
            TIMELINE.deliver = deliver   # (and is delivered once it is whole)
        else:
            self._backend = backend = make_backend(kind, f"ascentrt-{kind}{device_id}", capacity,
                                                   executors)
            install_interrupts()  # (the main thread's submissions are protected: see interrupts)
        props = backend.properties()
        capacity = props.memory_bytes
        try:
            handle = backend.alloc(capacity)
        except (OSError, OverflowError, MemoryError) as exc:
            raise OutOfMemoryError(f"device {device_id}: cannot reserve ASCENTRT_DEVICE_MEMORY="
                                   f"{capacity} bytes on this machine ({exc}); set a smaller size",
                                   code=ErrorCode.RT_MEMORY_ALLOCATION, device=device_id) from None
        mem = np.frombuffer(backend.host_view(handle), dtype=np.uint8)
        self._memory = DeviceAllocator(self, mem, handle.addr, capacity,
                                       decommit=lambda off, n: backend.free(handle, off, n))
        self._dq = DeviceQueues(ENGINE, device_id, backend)
        # word address -> (value, virtual ns) of the last value write to it (virtual devices)
        self._value_written: dict[int, tuple[int, int]] = {}
        compute, copy, host = props.executors
        self.properties = DeviceProperties(
            id=device_id, name=props.name, backend=props.backend, total_memory=props.memory_bytes,
            compute_units=compute, copy_engines=copy, host_func_threads=host,
            stream_priority_range=(PRIORITY_LEVELS - 1, 0), preset=props.preset,
            preset_source=props.preset_source,
            copy_engines_per_direction=props.copy_engines_per_direction)
        self._default_stream: Any = None  # a Stream
        self._events: weakref.WeakSet[object] = weakref.WeakSet()  # live events, counted where the model caps them
        self._notifies: weakref.WeakSet[object] = weakref.WeakSet()  # live notifies, likewise
        self._peers: set[int] = set()  # ids of the devices whose memory this one may access
        self._lock = forksafe.lock()
        self._dq.detached = _handle_types["stream"](self, PRIORITY_LEVELS - 1, _internal=True)

    @property
    def default_stream(self) -> Any:
        """The device's default stream (created on first use)."""
        if self._default_stream is None:
            with self._lock:
                if self._default_stream is None:
                    self._default_stream = _handle_types["stream"](self, 0, _internal=True)
        return self._default_stream

    def now_ns(self) -> int:
        """The device clock in ns: the host's real clock on cpu, the virtual time on sim (the
        host's time as of its latest call)."""
        return self._backend.now_ns()

    def create_stream(self, priority: int = 0, *, stop_on_failure: bool = False) -> Any:
        """A new stream on this device; priority 0 (highest) .. 7 (lowest)."""
        return _handle_types["stream"](self, priority, stop_on_failure=stop_on_failure)

    def create_event(self, timing: bool = False) -> Any:
        """A new event; `timing=True` lets elapsed_time measure between two records."""
        return _handle_types["event"](self, timing=timing)

    def internal_event(self) -> Any:
        """An event the runtime records for itself (a wait of its own): not one of the events a
        modelled device lets the program hold, so a program at that limit still gets its copy."""
        return _handle_types["event"](self, limited=False)

    def create_notify(self) -> Any:
        """A new notify (a wait-until-recorded signal between streams)."""
        return _handle_types["notify"](self)

    def malloc(self, nbytes: int, stream: Any = None) -> DeviceBuffer:
        """Allocate device memory on this device (see ascentrt.malloc)."""
        return self._memory.malloc(nbytes, stream)

    def mem_info(self) -> tuple[int, int]:
        """(free bytes, total bytes) of this device's memory: free is what malloc can still
        have, memory no pool holds plus the default pool's cached blocks (an explicit MemPool's
        reservation is not free to malloc)."""
        memory = self._memory
        pool = memory.pool
        cached = 0 if pool is None else pool.free_bytes()
        return memory.chunks.unreserved_bytes() + cached, memory.capacity

    def _peer(self, other: Device | int) -> "Device":
        other = resolve_device(other)
        if other is self:
            raise InvalidArgumentError(f"device {self.id} is not its own peer",
                                       code=ErrorCode.INVALID_PARAM)
        return other

    def can_access_peer(self, other: Device | int) -> bool:
        """Whether this device can reach `other`'s memory directly once peer access is enabled
        (every pair of this process's devices can: their memory is this machine's)."""
        self._peer(other)
        return True

    def enable_peer_access(self, other: Device | int) -> None:
        """Let this device copy to and from `other`'s memory (one direction, as CANN's
        aclrtDeviceEnablePeerAccess; enabling twice is harmless)."""
        self._peers.add(self._peer(other).id)

    def disable_peer_access(self, other: Device | int) -> None:
        """Undo enable_peer_access (copies already queued still run)."""
        self._peers.discard(self._peer(other).id)

    def peer_access_enabled(self, other: Device | int) -> bool:
        """Whether enable_peer_access(other) is in force on this device."""
        return self._peer(other).id in self._peers

    def streams(self) -> list[Any]:
        """The live streams of this device (the default stream included once created)."""
        with ENGINE.lock:
            live = self._dq.streams.values()
            return [s for s in live if not s._internal or s is self._default_stream]

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for all work on this device; raise the first task error of any of its streams."""
        timeout = check_timeout(timeout)
        check_sync_allowed(f"device {self.id} synchronize")
        with ENGINE.lock:
            # Non-blocking host functions reach the detached stream only when their stream gets
            # to them: wait for it last, once the streams that feed it are done.
            detached = self._dq.detached
            streams = [s for s in self._dq.streams.values() if s is not detached] + [detached]
        synchronize_streams(streams, timeout, f"device {self.id} synchronize")
        self._memory.settle()  # (a release threshold applies at a synchronize)

    def reset(self) -> None:
        """Discard all pending work, destroy every stream and free every buffer of this device
        (buffers with live DLPack exports too: a RuntimeWarning says how many)."""
        exported = exported_buffers(self._memory.live_buffers())
        if exported:
            warnings.warn(f"ascentrt: device {self.id} reset frees {len(exported)} buffer(s) with "
                          f"live DLPack exports: the arrays other libraries hold now point at "
                          f"memory the device hands out again", RuntimeWarning, stacklevel=2)
        with ENGINE.lock:
            live = self._dq.streams.values()
            streams = [s for s in live if not s._internal]
        dropped = {s.id: s.destroy(force=True) for s in streams}
        for s in (self._default_stream, self._dq.detached):
            if s is not None:
                with ENGINE.lock:
                    s._errors.clear()
                    dropped[s.id] = ENGINE._discard(s, f"device {self.id} reset")
                    s._refuse = s._failure = None   # a STOP-mode failure does not outlive reset
                    s._stop_on_failure = False
        warn_discarded(f"device {self.id} reset", dropped)
        self._memory.reset()
        self._peers.clear()  # as a reset device: peer access is enabled again after it
        self._value_written.clear()  # (its words are gone)

    def __repr__(self) -> str:
        return f"Device({self.id})"

    # A device is its number, the same in every process (as torch.device): a copy is the
    # device itself, and a pickle names the number (README: Copying and pickling).
    def __copy__(self) -> "Device":
        return self

    def __deepcopy__(self, memo: dict) -> "Device":
        return self

    def __reduce__(self):
        return Device, (self.id,)


def synchronize(timeout: float | None = None) -> None:
    """Wait for all work on the current device (see Device.synchronize)."""
    current_device().synchronize(timeout)


def default_stream() -> Any:
    """The current device's default stream."""
    return current_device().default_stream


def _report_leaks_at_exit() -> None:
    """At exit: the device and pinned host buffers the program never freed (a LeakWarning at
    the process's end, leaving out those its teardown after this handler frees)."""
    if _devices is None:
        return
    live = [b for d in _devices for b in d._memory.live_buffers()]
    live += [a for a in REGISTRY.live() if a.kind == "host"]
    if live:
        leaks.report_at_process_end(live)


def _host_backend():
    """The backend that allocates pinned host memory (device 0's)."""
    return _table()[0]._backend


def _wait_reached(waits: tuple) -> bool:
    """Block until each (stream, position) of `waits` is done: the work that frees still wait
    for, which an allocation refused for lack of memory waits out once. False at once inside
    a task (its own stream may be among them), during a capture (it may not wait), and when
    the work can never finish (a deadlock: the allocation then reports the memory it lacks)."""
    if current_task() is not None:
        return False
    try:
        check_sync_allowed("an allocation that waits for memory freed after queued work")
        for stream, position in waits:
            ENGINE.wait_completed(stream, None, f"an allocation that waits for memory freed "
                                  f"after stream {stream.id}'s work",
                                  behind=max(0, stream._submitted - position))
    except (DeadlockError, StreamStateError) as exc:  # (a capture's refusal is a StreamStateError)
        if raised_by_handler(exc):  # (the program's own handler raised one: it comes out)
            raise
        return False
    return True


atexit.register(_report_leaks_at_exit)
links.register(resolve_device=resolve_device, current_device=current_device, current_task=current_task,
               busy_streams=_busy_streams, host_backend=_host_backend,
               active_sets=ENGINE.active_sets, thread=_current, wait_reached=_wait_reached,
               ordered_before=ordered_before)


protect(Device.malloc)  # (a Ctrl-C as the new buffer is handed on would lose it)
