"""TaskGraph: kernels, copies, memsets and host functions with the bytes they read and write.

Dependencies are derived as tasks are added (read-after-write, write-after-read,
write-after-write on overlapping byte ranges) or given explicitly; only the direct ones are
kept (an edge implied by others is dropped as it would be by a transitive reduction).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..copies import check_copy, check_fill
from ..errors import InvalidArgumentError, InvalidHandleError
from ..validate import as_group, as_int, check_finite, check_name
from ..memory.buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView, task_view

if TYPE_CHECKING:
    from ..device import Device
    from .schedule import Schedule

_BUFFERS = (DeviceBuffer, HostBuffer, BufferSlice, TypedView)
_REGIONS = (*_BUFFERS, np.ndarray)  # what a byte range is taken of
KINDS = ("kernel", "copy", "memset", "host_func")
# What reads/writes name: a buffer, slice, typed view or numpy array.
Region = DeviceBuffer | HostBuffer | BufferSlice | TypedView | np.ndarray


def byte_range(x: object) -> tuple[int, int]:
    """[start, end) addresses of a buffer, slice, typed view or numpy array; raises otherwise."""
    if type(x) is TypedView:
        return x.buffer.addr, x.buffer.addr + task_view(x).nbytes
    if isinstance(x, (DeviceBuffer, HostBuffer, BufferSlice)):
        return x.addr, x.addr + x.nbytes
    if isinstance(x, np.ndarray):
        return x.ctypes.data, x.ctypes.data + x.nbytes
    raise InvalidArgumentError(f"reads/writes take buffers, slices, typed views or numpy arrays, "
                               f"got {type(x).__name__}")


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


class TaskNode:
    """One task of a TaskGraph: what to run, the byte ranges it touches, its direct predecessors."""

    __slots__ = ("graph", "index", "kind", "fn", "args", "kwargs", "name", "reads", "writes",
                 "deps", "cost", "uses")

    def __init__(self, graph: TaskGraph, index: int, kind: str, fn: Callable[..., Any] | None, args: tuple,
                 kwargs: dict, name: str | None, reads: list[tuple[int, int]], writes: list[tuple[int, int]],
                 cost: float):
        self.graph, self.index, self.kind = graph, index, kind
        self.fn, self.args, self.kwargs, self.name = fn, args, kwargs, name
        self.reads, self.writes = reads, writes
        self.deps: dict[int, str] = {}   # predecessor index -> "RAW" / "WAR" / "WAW" / "explicit"
        self.cost = cost
        self.uses: tuple = ()   # the runtime's buffers it names (arguments, reads, writes)

    @property
    def label(self) -> str:
        """The task's name (its function's name, or its kind, by default)."""
        return self.name or getattr(self.fn, "__name__", None) or self.kind

    def __repr__(self) -> str:
        return f"<TaskNode {self.index} {self.kind} {self.label}>"


class TaskGraph:
    """A DAG of device work; `schedule(num_streams)` places it on streams with minimal waits."""

    def __init__(self, device: Device | int | None = None):
        from ..device import resolve_device
        self.device = resolve_device(device)
        self.nodes: list[TaskNode] = []
        self._ancestors: list[int] = []   # bit set per node: every node it transitively depends on

    # ---- building -------------------------------------------------------------------------------

    def add_kernel(self, kernel: Callable[..., Any] | str, *args: Any, reads: Iterable[Region] | None = None,
                   writes: Iterable[Region] | None = None, after: Iterable[TaskNode] = (),
                   name: str | None = None, cost: float = 1.0) -> TaskNode:
        """A kernel; reads/writes default to every buffer argument (both). Returns its node."""
        from ..launch import _resolve_kernel
        kernel = kernel if callable(kernel) else _resolve_kernel(kernel)
        if reads is None and writes is None:
            reads = writes = [a for a in args if isinstance(a, _BUFFERS)]
        # (None beside a given group is empty; anything else is checked: 0 or "" is no list)
        return self._add("kernel", kernel, args, {}, name, () if reads is None else reads,
                         () if writes is None else writes, after, cost)

    def add_copy(self, dst: Region, src: Region, nbytes: int | None = None, *,
                 after: Iterable[TaskNode] = (), name: str | None = None, cost: float = 1.0) -> TaskNode:
        """An asynchronous copy src -> dst (reads src's bytes, writes dst's); checked as
        memcpy_async checks it, now (a graph that fails half-way would have run part of itself)."""
        check_name(name)  # (before `or` takes a falsy non-str for no name)
        n = check_copy(dst, src, nbytes)
        rd = _clip(byte_range(src), n)
        wr = _clip(byte_range(dst), n)
        return self._add("copy", None, (dst, src, nbytes), {}, name or "memcpy", [rd], [wr], after,
                         cost, ranges=True)

    def add_memset(self, dst: Region, value: int, nbytes: int | None = None, *,
                   after: Iterable[TaskNode] = (), name: str | None = None, cost: float = 1.0) -> TaskNode:
        """An asynchronous byte fill of dst; checked as memset_async checks it, now."""
        check_name(name)
        wr = _clip(byte_range(dst), check_fill(dst, value, nbytes))
        return self._add("memset", None, (dst, value, nbytes), {}, name or "memset", [], [wr], after,
                         cost, ranges=True)

    def add_host_func(self, fn: Callable[..., Any], *args: Any, reads: Iterable[Region] = (),
                      writes: Iterable[Region] = (), after: Iterable[TaskNode] = (), name: str | None = None,
                      cost: float = 1.0) -> TaskNode:
        """A host function (blocking) with the buffers it reads and writes."""
        if not callable(fn):
            raise InvalidArgumentError(f"host function must be callable, got {type(fn).__name__}")
        return self._add("host_func", fn, args, {}, name, reads, writes, after, cost)

    def add_dependency(self, before: TaskNode, after: TaskNode) -> None:
        """Make `after` wait for `before` (which must have been added first)."""
        b, a = self._own(before), self._own(after)
        if b.index >= a.index:
            raise InvalidArgumentError(f"a dependency must point forward: task {b.index} was added "
                                       f"after task {a.index} (that would allow a cycle)")
        if self._ancestors[a.index] >> b.index & 1:
            return  # already implied
        a.deps[b.index] = "explicit"
        gained = self._ancestors[b.index] | 1 << b.index
        for node in self.nodes[a.index:]:
            if node.index == a.index or self._ancestors[node.index] >> a.index & 1:
                self._ancestors[node.index] |= gained

    def _own(self, node: object) -> TaskNode:
        if not isinstance(node, TaskNode) or node.graph is not self:
            raise InvalidArgumentError(f"{node!r} is not a task of this graph")
        return node

    def _add(self, kind, fn, args, kwargs, name, reads, writes, after, cost, ranges=False) -> TaskNode:
        cost = check_finite(cost, "cost")
        check_name(name)
        if not ranges:  # (taken once: a generator is read only once)
            reads, writes = as_group(reads, _REGIONS, "reads"), as_group(writes, _REGIONS, "writes")
        named = (*args, *kwargs.values(), *(() if ranges else (*reads, *writes)))
        uses = tuple(x for x in named if isinstance(x, _BUFFERS))
        if not ranges:
            reads = [byte_range(x) for x in reads]
            writes = [byte_range(x) for x in writes]
        explicit = [self._own(p) for p in as_group(after, (TaskNode,), "after")]
        node = TaskNode(self, len(self.nodes), kind, fn, args, kwargs, name, reads, writes, cost)
        node.uses = uses
        # Direct dependencies only: scan back from the newest task; skip what a chosen one implies.
        covered = 0
        chosen = {}
        forced = {p.index for p in explicit}
        for j in range(len(self.nodes) - 1, -1, -1):
            if covered >> j & 1:
                continue
            other = self.nodes[j]
            why = ("RAW" if _overlap(other.writes, reads) else "WAW" if _overlap(other.writes, writes)
                   else "WAR" if _overlap(other.reads, writes) else "explicit" if j in forced else None)
            if why is not None:
                chosen[j] = why
                covered |= self._ancestors[j] | 1 << j
        node.deps = dict(sorted(chosen.items()))
        self.nodes.append(node)
        self._ancestors.append(covered)
        return node

    def check_buffers(self) -> None:
        """Raise InvalidHandleError (107017) naming the first task whose buffer was freed (a
        run or capture checks every task first: a graph that fails half-way would have run
        part of itself)."""
        for node in self.nodes:
            for x in node.uses:
                alloc = (x.buffer if type(x) is TypedView else x).base
                if not alloc.alive:
                    raise InvalidHandleError(f"task {node.index} ({node.label}) of the graph uses "
                                             f"{alloc!r}, which was freed; nothing was submitted")

    # ---- analysis -------------------------------------------------------------------------------

    def edges(self) -> list[tuple[int, int, str]]:
        """(before, after, why) for every direct dependency."""
        return [(p, n.index, why) for n in self.nodes for p, why in n.deps.items()]

    def conflicts(self) -> list[tuple[int, int]]:
        """Every ordered pair of tasks whose byte ranges conflict (what pairwise tracking would order)."""
        found = []
        for b in self.nodes:
            for a in self.nodes[:b.index]:
                if (_overlap(a.writes, b.reads) or _overlap(a.writes, b.writes)
                        or _overlap(a.reads, b.writes) or a.index in b.deps):
                    found.append((a.index, b.index))
        return found

    def depends_on(self, later: TaskNode, earlier: TaskNode) -> bool:
        """Whether `later` (transitively) waits for `earlier`."""
        return bool(self._ancestors[self._own(later).index] >> self._own(earlier).index & 1)

    def critical_path(self) -> tuple[float, list[TaskNode]]:
        """(total cost, nodes) of the most expensive path through the graph."""
        if not self.nodes:
            return 0.0, []
        bottom = self.bottom_levels()
        succs = self._successors()
        node = max(range(len(self.nodes)), key=lambda i: (bottom[i], -i))  # an entry node
        path = [node]
        while succs[node]:
            node = max(succs[node], key=lambda i: (bottom[i], -i))
            path.append(node)
        return bottom[path[0]], [self.nodes[i] for i in path]

    def bottom_levels(self) -> list[float]:
        """For each node: its cost plus the costliest path after it (list-scheduling priority)."""
        succs = self._successors()
        bottom = [0.0] * len(self.nodes)
        for i in range(len(self.nodes) - 1, -1, -1):
            bottom[i] = self.nodes[i].cost + max((bottom[j] for j in succs[i]), default=0.0)
        return bottom

    def _successors(self) -> list[list[int]]:
        succs: list[list[int]] = [[] for _ in self.nodes]
        for n in self.nodes:
            for p in n.deps:
                succs[p].append(n.index)
        return succs

    def schedule(self, num_streams: int = 1, policy: str = "critical_path") -> Schedule:
        """Assign tasks to `num_streams` streams and plan the waits (see schedule.Schedule)."""
        from .schedule import Schedule
        return Schedule(self, num_streams, policy)

    # ---- inspection -------------------------------------------------------------------------------

    def _assignment(self, assignment: Sequence[int] | None) -> Sequence[int] | None:
        """A stream per node (a Schedule's .assignment), checked; None as given."""
        if assignment is None:
            return None
        try:
            numbers = [as_int(a) for a in assignment]  # (numpy's ints too)
        except TypeError:
            numbers = []
        checked = [a for a in numbers if a is not None and a >= 0]
        if len(checked) != len(numbers) or len(checked) != len(self.nodes):
            raise InvalidArgumentError(f"assignment must give each of the {len(self.nodes)} "
                                       f"tasks a stream number >= 0 (a Schedule's .assignment)")
        return checked

    def to_dict(self, assignment: Sequence[int] | None = None) -> dict:
        """Nodes and edges as plain data (stream per node when an assignment is given)."""
        assignment = self._assignment(assignment)
        return {"nodes": [{"id": n.index, "kind": n.kind, "name": n.label, "cost": n.cost,
                           "deps": [{"task": p, "why": w} for p, w in n.deps.items()],
                           **({"stream": assignment[n.index]} if assignment else {})}
                          for n in self.nodes]}

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """JSON text of to_dict(); also written to `path` when given."""
        from .graph import json_text
        return json_text(self.to_dict(), path)

    def to_dot(self, assignment: Sequence[int] | None = None) -> str:
        """Graphviz dot; edges labelled RAW/WAR/WAW/explicit, nodes coloured by stream if assigned."""
        from .graph import _escape
        assignment = self._assignment(assignment)
        colours = ("lightblue", "lightgreen", "lightpink", "khaki", "lavender", "lightsalmon")
        lines = ["digraph taskgraph {", "  node [shape=box, style=filled, fontsize=10];"]
        for n in self.nodes:
            colour = colours[assignment[n.index] % len(colours)] if assignment else "white"
            where = f"\\nstream {assignment[n.index]}" if assignment else ""
            lines.append(f'  t{n.index} [label="{n.index}: {_escape(n.label)}{where}", '
                         f'fillcolor={colour}];')
        for p, i, why in self.edges():
            lines.append(f'  t{p} -> t{i} [label="{why}", fontsize=8];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def __len__(self) -> int:
        return len(self.nodes)


def _clip(rng: tuple[int, int], nbytes: int | None) -> tuple[int, int]:
    start, end = rng
    return (start, min(end, start + nbytes)) if nbytes is not None else rng
