"""A task: one unit of stream work (kernel, copy, memset, host function, record, wait)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..backends.base import COPY, FILL, HOST, KERNEL, Cost, Op

# Task kinds: the backend's operation kinds, then the control kinds the engine runs itself.
MEMSET, HOST_FUNC = FILL, HOST
EVENT_RECORD, EVENT_WAIT, NOTIFY_RECORD, NOTIFY_WAIT, DETACH, VALUE_WAIT = range(4, 10)
__all__ = ["COMPUTE", "COPY", "COPY_ENGINE", "DETACH", "EVENT_RECORD", "EVENT_WAIT",
           "EXECUTOR_NAMES", "EXECUTOR_OF", "HOST_EXECUTOR", "HOST_FUNC", "KERNEL", "KIND_NAMES",
           "MEMSET", "NOTIFY_RECORD", "NOTIFY_WAIT", "VALUE_WAIT", "Marker", "Task", "with_spawned"]
KIND_NAMES = ("kernel", "copy", "memset", "host_func", "event_record", "event_wait",
              "notify_record", "notify_wait", "host_func_nonblocking", "value_wait")

# Executor classes of a device; control tasks (records, waits) need none and complete inline.
COMPUTE, COPY_ENGINE, HOST_EXECUTOR = 0, 1, 2
EXECUTOR_NAMES = ("compute", "copy", "host")
EXECUTOR_OF = (COMPUTE, COPY_ENGINE, COMPUTE, HOST_EXECUTOR, None, None, None, None, None, None)


class Task(Op):
    """What a stream holds: an operation for the backend (or a control step the engine runs
    itself), where it runs, and (when profiling) when it ran.

    Rarely-set fields are class-level defaults, so creating a task (the launch hot path)
    stores only the five that every task has.
    """

    fn: Any             # fn(*args); a DETACH task's: the host-function Task it hands off; a
                        # VALUE_WAIT's: fn() -> whether the word it watches lets its stream go
    id = 0
    stream: Any = None  # the Stream it was submitted to (a runtime object)
    thread = 0
    if TYPE_CHECKING:   # set on the kinds that use it (event records and waits), the only readers
        marker: Marker
    else:
        marker = None
    notify: Any = None  # the Notify of a notify record or wait (a runtime object)
    timeout: float | None = None  # seconds a device-side wait may block (None: forever)
    on_discard: Callable[[], object] | None = None  # fn() called (under the engine lock) when it
                                                    # is dropped unrun
    on_fail: Callable[[Any, BaseException], object] | None = None  # fn(task, error) called (under
                                                                  # the engine lock) when it fails
    timeout_error: Callable[[Any, Task], BaseException] | None = None
                          # fn(stream, task) -> the error a timed-out wait fails with (under the
                          # engine lock)
    timeout_is_last_resort = False  # a deadlock through the wait is reported at once, not left
                                    # to its timeout (a collective's, whose timeout is minutes)
    origin: tuple[Any, int] | None = None  # (stream, task id) that launched a non-blocking host function
    nbytes = 0
    reads: tuple | None = None
    writes: tuple | None = None
    t_enqueue = 0
    t_start = 0
    t_end = 0
    error: BaseException | None = None
    resolve: Callable[[tuple], Sequence[Any]] | None = None  # the Op's argument resolver (kernels
                                                             # with buffer arguments)
    keep: object = None  # what the Op's addresses point into, kept alive until it ran
    releaser: Task | None = None  # a notify wait, when profiling: the record task that set it going
    lets_go: Any = None  # a notify record dropped unrun: the wait it lets go (stream or task)
    let_go = False      # a queued notify wait a dropped record let go: it passes when reached
    group: Any = None
    cost: Cost | None = None  # the Op's cost on a simulated device (None: the backend's default)
    released_ns = 0     # on a virtual device: when the wait before it let its stream go on
    written_ns = 0      # a value wait met by a value write, on a virtual device: the write's time
    ready_ns = 0        # on a virtual device: the time of the host function that submitted it
    handed_ns = 0       # on a virtual device: when its stream's task before it ended on
                        # another executor class (0: the same class, or none)
    dropped = False     # its stream dropped it unrun (destroyed, or stopped after a failure)
    discarded_by = ""   # a notify record dropped unrun: what dropped it (an abort, destroy, reset)
    lost_work = False   # ... and whether work queued before it was dropped unrun too
    units = 1           # executor units it held while it ran (a simulated kernel: its block_dim)
    tail_ns = 0         # a simulated kernel with a last partial wave: how long that wave ran,
                        # holding only its own blocks' units (the others were free meanwhile)
    # (stream, task id) of tasks of other streams it runs as part of (a collective's lane step:
    # each rank's own task; a non-blocking host function: the task that handed it off): a
    # buffer freed after one of those still shows it its bytes
    acting_for: tuple = ()
    # What a runtime-made task does for the program's calls (a collective's lane step, a
    # replayed graph's lane): one (what, stream id, site, allocations) per call, e.g. ("rank 1's
    # all_reduce", 8, "x.py:13", (send, recv)); site None: the task's own, allocations None:
    # any; the race sanitizer names the call whose buffer raced, and its stream
    on_behalf: tuple = ()
    clock: tuple[Any, dict] | None = None  # a host function's vector clock, kept by the race sanitizer
    # A value write's (word address, value), a value wait's (word address, condition): what
    # the race sanitizer orders the wait after
    value: tuple[int, Any] | None = None
    # Set by ascentrt.graph on the tasks of a graph launch (annotations only: others have none),
    # and graph_segment on the task running a segment of nodes (which reach the profiler too)
    # or the graph's own bookkeeping (the join of its lanes): a profile shows it as no work.
    graph_id: int
    graph_node: int
    graph_segment = False
    # A task captured into a graph: (site, stream id, capture, node number) where the program
    # captured it (set by ascentrt.graph; the race sanitizer names it)
    captured: tuple | None = None
    dispatches_nodes = False  # a graph segment's task: a simulator dispatches each of its nodes
    site: Any = None  # where the program queued it (a callsite.Site), when ASCENTRT_CALL_SITES is on

    def __init__(self, kind: int, fn: Any = None, args: tuple = (), name: str | None = None):
        self.kind = kind
        self.executor = EXECUTOR_OF[kind]
        self.fn = fn
        self.args = args
        self.name = name

    @property
    def kind_name(self) -> str:
        """The kind as a word: kernel, copy, memset, host_func, event_record, ..."""
        return KIND_NAMES[self.kind]

    @property
    def label(self) -> str:
        """The task's name, or its function's name, or its kind."""
        return self.name or getattr(self.fn, "__name__", None) or self.kind_name

    def __repr__(self) -> str:
        return f"<task {self.id} {self.kind_name} {self.label}>"


# The fields set on tasks after __init__ by submission and by profiling (its timestamps), set
# once on a first task as the module loads. CPython (3.11) keeps an instance's attributes in a
# compact array keyed by its class's shared key table, and that table takes new names only
# while the class's first few dozen instances are made: a name first set later (t_enqueue once
# a profile starts, long after the first tasks ran) makes every task that sets it build a dict
# of its own, which cost a profiled launch ~10% more (callgrind). Only these: each name in the
# table is a slot of every task, profiled or not.
_SHARED_FIELDS = ("id", "stream", "thread", "t_enqueue", "t_start", "t_end")


def _share_fields() -> None:
    first = Task(KERNEL)
    for field in _SHARED_FIELDS:
        setattr(first, field, getattr(Task, field, None))


_share_fields()


def with_spawned(spawned: tuple, pairs: tuple) -> tuple:
    """A stream's `_spawned` (stream, position) pairs after it queued more work on other
    streams (`pairs`): the latest position per other stream (each runs its tasks in order)."""
    others = {o for o, _ in pairs}
    return tuple(p for p in spawned if p[0] not in others) + pairs


class Marker:
    """The point an event record captured: done once the stream's work before it completed."""

    __slots__ = ("stream", "position", "done", "ts_ns", "waiters", "host_waiters", "timing",
                 "capture", "clock", "note", "needs_host", "dropped", "discarded_by", "lost_work")

    def __init__(self, stream: Any, position: int, timing: bool):
        self.stream: Any = stream     # the Stream that records it (None: not known yet)
        self.position = position
        self.done = False
        self.ts_ns = 0
        self.waiters: list = []       # streams blocked on this marker
        self.host_waiters: list = []  # threading.Event of host threads synchronizing on it
        self.timing = timing
        self.capture: Any = None      # the graph capture that recorded it (never completes then)
        self.clock: tuple[Any, dict] | None = None  # the race sanitizer's vector clock of the record
        self.note: Callable[[], str] | None = None  # fn() -> what will record it, while `stream` is
                                      # None (a collective's part no rank has been given yet)
        # fn() -> True while only a call of a host thread of this process can get it recorded
        # (an in-process collective some rank has not called yet)
        self.needs_host: Callable[[], bool] | None = None
        self.dropped = False          # done because its stream dropped the record unrun (no ts_ns)
        self.discarded_by = ""        # what dropped it, when an abort, destroy or reset did
        self.lost_work = False        # dropped after work queued before it was dropped unrun too
