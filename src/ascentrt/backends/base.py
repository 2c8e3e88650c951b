"""The device contract: what a backend gives the layers above (memory handles, operations,
executor queues, signals and a clock), in terms that hold for any device kind.

No numpy and no Stream or Device objects appear here: addresses are ints, memory is a
handle, an operation is a small record, so a simulated device and a CUDA device (through
cuda-python) implement the same ten methods.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

# Operation kinds a backend executes (the engine's task kinds use the same numbers).
# (Final: a compiled module reads them as constants, not from this module's globals)
KERNEL: Final = 0
COPY: Final = 1
FILL: Final = 2
HOST: Final = 3
OP_NAMES = ("kernel", "copy", "fill", "host")
# The host_call a submit makes once its task is queued, while a host thread waits on the device
# (no cost): a simulator's stalled waits look for a deadlock again, at that instant, since the
# queued work (a cycle it completes) changed, not the device's progress.
SUBMITTED = "submitted"


class Op:
    """One operation: `kind`, and the operands that kind reads.

    KERNEL  fn(*args). When `resolve` is set, every kind runs on resolve(args) instead: the
            layer above turns its memory references into what the backend takes (and checks
            they are still valid) at run time.
    COPY    args = (dst, dpitch, src, spitch, width, height): `height` rows of `width` bytes
            between int addresses (a plain copy is one row); `keep` holds the memory alive.
    FILL    args = (dst, value, nbytes): every byte of [dst, dst + nbytes) set to `value`.
    HOST    fn(*args) on a host thread of the device.
    A COPY or FILL with `fn` set is a run of operations of that kind (a graph segment):
    calling fn(*args) executes each of them through the backend.
    """

    __slots__ = ()  # the engine's Task adds the fields; a plain Op is made by make_op()
    kind: int
    fn: Callable[..., Any] | None
    args: tuple
    resolve: Callable[[tuple], Sequence[Any]] | None
    keep: object
    cost: Cost | None   # what it costs on a simulated device: a Cost, or None for the default


class PlainOp(Op):
    """An operation outside any stream (a synchronous copy or fill, a graph node)."""

    __slots__ = ("kind", "fn", "args", "resolve", "keep", "nbytes", "cost")

    def __init__(self, kind: int, fn: Callable[..., Any] | None = None, args: tuple = (),
                 resolve: Callable[[tuple], Sequence[Any]] | None = None, keep: object = None,
                 nbytes: int = 0, cost: Cost | None = None):
        self.kind, self.fn, self.args, self.resolve, self.keep = kind, fn, args, resolve, keep
        self.nbytes, self.cost = nbytes, cost


@dataclass(frozen=True)
class Cost:
    """What a kernel costs on a simulated device: a duration, or work for a roofline model.

    seconds: the duration itself. Otherwise flops and bytes: the kernel takes the longest of
    flops over the compute rate of the units it occupies, bytes over memory bandwidth, and
    link_bytes (read from another device's memory) over the peer link; link_src, an address
    in the memory they are read from (0: not said), names that link (it shares it with the
    peer copies and other reads crossing it).
    block_dim: compute units it occupies (None: all of them), as CANN's blockDim; 0 (the
    runtime's own tasks only: launch refuses it): none, work the stream's scheduler does.
    """

    seconds: float | None = None
    flops: float = 0.0
    bytes: float = 0.0
    block_dim: int | None = None
    link_bytes: float = 0.0
    link_src: int = 0


@dataclass(frozen=True)
class MemHandle:
    """A piece of memory a backend allocated: its address, size, and where it lives."""

    addr: int
    nbytes: int
    host: bool          # host memory (pinned when `pinned`), else device memory
    pinned: bool
    token: Any          # the backend's own record of it (opaque above)


@dataclass(frozen=True)
class BackendProperties:
    """What the device is: its kind, name, memory and executors per class."""

    backend: str                  # "cpu", "sim", later "cuda"
    name: str
    memory_bytes: int
    executors: tuple[int, int, int]   # (compute units, copy engines, host-function threads)
    preset: str = ""              # the hardware model a simulated device follows
    preset_source: str = ""       # ... where not the stock one: its file, the fields varied
    virtual: bool = False         # time is modelled (host_call and queue stepping matter)
    queue_depth: int = 0          # tasks a stream may hold before a submit waits (0: no limit)
    max_streams: int = 0          # streams the device can have at once (0: no limit)
    max_events: int = 0           # events the device can have at once (0: no limit)
    max_notifies: int = 0         # notifies the device can have at once (0: no limit)
    dispatch_ns: int = 0          # modelled time from a task's dispatch to its start (0: real time)
    release_ns: int = 0           # modelled time from a wait's release to its stream going on
    # (H2D, D2H, D2D) engines where each direction has engines of its own; () where any copy
    # engine takes any copy
    copy_engines_per_direction: tuple[int, ...] = ()


@runtime_checkable
class Signal(Protocol):
    """A flag the device sets and the host can wait on (one completion): any object with these
    methods is one (a threading.Event is)."""

    @abc.abstractmethod
    def set(self) -> None:
        """Mark it reached; wakes the host threads waiting on it."""

    @abc.abstractmethod
    def is_set(self) -> bool:
        """Whether it was set."""


class Backend(abc.ABC):
    """The ten methods a device kind implements; everything common lives above it."""

    @abc.abstractmethod
    def properties(self) -> BackendProperties:
        """What this device is (kind, name, memory, executor counts)."""

    @abc.abstractmethod
    def alloc(self, nbytes: int, host: bool = False) -> MemHandle:
        """Reserve `nbytes` of device memory, or of pinned host memory when `host`."""

    @abc.abstractmethod
    def free(self, handle: MemHandle, offset: int = 0, nbytes: int | None = None) -> None:
        """Release memory from alloc(), or only the pages of a range (then reads as zeros)."""

    @abc.abstractmethod
    def host_view(self, handle: MemHandle) -> memoryview:
        """The bytes of host-reachable memory as a writable memoryview."""

    @abc.abstractmethod
    def start_queue(self, name: str, queue: Any) -> None:
        """Start an executor over `queue` (a loop; a virtual backend's units of a class step one)."""

    @abc.abstractmethod
    def execute(self, op: Op) -> None:
        """Run one operation to completion on the calling executor (or host, when synchronous)."""

    @abc.abstractmethod
    def new_signal(self) -> Signal:
        """A new unset Signal."""

    @abc.abstractmethod
    def host_wait(self, signal: Signal, timeout_s: float | None) -> bool:
        """Block the host until `signal` is set (True) or `timeout_s` passes (False)."""

    @abc.abstractmethod
    def host_call(self, what: str) -> int:
        """The host makes call `what` now (a simulator charges it); 0, or a task's time it acts at."""

    @abc.abstractmethod
    def now_ns(self) -> int:
        """The device clock in nanoseconds (monotonic; the host's clock on the cpu backend)."""
