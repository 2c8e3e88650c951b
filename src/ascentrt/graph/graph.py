"""A captured, instantiated graph: replay it on a stream, update task groups, inspect it.

Instantiation resolves every dependency once: the nodes of each captured stream (a lane) are
cut into segments of consecutive nodes for one executor class, and only the cross-lane waits
that are not implied by others (vector clocks) are kept. A launch then submits one engine
task per segment plus a few records and waits, under one lock acquisition: replay costs no
Python work per node on the host, and the executor runs a segment's nodes back to back.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from ..handles import Handle
from .. import forksafe
from .. import interrupts
from ..backends.base import Cost, PlainOp
from ..engine import ENGINE, Marker, Task
from ..engine.task import with_spawned
from ..engine.hooks import Hooks, current_task
from ..engine.scheduler import BATCH
from ..engine.sync import synchronize_streams
from ..engine.task import (COMPUTE, COPY, COPY_ENGINE, DETACH, EVENT_RECORD, EVENT_WAIT,
                           EXECUTOR_OF, HOST_EXECUTOR, HOST_FUNC, KERNEL, KIND_NAMES, MEMSET)
from ..errors import (AscentError, CaptureError, ErrorCode, InvalidArgumentError,
                      InvalidHandleError, NotSupportedError)
from ..memory.buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView
from ..memory.external import ExternalHostBuffer
from ..memory.registry import REGISTRY
from ..stream import Stream, resolve_stream
from ..validate import check_timeout, write_text_file
from .update import GroupUpdate, TaskGroup

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..device import Device

_ids = itertools.count(1)
_SEGMENT_KIND: dict[int | None, int] = {COMPUTE: KERNEL, COPY_ENGINE: COPY, HOST_EXECUTOR: HOST_FUNC}
# Most nodes one engine task runs: an executor switches streams only between tasks, so this
# bounds how long a replay can hold back a higher-priority stream (the engine's batch size).
SEGMENT_NODES = BATCH


class ReadOnlyNodeError(AscentError, AttributeError):
    """A graph node's fields were assigned: replay would ignore them, so they are read-only."""

    default_code = ErrorCode.RT_MODEL_UPDATE_FAILED


class GraphNode(Handle):
    """One recorded task: what runs, where it was captured, and what it depends on (read-only:
    change a node's arguments with Graph.update)."""

    __slots__ = ("index", "kind", "fn", "args", "name", "lane", "deps", "group", "nbytes",
                 "keep", "op", "reads", "writes", "value", "origin")

    index: int
    kind: int
    fn: Any            # the task's function (for DETACH: the host-function task it hands on)
    args: tuple
    reads: Any
    writes: Any
    name: str | None
    lane: int
    deps: tuple[int, ...]
    group: TaskGroup | None
    nbytes: int
    keep: Any
    op: PlainOp
    value: tuple | None  # a value write's (word address, value), as its task's (the race sanitizer's)

    def __init__(self, index: int, task: Task, lane: int, deps: list[int],
                 group: TaskGroup | None = None):
        init = object.__setattr__
        init(self, "index", index)
        init(self, "kind", task.kind)
        init(self, "fn", task.fn)
        init(self, "args", task.args)
        init(self, "reads", task.reads)    # the buffers the launch declared (None: undeclared)
        init(self, "writes", task.writes)
        init(self, "name", task.name)
        init(self, "lane", lane)
        init(self, "deps", tuple(deps))
        init(self, "group", group)
        init(self, "nbytes", task.nbytes)
        init(self, "keep", task.keep)
        init(self, "value", task.value)
        init(self, "origin", None if task.captured is None else CapturedAt(self.label, *task.captured))
        # What a replay hands the backend: kernel buffer arguments resolved to what the
        # kernel takes once, at instantiation, not per launch.
        args = task.args if task.resolve is None else tuple(task.resolve(task.args))
        init(self, "op", PlainOp(task.kind, task.fn, args, keep=task.keep, nbytes=task.nbytes,
                                  cost=task.cost))

    def __setattr__(self, name: str, value: object) -> None:
        raise ReadOnlyNodeError(f"graph node {self.index}: {name} is read-only (a replay runs what "
                                f"was captured); change arguments with Graph.update(group, stream)")

    def _join(self, group: TaskGroup) -> None:
        """Mark the node as part of a task group (at instantiation)."""
        object.__setattr__(self, "group", group)

    @property
    def label(self) -> str:
        """The node's name, its function's name, or its kind."""
        fn = self.fn.fn if self.kind == DETACH else self.fn
        return self.name or getattr(fn, "__name__", None) or KIND_NAMES[self.kind]

    def _replaced(self, task: Task) -> "GraphNode":
        return GraphNode(self.index, task, self.lane, list(self.deps), self.group)


class CapturedAt:
    """A graph node as the race sanitizer names it: its label (`__name__`), the site and
    stream the program captured it at, which capture, and its number in that capture."""

    def __init__(self, label: str, site: Any, stream: int, capture: int, number: int):
        self.__name__ = label
        self.site, self.stream, self.capture, self.number = site, stream, capture, number


def _allocations(nodes: Iterable[GraphNode]) -> tuple:
    """The live allocations the nodes touch: a launch checks that none was freed since."""
    found: dict[int, Any] = {}
    for node in nodes:
        args = node.fn.args if node.kind == DETACH else node.args
        keep = node.keep if isinstance(node.keep, tuple) else (node.keep,)
        # A copy or fill keeps the allocations its operands were in when it was captured: those
        # are what it uses (an address looked up now may have a new owner since).
        owners = [a for a in keep if isinstance(a, (DeviceBuffer, HostBuffer, ExternalHostBuffer))]
        for a in (*args, *owners):
            if type(a) is TypedView:
                a = a.buffer
            if isinstance(a, (DeviceBuffer, HostBuffer, BufferSlice)):
                found[id(a.base)] = a.base
            elif isinstance(a, ExternalHostBuffer):
                found[id(a)] = a
        if not owners:  # (plain arrays only: memory the runtime does not own, or registered)
            for a in keep:
                if hasattr(a, "ctypes") and getattr(a, "nbytes", None):
                    alloc = REGISTRY.find(a.ctypes.data)
                    if alloc is not None:
                        found[id(alloc)] = alloc
    return tuple(found.values())


class Plan:
    """What one launch submits: steps per lane in a valid order, how many records it needs, and
    the nodes it runs with the allocations they use (a launch keeps its plan: an update makes
    a new one, and launches already submitted run and check the old)."""

    __slots__ = ("nodes", "buffers", "steps", "slots", "unjoined", "segments", "waits", "records",
                 "naive_waits")

    def __init__(self, nodes: list[GraphNode], steps: tuple[tuple[int, str, Any], ...], slots: int,
                 unjoined: list[int], waits: int, records: int, naive_waits: int):
        self.nodes = nodes
        self.buffers = _allocations(nodes)
        self.steps = steps        # (lane, "seg" | "record" | "wait" | "detach", what)
        self.slots = slots        # markers one launch creates (one per kept record)
        self.unjoined = unjoined  # lanes whose work the origin lane never waited for
        self.segments = sum(1 for s in steps if s[1] == "seg")
        self.waits = waits
        self.records = records
        self.naive_waits = naive_waits


def json_text(data: dict, path: str | os.PathLike[str] | None = None) -> str:
    """`data` as indented JSON text, also written to `path` when given; raises
    InvalidArgumentError (100003) naming it when it is not a path or cannot be written."""
    text = json.dumps(data, indent=1)
    if path is not None:  # (an int would be written into as a descriptor, and closed)
        write_text_file(path, text, "the graph's JSON")
    return text


_orphans: list[Stream] = []  # streams of graphs collected without destroy(): released at a safe point


def _release_orphans() -> None:
    """Release the streams of dropped graphs once they are idle (never from a GC callback:
    the collector may run while this thread holds the engine lock)."""
    if not _orphans:
        return
    with ENGINE.lock:
        busy = []
        while _orphans:
            s = _orphans.pop()
            if s._completed < s._submitted:
                busy.append(s)  # launched work still runs: release it on a later visit
            else:
                s._refuse = "destroyed"
                s._dq.streams.pop(s.id, None)
        _orphans.extend(busy)


class Graph(Handle):
    """An executable graph (CANN's model runtime instance, CUDA's graph exec) made by a capture."""

    # Set by _from_capture (graphs are not made by calling the class).
    id: int
    device: Device
    groups: list[TaskGroup]
    launches: int
    _priority: int
    _ops: list[tuple[int, str, int]]
    _lane_count: int
    _plan: Plan
    _lock: threading.Lock
    _last_end: Marker | None
    _destroyed: bool
    _lanes: list[Stream]
    _exec_stream: Stream | None
    _owned: list[Stream]

    def __init__(self) -> None:
        raise TypeError("graphs are made by stream.end_capture() or TaskGraph.capture()")

    @classmethod
    def _from_capture(cls, cap: Any) -> "Graph":
        self = object.__new__(cls)
        self.id = next(_ids)
        self.device = cap.origin.device
        self._priority = cap.origin.priority
        priorities = [s.priority for s in cap.lanes]  # lane order: each lane keeps its stream's priority
        captured = [s.id for s in cap.lanes]  # (what a profile says a lane replays)
        self._ops, nodes, self._lane_count = _resolve(cap)
        for group in cap.closed_groups:
            group.graph = self
            for i in group.nodes:
                nodes[i]._join(group)
        self.groups = list(cap.closed_groups)
        self._plan = _compile(self._ops, nodes, self._lane_count, self.id)
        self._check_joined()
        self._lock = forksafe.lock()      # one launch at a time
        self._last_end = None
        self._destroyed = False
        _release_orphans()
        self._lanes = [Stream(self.device, p, _internal=True) for p in priorities[1:]]
        for lane, sid in zip(self._lanes, captured[1:]):
            lane.role = f"graph {self.id} lane: the work captured on stream {sid}"
        self._exec_stream = None
        self._owned = list(self._lanes)   # every stream this graph made, for release when dropped
        weakref.finalize(self, _orphans.extend, self._owned)
        self.launches = 0
        return self

    def _check_joined(self) -> None:
        missing = self._plan.unjoined
        if missing:
            raise CaptureError(f"{len(missing)} stream(s) forked into the capture were never joined "
                               f"back: the origin stream must wait on an event recorded after their "
                               f"last work (lanes {missing}); nothing was recorded",
                               code=ErrorCode.RT_STREAM_UNJOINED)

    # ---- replay -------------------------------------------------------------------------------

    def launch(self, stream: Stream | None = None) -> None:
        """Replay the graph on `stream` after its earlier work, in order with earlier launches.

        Raises InvalidHandleError when the graph was destroyed or a buffer it uses was freed,
        InvalidArgumentError for a stream of another device, NotSupportedError for a capturing one.
        """
        if type(stream) is not Stream or stream._refuse is not None:
            stream = resolve_stream(stream)
        if self._destroyed:
            raise InvalidHandleError(f"graph {self.id} was destroyed")
        if stream.device is not self.device:
            raise InvalidArgumentError(f"graph {self.id} belongs to device {self.device.id}, stream "
                                       f"{stream.id} to device {stream.device.id}",
                                       code=ErrorCode.RT_STREAM_CONTEXT)
        if stream._capture is not None:
            raise NotSupportedError(f"launching graph {self.id} into capturing stream {stream.id} "
                                    f"(graphs do not nest)")
        with self._lock:
            if self._destroyed:  # (under the lock: a destroy may have begun since the check above)
                raise InvalidHandleError(f"graph {self.id} was destroyed")
            plan = self._plan  # (this launch's nodes and buffers: an update swaps the plan)
            for alloc in plan.buffers:
                if not alloc.alive:  # device, pinned or registered host memory alike
                    raise InvalidHandleError(f"graph {self.id} uses {alloc!r}, which was freed")
            lanes = self._lanes
            streams = [stream, *lanes] if lanes else [stream]
            markers: Sequence[Marker] = [Marker(None, 0, False) for _ in range(plan.slots)] if plan.slots else ()
            errors: LaneErrors | None = [] if lanes else None
            work: list[tuple[Stream, Task]] = []
            # (a race with a lane's work names the launch, whose stream the program orders)
            behalf = ((f"graph {self.id}'s launch", stream.id, None, None),) \
                if lanes and not stream.role else ()
            prev = self._last_end
            if prev is not None and not prev.done and prev.stream is not stream:
                t = Task(EVENT_WAIT, name="graph_serialize")
                t.marker = prev
                work.append((stream, t))
            elif prev is not None and Hooks.sanitizer is not None:
                Hooks.sanitizer.stream_waited(stream, prev)  # launches of a graph are in order
            for lane, op, what in plan.steps:
                if op == "seg":
                    kind, entries, name = what
                    t = Task(kind, _run_segment, (entries, errors if lane else None, self,
                                                  plan.buffers, self.device._backend), name)
                    t.cost = _segment_cost(entries)  # on sim each node takes its own time
                    t.graph_segment = t.dispatches_nodes = True  # (see Task: its nodes are the work)
                    if lane:
                        t.on_behalf = behalf
                elif op == "record":
                    t = Task(EVENT_RECORD, name="graph_record")
                    t.marker = m = markers[what]
                    m.stream = streams[lane]
                elif op == "wait":
                    t = Task(EVENT_WAIT, name="graph_wait")
                    t.marker = markers[what]
                else:  # a non-blocking host function: handed to the host thread when reached
                    t = Task(DETACH, Task(HOST_FUNC, what.fn.fn, what.fn.args, what.label), (),
                             what.label)
                work.append((streams[lane], t))
            if errors is not None:  # failures of forked lanes surface on the launch stream
                join = Task(KERNEL, _raise_lane_errors, (errors, self.id), f"graph{self.id}_join")
                join.cost = _NO_WORK  # (bookkeeping: on sim it takes no time and one unit)
                join.graph_segment = True  # (a profile shows it as the graph's, not a kernel)
                work.append((stream, join))
            end = Marker(stream, 0, False)
            t = Task(EVENT_RECORD, name="graph_end")
            t.marker = end
            work.append((stream, t))
            ENGINE.submit_all(streams, work)
            if lanes:  # (a free ordered after `stream` waits for the lanes' work too)
                stream._spawned = with_spawned(stream._spawned,
                                               tuple((lane, lane._submitted) for lane in lanes))
            self._last_end = end
            self.launches += 1

    def execute(self, timeout: float | None = None) -> None:
        """Replay the graph on a stream of its own and wait for it (CANN's aclmdlRIExecute)."""
        timeout = check_timeout(timeout)
        if self._exec_stream is None:
            self._exec_stream = Stream(self.device, self._priority, _internal=True)
            self._exec_stream.role = f"graph {self.id} execute"
            self._owned.append(self._exec_stream)
        self.launch(self._exec_stream)
        synchronize_streams([self._exec_stream], timeout, f"graph {self.id} execute")

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until the latest launch finished (its stream's errors surface there, not here)."""
        timeout = check_timeout(timeout)
        m = self._last_end
        if m is None:
            return
        if not m.done:
            ev = self.device._backend.new_signal()
            with ENGINE.lock:
                waiting = not m.done
                if waiting:
                    m.host_waiters.append(ev)

            def cancel() -> None:
                if ev in m.host_waiters:
                    m.host_waiters.remove(ev)
            if waiting:
                ENGINE.wait_host(ev, timeout, [m.stream, *self._lanes],
                                 f"graph {self.id} synchronize", ErrorCode.RT_STREAM_SYNC_TIMEOUT,
                                 cancel)
        # (a simulated device charges the return path once, from the call or the completion)
        self.device._backend.host_call("synchronize")
        if Hooks.sanitizer is not None:
            Hooks.sanitizer.marker_waited(m)  # the host now comes after the launch

    def destroy(self, timeout: float | None = None) -> None:
        """Wait for launched work, then release the graph's streams; twice raises InvalidHandleError.

        Launches from other threads are refused from its start (InvalidHandleError), so every
        launch that was accepted runs. A wait past `timeout` seconds raises the synchronize
        timeout and leaves the graph alive.
        """
        with self._lock:  # (launches take it: one in progress finishes submitting first)
            if self._destroyed:
                raise InvalidHandleError(f"graph {self.id} was destroyed")
            self._destroyed = True
        try:
            self.synchronize(timeout)
        except BaseException:
            self._destroyed = False  # (still alive: it may be launched or destroyed again)
            raise
        with ENGINE.lock:
            for s in self._owned:
                ENGINE._discard(s)
                s._refuse = "destroyed"
                s._dq.streams.pop(s.id, None)
        self._owned.clear()  # nothing left for the drop-time finalizer

    close = destroy

    def __enter__(self) -> "Graph":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._destroyed:
            self.destroy()

    # ---- update without re-capture -------------------------------------------------------------

    def update(self, group: TaskGroup, stream: Stream | None) -> GroupUpdate:
        """Context manager: the tasks submitted to `stream` inside it replace `group`'s nodes.

        Same count, kinds and functions (arguments and buffers may change); anything else is a
        topology change and raises RT_MODEL_UPDATE_FAILED leaving the graph as it was. Launches
        already submitted keep the old arguments.
        """
        return GroupUpdate(self, group, stream)

    def _apply_update(self, group: TaskGroup, tasks: list[Task]) -> None:
        nodes = list(self.nodes)
        old = [nodes[i] for i in group.nodes]
        reason = _update_mismatch(old, tasks)
        if reason is not None:
            raise CaptureError(f"graph {self.id}: task group update refused: {reason}",
                               code=ErrorCode.RT_MODEL_UPDATE_FAILED)
        for node, task in zip(old, tasks):
            nodes[node.index] = node._replaced(task)
        plan = _compile(self._ops, nodes, self._lane_count, self.id)
        with self._lock:
            self._plan = plan

    @property
    def nodes(self) -> list[GraphNode]:
        """The nodes the next launch replays (in capture order; an update replaces some)."""
        return self._plan.nodes

    # ---- inspection -----------------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        """How many tasks the graph replays."""
        return len(self.nodes)

    def plan_summary(self) -> dict:
        """Engine tasks one launch submits: segments, records, waits (and the naive wait count)."""
        p = self._plan
        return {"nodes": len(self.nodes), "lanes": self._lane_count, "segments": p.segments,
                "records": p.records, "waits": p.waits, "naive_waits": p.naive_waits}

    def to_dict(self) -> dict:
        """The graph as plain data (what to_json writes)."""
        return {"graph": self.id, "device": self.device.id, **self.plan_summary(),
                "nodes": [{"id": n.index, "kind": KIND_NAMES[n.kind], "name": n.label, "lane": n.lane,
                           "deps": list(n.deps), "nbytes": n.nbytes,
                           "group": None if n.group is None else self.groups.index(n.group)}
                          for n in self.nodes]}

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The graph as JSON text; also written to `path` when given."""
        return json_text(self.to_dict(), path)

    def to_dot(self) -> str:
        """The graph in Graphviz dot: one cluster per captured stream, edges are dependencies."""
        lines = [f'digraph "graph{self.id}" {{', "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
        for lane in range(self._lane_count):
            lines.append(f'  subgraph cluster_{lane} {{ label="stream {lane}"; style=dashed;')
            for n in self.nodes:
                if n.lane == lane:
                    text = f"{n.index}: {n.label}\\n{KIND_NAMES[n.kind]}"
                    extra = ", style=filled, fillcolor=lightyellow" if n.group is not None else ""
                    lines.append(f'    n{n.index} [label="{_escape(text)}"{extra}];')
            lines.append("  }")
        for n in self.nodes:
            for d in n.deps:
                style = "" if self.nodes[d].lane == n.lane else " [style=bold, color=blue]"
                lines.append(f"  n{d} -> n{n.index}{style};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return (f"Graph(id={self.id}, nodes={len(self.nodes)}, lanes={self._lane_count}, "
                f"segments={self._plan.segments})")


def _escape(text: str) -> str:
    return text.replace('"', '\\"')


# ---- instantiation ------------------------------------------------------------------------------

def _resolve(cap: Any) -> tuple[list[tuple[int, str, int]], list[GraphNode], int]:
    """Turn the capture's ops into nodes with their dependencies (previous in lane + waits)."""
    lanes = len(cap.lanes)
    lane_nodes: list[list[int]] = [[] for _ in range(lanes)]
    recorded: dict[int, tuple[int, int, int]] = {}  # id(marker) -> (lane, its nodes before, op)
    pending: list[list[int]] = [[] for _ in range(lanes)]
    nodes: list[GraphNode] = []
    ops: list[tuple[int, str, int]] = []
    for lane, op, x in cap.ops:
        if op == "node":
            deps = lane_nodes[lane][-1:] + sorted(set(pending[lane]))
            pending[lane] = []
            try:
                node = GraphNode(len(nodes), x, lane, deps)
            except InvalidHandleError as exc:  # (its buffer arguments are resolved here)
                raise InvalidHandleError(f"task {len(nodes)} ({x.label}) of the capture begun on stream "
                                         f"{cap.origin.id} uses a buffer freed before end_capture ({exc.message}): "
                                         f"a graph keeps the buffers its nodes use, free them after "
                                         f"it is destroyed; no graph was made", code=exc.code) from None
            lane_nodes[lane].append(node.index)
            nodes.append(node)
            ops.append((lane, "node", node.index))
        elif op == "record":
            recorded[id(x)] = (lane, len(lane_nodes[lane]), len(ops))
            ops.append((lane, "record", len(ops)))
        else:
            src_lane, count, rec = recorded[id(x)]
            if src_lane != lane:
                if count:
                    pending[lane].append(lane_nodes[src_lane][count - 1])
                ops.append((lane, "wait", rec))
    return ops, nodes, lanes


def _compile(ops: list[tuple[int, str, int]], nodes: list[GraphNode], lanes: int, graph_id: int) -> Plan:
    """Cut lanes into segments and keep only the waits no earlier wait already implies."""
    # Pass 1: vector clocks. clock[L][M] = nodes of lane M known complete at lane L's position.
    clock = [[0] * lanes for _ in range(lanes)]
    started = [lane == 0 for lane in range(lanes)]  # lanes >= 1 must first wait for the launch
    snapshots: dict[int, tuple[int, list[int]]] = {}
    needed: set[int] = set()
    kept: set[int] = set()
    naive = 0
    for i, (lane, op, x) in enumerate(ops):
        if op == "node":
            clock[lane][lane] += 1
        elif op == "record":
            snapshots[x] = (lane, list(clock[lane]))
        else:
            src, snap = snapshots[x]
            naive += 1
            mine = clock[lane]
            if started[lane] and all(a >= b for a, b in zip(mine, snap)):
                continue  # implied by waits this lane already did
            started[lane] = True
            clock[lane] = [max(a, b) for a, b in zip(mine, snap)]
            needed.add(x)
            kept.add(i)
    counts = [0] * lanes
    for n in nodes:
        counts[n.lane] += 1
    unjoined = [lane for lane in range(1, lanes) if clock[0][lane] < counts[lane]]
    # Pass 2: segments between kept records and waits, one executor class each.
    slot_of = {rec: k for k, rec in enumerate(sorted(needed))}
    steps: list[tuple[int, str, Any]] = []
    # (executor class, entries, first node, the block_dim every node of it declares, or for
    # copies their label)
    open_seg: list[tuple[int | None, list[tuple[PlainOp, GraphNode]], int, Any] | None] = [None] * lanes

    def close(lane: int) -> None:
        seg = open_seg[lane]
        if seg is not None:
            ex, entries, first, _ = seg
            steps.append((lane, "seg", (_SEGMENT_KIND[ex], tuple(entries),
                                        f"graph{graph_id}:nodes{first}-{entries[-1][1].index}")))
            open_seg[lane] = None

    for i, (lane, op, x) in enumerate(ops):
        if op == "node":
            node = nodes[x]
            if node.kind == DETACH:
                close(lane)
                steps.append((lane, "detach", node))
                continue
            ex = EXECUTOR_OF[node.kind]
            # (a copy's label is its direction: a simulated segment holds an engine of its
            # direction, so a change of direction starts a new one, as for units)
            units = node.name if ex == COPY_ENGINE else _declared_units(node.op)
            seg = open_seg[lane]
            # A segment holds the same units throughout (see _segment_cost): a change of
            # block_dim starts a new one, so that other lanes' work runs beside a narrow node
            # as it would beside the eager kernel.
            if seg is not None and (seg[0] != ex or seg[3] != units or len(seg[1]) >= SEGMENT_NODES):
                close(lane)
                seg = None
            if seg is None:
                seg = open_seg[lane] = (ex, [], x, units)
            seg[1].append((node.op, node))
        elif op == "record":
            if x in needed:
                close(lane)
                steps.append((lane, "record", slot_of[x]))
        elif i in kept:
            close(lane)
            steps.append((lane, "wait", slot_of[x]))
    for lane in range(lanes):
        close(lane)
    return Plan(nodes, tuple(steps), len(slot_of), unjoined, len(kept), len(needed), naive)


def _update_mismatch(old: list[GraphNode], tasks: list[Task]) -> str | None:
    """Why `tasks` cannot replace the nodes `old` (None when they can)."""
    if len(tasks) != len(old):
        return f"the group has {len(old)} tasks, the update submitted {len(tasks)} (topology change)"
    for node, task in zip(old, tasks):
        if task.kind != node.kind:
            return (f"node {node.index} is a {KIND_NAMES[node.kind]}, its replacement a "
                    f"{KIND_NAMES[task.kind]} (topology change)")
        same = task.fn.fn == node.fn.fn if node.kind == DETACH else task.fn == node.fn  # == : bound methods
        if node.kind not in (COPY, MEMSET) and not same:  # copies and memsets: only operands change
            return (f"node {node.index} runs {node.label}; an update may change arguments and "
                    f"buffers, not the function")
    return None


# ---- what the executors run ------------------------------------------------------------------

RUN_OF_NODES = Cost(seconds=0.0)  # a segment costs nothing of its own: its nodes do


def _declared_units(op: PlainOp) -> int | None:
    """The compute units a node holds as an eager task would: the block_dim its cost declares
    (None: none declared, the device's default), one for a memset."""
    if op.kind == MEMSET:  # (an op's FILL is a task's MEMSET)
        return 1
    cost = op.cost
    return None if cost is None else cost.block_dim


def _segment_cost(entries: tuple) -> Cost:
    """A segment's cost on a simulated device: nothing of its own (its nodes add theirs as
    they run), holding the compute units its nodes occupy (all declare the same block_dim:
    _compile cuts a lane where it changes; none declared, the default, as an eager launch),
    so that segments of other lanes run beside it as their eager kernels would."""
    units = _declared_units(entries[0][0])
    return RUN_OF_NODES if units is None else Cost(seconds=0.0, block_dim=units)
# The task an executor runs: a segment always runs inside its engine task, so never None there.
_running = cast("Callable[[], Task]", current_task)

def segment_nodes(task: Task) -> list[GraphNode] | None:
    """The nodes (GraphNode) a replayed graph's task runs; None for other tasks."""
    if task.fn is not _run_segment:
        return None
    return [node for _, node in task.args[0]]


Entries = tuple[tuple[PlainOp, GraphNode], ...]   # a segment's nodes, with what each hands the backend
LaneErrors = list[tuple[GraphNode, BaseException]]  # failures of a launch's forked lanes


def _check_buffers(buffers: tuple) -> None:
    """Raise InvalidHandleError when a buffer the launch's nodes use was freed before this
    replay was queued: checked as each segment runs, not only at launch (a replay queued behind
    other work may run after such a free, whose block has a new owner by then), as a kernel's
    buffers are (a stream-ordered free queued after the replay still lets it run). `buffers`
    are the launch's own (an update since then gave later launches other ones)."""
    for alloc in buffers:
        alloc._bytes()


def _run_segment(entries: Entries, errors: LaneErrors | None, graph: Graph, buffers: tuple,
                 backend: Backend) -> None:
    """Run a segment's nodes back to back through the backend (one engine task); a failure names its node."""
    try:
        _check_buffers(buffers)
    except BaseException as exc:  # (a forked lane's surfaces on the launch stream, as a node's)
        _report((entries[0][1], exc), errors, graph.id)
        return
    if Hooks.profiler is not None:
        return _run_segment_profiled(entries, errors, graph, backend)
    execute = backend.execute
    failed: tuple[GraphNode, BaseException] | None = None
    for op, node in entries:
        try:
            execute(op)
        except BaseException as exc:  # later nodes still run (CONTINUE), as eager tasks would
            if failed is None:
                failed = (node, exc)
            if _running().stream._stop_on_failure:
                break
    if failed is not None:
        _report(failed, errors, graph.id)


def _run_segment_profiled(entries: Entries, errors: LaneErrors | None, graph: Graph,
                          backend: Backend) -> None:
    """As _run_segment, and hand the profiler one task per node (named, timed, graph-tagged).

    Node tasks carry the segment's stream and task id, plus graph_id and graph_node.
    """
    seg = _running()
    done: list[Task] = []
    failed: tuple[GraphNode, BaseException] | None = None
    now = backend.now_ns
    # (a node's time is its work: on a simulated device it starts once dispatched, as an
    # eager task does, and the dispatch shows as its time queued)
    dispatch = backend.properties().dispatch_ns
    for op, node in entries:
        t = Task(node.kind, op.fn, op.args, node.label)
        t.id, t.stream, t.thread, t.t_enqueue = seg.id, seg.stream, seg.thread, seg.t_enqueue
        t.units = seg.units  # (what its segment held while it ran)
        t.graph_id, t.graph_node = graph.id, node.index
        t.nbytes = node.nbytes
        t.t_start = now() + dispatch
        try:
            backend.execute(op)
        except BaseException as exc:
            t.error = exc
            if failed is None:
                failed = (node, exc)
        t.t_end = now()
        done.append(t)
        if failed is not None and seg.stream._stop_on_failure:
            break
    # The engine reports the segment task too: tagged, so a profiler can show it as a span
    # around its nodes instead of counting the time twice.
    seg.graph_id = graph.id
    prof = Hooks.profiler
    if prof is not None:
        for t in done:
            prof.task_done(t)
    if failed is not None:
        _report(failed, errors, graph.id)


def _report(failed: tuple[GraphNode, BaseException], errors: LaneErrors | None, graph_id: int) -> None:
    node, exc = failed
    if errors is not None:
        errors.append(failed)   # a forked lane: the launch stream raises it after the join
        return
    _rename(_running(), graph_id, node)
    raise exc


def _rename(task: Task, graph_id: int, node: GraphNode) -> None:
    """Name the failing task after the node that failed (its kind picks the error code)."""
    task.name = f"{node.label} (graph {graph_id} node {node.index})"
    task.kind = node.kind


_NO_WORK = Cost(seconds=0.0, block_dim=1)


def _raise_lane_errors(errors: LaneErrors, graph_id: int) -> None:
    """After the join: raise the first failure of a forked lane on the launch stream."""
    if errors:
        node, exc = errors[0]
        _rename(_running(), graph_id, node)
        raise exc


interrupts.protect(Graph.launch)  # (a launch queued must be the graph's last, its lanes spawned)
