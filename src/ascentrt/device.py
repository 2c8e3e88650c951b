"""Devices: the virtual CPU devices, their properties, the per-thread current device."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from . import config
from .backends import CpuBackend
from .engine import ENGINE, PRIORITY_LEVELS, DeviceQueues
from .engine.task import COMPUTE, COPY_ENGINE, HOST
from .errors import InvalidDeviceError
from .memory.allocator import DeviceAllocator
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


_devices: list["Device"] | None = None
_devices_lock = threading.Lock()
_current = threading.local()


def _table() -> list["Device"]:
    global _devices
    if _devices is None:
        with _devices_lock:
            if _devices is None:
                count = config.get("ASCENTRT_DEVICES")
                table = []
                for i in range(count):
                    dev = object.__new__(Device)
                    dev._init(i)
                    table.append(dev)
                _devices = table
    return _devices


def device_count() -> int:
    """How many devices there are (ASCENTRT_DEVICES, default 1)."""
    return len(_table())


def _check_id(device_id) -> int:
    count = device_count()
    if type(device_id) is not int or not 0 <= device_id < count:
        raise InvalidDeviceError(f"device id must be an int in [0, {count}), got {device_id!r}")
    return device_id


def set_device(device_id: int) -> "Device":
    """Make `device_id` this host thread's current device (as CANN's aclrtSetDevice); returns it."""
    dev = _table()[_check_id(device_id)]
    _current.device = dev
    return dev


def current_device() -> "Device":
    """This host thread's current device (device 0 until set_device is called)."""
    dev = getattr(_current, "device", None)
    return dev if dev is not None else _table()[0]


def resolve_device(device=None) -> "Device":
    """None: this thread's current device; an int: Device(i); a Device: itself. Raises on bad ids."""
    if device is None:
        return current_device()
    return device if isinstance(device, Device) else Device(device)


def all_device_queues():
    """The executor queues of every device that exists (for deadlock diagnosis)."""
    return [d._dq for d in (_devices or [])]


class Device:
    """One device: `Device(i)` returns the same object each time for the same id."""

    def __new__(cls, device_id: int = 0) -> "Device":
        return _table()[_check_id(device_id)]

    def _init(self, device_id: int) -> None:
        self.id = device_id
        self._backend = CpuBackend()
        capacity = config.get("ASCENTRT_DEVICE_MEMORY")
        mem, base = self._backend.reserve(capacity)
        self._memory = DeviceAllocator(self, mem, base, capacity)
        sizes = [0, 0, 0]
        sizes[COMPUTE] = config.get("ASCENTRT_COMPUTE_UNITS")
        sizes[COPY_ENGINE] = config.get("ASCENTRT_COPY_ENGINES")
        sizes[HOST] = config.get("ASCENTRT_HOST_FUNC_THREADS")
        self._dq = DeviceQueues(ENGINE, device_id, self._backend, tuple(sizes))
        self.properties = DeviceProperties(
            id=device_id, name=f"ascentrt-cpu{device_id}", backend=self._backend.name,
            total_memory=capacity, compute_units=sizes[COMPUTE], copy_engines=sizes[COPY_ENGINE],
            host_func_threads=sizes[HOST], stream_priority_range=(PRIORITY_LEVELS - 1, 0))
        self._default_stream = None
        self._lock = threading.Lock()
        from .stream import Stream
        self._dq.detached = Stream(self, PRIORITY_LEVELS - 1, _internal=True)

    @property
    def default_stream(self):
        """The device's default stream (created on first use)."""
        if self._default_stream is None:
            with self._lock:
                if self._default_stream is None:
                    from .stream import Stream
                    self._default_stream = Stream(self, 0, _internal=True)
        return self._default_stream

    def create_stream(self, priority: int = 0, *, stop_on_failure: bool = False):
        """A new stream on this device; priority 0 (highest) .. 7 (lowest)."""
        from .stream import Stream
        return Stream(self, priority, stop_on_failure=stop_on_failure)

    def create_event(self, timing: bool = False):
        """A new event; `timing=True` lets elapsed_time measure between two records."""
        from .event import Event
        return Event(self, timing=timing)

    def create_notify(self):
        """A new notify (a wait-until-recorded signal between streams)."""
        from .notify import Notify
        return Notify(self)

    def malloc(self, nbytes: int, stream=None):
        """Allocate device memory on this device (see ascentrt.malloc)."""
        return self._memory.malloc(nbytes, stream)

    def mem_info(self) -> tuple[int, int]:
        """(free bytes, total bytes) of this device's memory."""
        return self._memory.capacity - self._memory.used_bytes(), self._memory.capacity

    def streams(self) -> list:
        """The live streams of this device (the default stream included once created)."""
        with ENGINE.lock:
            return [s for s in self._dq.streams.values() if not s._internal or s is self._default_stream]

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait for all work on this device; raise the first task error of any of its streams."""
        from .stream import synchronize_streams
        from .graph.capture import check_unsafe
        timeout = check_timeout(timeout)
        check_unsafe(f"device {self.id} synchronize")
        with ENGINE.lock:
            # Non-blocking host functions reach the detached stream only when their stream gets
            # to them: wait for it last, once the streams that feed it are done.
            detached = self._dq.detached
            streams = [s for s in self._dq.streams.values() if s is not detached] + [detached]
        synchronize_streams(streams, timeout, f"device {self.id} synchronize")

    def reset(self) -> None:
        """Discard all pending work, destroy every stream and free every buffer of this device."""
        with ENGINE.lock:
            streams = [s for s in self._dq.streams.values() if not s._internal]
        for s in streams:
            s.destroy(force=True)
        for s in (self._default_stream, self._dq.detached):
            if s is not None:
                with ENGINE.lock:
                    ENGINE._discard(s)
                    s._errors.clear()
                    s._refuse = s._failure = None   # a STOP-mode failure does not outlive reset
                    s._stop_on_failure = False
        self._memory.reset()

    def __repr__(self) -> str:
        return f"Device({self.id})"

    def __reduce__(self):
        return Device, (self.id,)
