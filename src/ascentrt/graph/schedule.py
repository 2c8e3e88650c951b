"""Place a TaskGraph on N streams: list scheduling by critical path, and only the waits needed.

Assignment: tasks are taken in order of their bottom level (cost of the costliest path from
them to the end), so critical-path tasks are placed first, each on the stream where it can
start earliest (preferring a predecessor's stream); the stream that runs the critical path is
then numbered 0 and created with the highest priority.
Waits: a cross-stream dependency gets an event record/wait only when the waiting stream does
not already know (vector clocks over stream order and earlier waits) that the task finished.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from ..copies import memcpy_async, memset_async
from ..engine import check_sync_allowed
from ..errors import ErrorCode, InvalidArgumentError
from ..validate import as_int, check_timeout
from ..launch import launch, launch_host_func
from ..stream import Stream, resolve_stream
from ..handles import Handle

if TYPE_CHECKING:
    from ..event import Event
    from .graph import Graph

POLICIES = ("critical_path", "round_robin")
# Where the device sets no stream limit (the cpu backend), a schedule still plans and makes
# at most this many: tables and streams per lane (10**9 lanes ran out of memory).
MAX_STREAMS = 1 << 16


class Schedule(Handle):
    """A TaskGraph's tasks on streams: assignment, submission order, waits and records."""

    def __init__(self, graph: Any, num_streams: int, policy: str = "critical_path"):
        count = as_int(num_streams)
        if count is None or count < 1:
            raise InvalidArgumentError(f"num_streams must be an int >= 1, got {num_streams!r}")
        num_streams = count
        # (as create_stream reads it; 0: the device sets no limit)
        limit = graph.device._backend.properties().max_streams or MAX_STREAMS
        if num_streams > limit:
            raise InvalidArgumentError(f"num_streams {num_streams} is more than device "
                                       f"{graph.device.id} allows ({limit} streams)",
                                       code=ErrorCode.RT_NO_STREAM_RESOURCE)
        if policy not in POLICIES:
            raise InvalidArgumentError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.graph = graph  # a TaskGraph (not named: taskgraph imports this module)
        self.num_streams = num_streams
        self.policy = policy
        cost, path = graph.critical_path()
        self.critical_path = [n.index for n in path]
        self.critical_path_cost = cost
        self.assignment, self.order, self.makespan_estimate = self._assign()
        self.waits, self.records = self._plan_waits()

    # ---- planning -------------------------------------------------------------------------------

    def _assign(self) -> tuple[list[int], list[int], float]:
        nodes = self.graph.nodes
        # (n tasks use at most n streams, and the lowest free ones win every tie: planning on
        # more lanes than tasks would give the same assignment, at a cost that grows with them)
        n, streams = len(nodes), min(self.num_streams, max(1, len(nodes)))
        bottom = self.graph.bottom_levels()
        succs = self.graph._successors()
        missing = [len(node.deps) for node in nodes]
        ready = [(-bottom[i], i) for i in range(n) if not missing[i]]
        heapq.heapify(ready)
        free = [0.0] * streams
        finish = [0.0] * n
        assignment, order = [0] * n, []
        while ready:
            _, v = heapq.heappop(ready)
            preds = nodes[v].deps
            earliest = max((finish[p] for p in preds), default=0.0)
            if self.policy == "round_robin":
                s = v % streams
            else:  # earliest start; on a tie a predecessor's stream (no wait needed)
                pred_streams = {assignment[p] for p in preds}
                s = min(range(streams), key=lambda c: (max(free[c], earliest), c not in pred_streams, c))
            start = max(free[s], earliest)
            finish[v] = start + nodes[v].cost
            free[s] = finish[v]
            assignment[v] = s
            order.append(v)
            for w in succs[v]:
                missing[w] -= 1
                if not missing[w]:
                    heapq.heappush(ready, (-bottom[w], w))
        if self.policy == "critical_path":
            assignment = self._critical_path_first(assignment)
        return assignment, order, max(free, default=0.0)

    def _critical_path_first(self, assignment: list[int]) -> list[int]:
        """Renumber streams: the one running most of the critical path becomes stream 0
        (created with the highest priority), the others in order of first use."""
        on_path = [0] * self.num_streams
        for v in self.critical_path:
            on_path[assignment[v]] += 1
        first = max(range(self.num_streams), key=lambda c: (on_path[c], -c))
        rank = {first: 0}
        for s in assignment:
            rank.setdefault(s, len(rank))
        for c in range(self.num_streams):
            rank.setdefault(c, len(rank))
        return [rank[s] for s in assignment]

    def _plan_waits(self) -> tuple[list[tuple[int, int]], set[int]]:
        """(waiting task, task waited for) pairs in submission order, and the tasks to record after."""
        # (streams in use are numbered from 0: the clocks need no more than them)
        nodes, assign = self.graph.nodes, self.assignment
        streams = max(assign, default=0) + 1
        rank = {v: k for k, v in enumerate(self.order)}
        clock = [[0] * streams for _ in range(streams)]  # clock[s][t]: tasks of t known done on s
        after: dict[int, list[int]] = {}                  # task -> clock of its stream right after it
        position: dict[int, int] = {}
        waits: list[tuple[int, int]] = []
        records: set[int] = set()
        for v in self.order:
            s = assign[v]
            cross = sorted((p for p in nodes[v].deps if assign[p] != s), key=rank.__getitem__, reverse=True)
            for p in cross:  # latest first: a later wait can never be implied by an earlier one
                if clock[s][assign[p]] >= position[p]:
                    continue
                waits.append((v, p))
                records.add(p)
                clock[s] = [max(a, b) for a, b in zip(clock[s], after[p])]
            clock[s][s] += 1
            position[v] = clock[s][s]
            after[v] = list(clock[s])
        return waits, records

    @property
    def naive_waits(self) -> int:
        """Waits of the naive schedule: one per dependency that crosses streams."""
        a = self.assignment
        return sum(1 for p, i, _ in self.graph.edges() if a[p] != a[i])

    def report(self) -> dict:
        """What the schedule does: streams, waits inserted vs naive, critical path, estimates."""
        a = self.assignment
        per_stream = [0] * self.num_streams
        for s in self.assignment:
            per_stream[s] += 1
        return {"policy": self.policy, "streams": self.num_streams, "tasks": len(self.graph.nodes),
                "edges": len(self.graph.edges()), "waits": len(self.waits),
                "naive_waits": self.naive_waits, "records": len(self.records),
                "cross_stream_conflicts": sum(1 for p, i in self.graph.conflicts() if a[p] != a[i]),
                "tasks_per_stream": per_stream, "critical_path": self.critical_path,
                "critical_path_cost": self.critical_path_cost,
                "makespan_estimate": self.makespan_estimate}

    # ---- running --------------------------------------------------------------------------------

    def make_streams(self) -> list[Stream]:
        """Fresh streams for this schedule: stream 0 (critical path) at priority 0, the others at 1."""
        dev = self.graph.device
        streams: list[Stream] = []
        try:
            for i in range(self.num_streams):
                streams.append(dev.create_stream(priority=0 if i == 0 else 1))
        except BaseException:  # (a stream limit reached half-way: none of them is left behind)
            for s in streams:
                s.destroy(force=True)
            raise
        return streams

    def submit(self, streams: Sequence[Stream]) -> None:
        """Submit every task to `streams` (one per scheduled stream) with the planned waits."""
        streams = _stream_list(streams)
        if len(streams) != self.num_streams:
            raise InvalidArgumentError(f"the schedule needs {self.num_streams} streams, got {len(streams)}")
        dev = self.graph.device
        for i in sorted(set(self.assignment)):  # all of them before any task is submitted
            s = streams[i]
            if s is None:
                raise InvalidArgumentError(f"the schedule runs tasks on stream {i}: it needs a "
                                           f"Stream there, got None")
            if s.device is not dev:
                raise InvalidArgumentError(f"stream {s.id} is on device {s.device.id}, the graph's "
                                           f"buffers on device {dev.id}", code=ErrorCode.RT_STREAM_CONTEXT)
            if s._refuse is not None:
                raise s._refusal()
        self.graph.check_buffers()
        waits_of: dict[int, list[int]] = {}
        for v, p in self.waits:
            waits_of.setdefault(v, []).append(p)
        events: dict[int, Event] = {}
        try:
            for v in self.order:
                s = streams[self.assignment[v]]
                for p in waits_of.get(v, ()):
                    s.wait(events[p])
                _submit_node(self.graph.nodes[v], s)
                if v in self.records:
                    events[v] = s.record(s.device.internal_event())  # (the plan's own)
        finally:
            for ev in events.values():
                ev.destroy()  # recorded work still completes; waits already hold their markers

    def run(self, streams: Sequence[Stream] | None = None, timeout: float | None = None) -> None:
        """Submit eagerly and wait for everything (on fresh streams unless `streams` is given)."""
        from ..engine.sync import synchronize_streams
        timeout = check_timeout(timeout)  # (before anything is submitted)
        check_sync_allowed("a task graph run")
        own = streams is None
        streams = self.make_streams() if streams is None else _stream_list(streams)
        try:
            self.submit(streams)
            synchronize_streams(streams, timeout, "task graph run")
        finally:
            if own:
                for s in streams:
                    s.destroy(force=True)

    def capture(self, stream: Stream | None = None, mode: int = 0) -> Graph:
        """Capture the schedule into a replayable Graph (fork from `stream`, join back at the end)."""
        dev = self.graph.device
        origin = dev.create_stream(priority=0) if stream is None else resolve_stream(stream)
        used = sorted(set(self.assignment) - {0})
        helpers: dict[int, Stream] = {}
        try:
            for i in used:  # (in the try: a stream limit reached half-way leaves none behind)
                helpers[i] = dev.create_stream(priority=1)
            # None for a stream no task uses: submit never reaches it
            streams = cast("list[Stream]", [origin] + [helpers.get(i) for i in range(1, self.num_streams)])
            origin.begin_capture(mode)
            try:
                fork = origin.record(dev.internal_event())
                for h in helpers.values():
                    h.wait(fork)
                self.submit(streams)
                for h in helpers.values():
                    origin.wait(h.record(dev.internal_event()))
            except BaseException:
                try:
                    origin.end_capture()
                except Exception:
                    pass  # the capture is broken anyway: the first error is the one to report
                raise
            return origin.end_capture()
        finally:  # captured work never ran on these streams: the graph has lanes of its own
            for h in helpers.values():
                h.destroy(force=True)
            if stream is None:
                origin.destroy(force=True)


def _stream_list(streams: Any) -> list[Any]:
    """`streams` as a list of live streams (a list or tuple of them, one per scheduled stream,
    None where none is used); InvalidArgumentError for anything else."""
    if not isinstance(streams, (list, tuple)):
        raise InvalidArgumentError(f"streams must be a list of Streams, one per scheduled "
                                   f"stream, got {type(streams).__name__}")
    for s in streams:  # (None: a stream the schedule leaves unused, as capture() passes)
        if s is not None and not isinstance(s, Stream):
            raise InvalidArgumentError(f"streams must be Streams, got {type(s).__name__}")
    return [s if s is None else resolve_stream(s) for s in streams]


def _submit_node(node: Any, stream: Stream) -> None:
    if node.kind == "kernel":
        launch(node.fn, *node.args, stream=stream, name=node.name)
    elif node.kind == "copy":
        dst, src, nbytes = node.args
        memcpy_async(dst, src, nbytes, stream=stream)
    elif node.kind == "memset":
        dst, value, nbytes = node.args
        memset_async(dst, value, nbytes, stream=stream)
    else:
        launch_host_func(node.fn, *node.args, stream=stream)
