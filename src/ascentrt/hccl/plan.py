"""The lane tasks of one collective: a Plan builds them rank by rank (waits on other ranks'
markers, peer copies, reduce kernels on the copy engines, step markers) and queues them at
once; its run-time guards make a failed meeting move nothing, and a lane step that fails fails
the collective on every rank (no rank's part ends before every lane's last step did). The
algorithms (ring, mesh) are written on it.
"""

from __future__ import annotations

import functools

import numpy as np

from ..backends.base import Cost
from ..engine import ENGINE, Task
from ..engine.task import COPY, COPY_ENGINE, EVENT_RECORD, EVENT_WAIT, KERNEL, Marker
from ..errors import AscentError
from ..memory.buffer import BufferSlice, task_view
from .constants import UFUNCS, HcclError, HcclResult

# The tile a mesh reduce folds its inputs through: small enough to stay in a core's L2 cache
# from the first input read to the last output written, large enough that the Python work
# per tile (a few numpy calls) is a small part of moving it.
MESH_TILE = 512 << 10


def _mesh_reduce(outs, ins, ufunc, acc) -> None:
    """Every array of outs = ufunc folded over ins in their order (ins[0] op ins[1], then op
    ins[2], ...), tile by tile through acc, so that each tile is read from memory once and
    written to each output from the cache (views resolved at run time; None: the meeting failed)."""
    if acc is None:
        return
    step, size = len(acc), len(outs[0])
    # As a device's reduce: an overflow gives inf (a 0/0 NaN), never a warning or an exception,
    # whatever numpy error state the thread running it has (on sim: the program's own thread).
    with np.errstate(all="ignore"):
        for lo in range(0, size, step):
            hi = lo + step
            tile = acc if hi <= size else acc[:size - lo]
            ufunc(ins[0][lo:hi], ins[1][lo:hi], out=tile)
            for x in ins[2:]:
                ufunc(tile, x[lo:hi], out=tile)
            for out in outs:
                out[lo:hi] = tile


def _ordered_fold(out, ins, ufunc) -> None:
    """out = ufunc folded over ins in their order (out may be one of ins: an in-place
    collective), as _mesh_reduce does, through a host scratch tile: the transfer it stands for
    (an inline reduce) needs none on the device. None: the meeting failed."""
    if out is not None:
        _mesh_reduce((out,), ins, ufunc, np.empty(min(len(out), MESH_TILE // out.itemsize or 1), out.dtype))


def _modelled_step() -> None:
    """A ring step whose partial sum the chunk's last step recomputes: it moves no data and
    takes the time of the transfer it models."""


@functools.lru_cache(maxsize=256)
def _inline_reduce_cost(nbytes: int, src: int) -> Cost:
    """What an inline-reduce transfer of nbytes from address `src` (on the rank it pulls
    from) costs: the bytes over the link from there, and three passes over them in local
    memory (cached: a frozen dataclass is slow to build)."""
    return Cost(bytes=3.0 * nbytes, link_bytes=float(nbytes), link_src=src)


class Plan:
    """The lane tasks of one meeting, built rank by rank, queued at once by submit()."""

    def __init__(self, meeting, lanes):
        self.meeting = meeting
        self.lanes = lanes          # rank -> the lane its steps go on
        self.work: list = []
        self.scratch: list = []     # buffers freed behind the lanes' steps
        self.last: dict[int, Marker] = {}   # rank -> the marker of its lane's last step so far
        self.unmarked: set[int] = set()     # ranks whose lane has a step after its last marker
        self.ending: list[tuple[int, tuple]] = []  # (rank, what it waited for) of finish() calls

    def _task(self, r: int, task: Task) -> None:
        self.work.append((self.lanes[r], task))

    def _step(self, r: int, task: Task) -> None:
        self.unmarked.add(r)
        self._task(r, task)

    def wait(self, r: int, *markers) -> None:
        """Rank r's lane waits for each marker."""
        for m in markers:
            if m is not None:
                t = Task(EVENT_WAIT, name=f"{self.meeting.name_for(r)}: wait")
                t.marker = m
                self._task(r, t)

    def markers(self, r: int, count: int) -> list[Marker]:
        """`count` markers that rank r's lane will record, one per step (made up front: other
        ranks' steps wait on them before rank r's steps are built)."""
        made = [Marker(self.lanes[r], 0, False) for _ in range(count)]
        self.meeting.markers.extend(made)
        return made

    def mark(self, r: int, m: Marker | None = None) -> Marker:
        """Rank r's lane records marker m (a new one when None) here: the end of a step."""
        if m is None:
            m = self.markers(r, 1)[0]
        t = Task(EVENT_RECORD, name=f"{self.meeting.name_for(r)}: step")
        t.marker = m
        self._task(r, t)
        self.last[r] = m
        self.unmarked.discard(r)
        return m

    def copy(self, r: int, dst: BufferSlice, src: BufferSlice, what: str) -> None:
        """Rank r's lane copies src to dst (a peer copy when src is another device's)."""
        n = dst.nbytes
        if not n or dst.addr == src.addr:
            return
        t = Task(COPY, None, (dst.addr, n, src.addr, n, n, 1), f"{self.meeting.name_for(r)}: {what}")
        t.nbytes = n
        t.resolve = self._copy_guard(dst, src)
        self._step(r, t)

    def modelled_reduce(self, r: int, nbytes: int, src: BufferSlice, what: str) -> None:
        """Rank r's copy engine takes the time of an inline-reduce transfer of `nbytes` from
        `src` (the rank it pulls from) and moves nothing (see ring_reduce)."""
        if not nbytes:
            return
        t = Task(KERNEL, _modelled_step, (), f"{self.meeting.name_for(r)}: {what}")
        t.executor = COPY_ENGINE
        t.nbytes = nbytes
        t.cost = _inline_reduce_cost(nbytes, src.addr)
        self._step(r, t)

    def ring_reduce(self, r: int, out: BufferSlice, ins: list[BufferSlice], dtype, op,
                    what: str, src: BufferSlice) -> None:
        """The last ring step of a chunk, on rank r's copy engine: out = op folded over every
        rank's input `ins` in rank order, as the cpu backend's mesh computes it (the ring's
        own order of sums would give other float roundings), in the time of one inline-reduce
        transfer from the predecessor (`src`), which is what the ring's model charges."""
        if not out.nbytes:
            return
        t = Task(KERNEL, _ordered_fold, (out, tuple(ins), UFUNCS[op]), f"{self.meeting.name_for(r)}: {what}")
        t.executor = COPY_ENGINE
        t.nbytes = out.nbytes
        t.cost = _inline_reduce_cost(out.nbytes, src.addr)
        t.reads, t.writes = tuple(ins), (out,)  # for the race sanitizer
        t.resolve = self._fold_guard(dtype)
        self._step(r, t)

    def mesh_reduce(self, r: int, outs: list[BufferSlice], ins: list[BufferSlice], dtype, op,
                    what: str) -> None:
        """Rank r's copy engine reads ins (at least two: its own and its peers' memory), folds
        them with op in their order and writes the result to each of outs (the device's
        out-of-memory error when no scratch tile can be had)."""
        nbytes = outs[0].nbytes
        if not nbytes:
            return
        acc = self.temp(r, min(nbytes, MESH_TILE))
        t = Task(KERNEL, _mesh_reduce, (tuple(outs), tuple(ins), UFUNCS[op], acc),
                 f"{self.meeting.name_for(r)}: {what}")
        t.executor = COPY_ENGINE
        t.nbytes = nbytes * len(ins)
        t.reads, t.writes = (*ins, acc), (*outs, acc)  # for the race sanitizer
        t.resolve = self._mesh_guard(dtype)
        self._step(r, t)

    def temp(self, r: int, nbytes: int) -> BufferSlice:
        """A scratch buffer on rank r's device, ordered on its lane."""
        lane = self.lanes[r]
        buf = lane.device.malloc(max(nbytes, 1), lane)
        self.scratch.append(buf)
        return buf[0:nbytes]

    def finish(self, r: int, *after) -> None:
        """Rank r's part ends once `after` are reached, and every other lane's last step (see
        submit): its done marker is recorded."""
        self.wait(r, *after)
        if r in self.unmarked and len(self.lanes) > 1:
            self.mark(r)  # (a step after its last marker: the other ranks' parts wait for it)
        self.ending.append((r, after))

    def _record_done(self) -> None:
        """Each finishing rank's lane waits for the last step of every other lane it has not
        waited for, then records the rank's done marker: a step that fails anywhere fails the
        meeting before any rank's part ends, so the collective fails on every rank or none."""
        for r, after in self.ending:
            self.wait(r, *(m for q, m in self.last.items() if q != r and m not in after))
            m = self.meeting.done[r]
            m.stream = self.lanes[r]
            t = Task(EVENT_RECORD, name=f"{self.meeting.name_for(r)}: done")
            t.marker = m
            self._task(r, t)
        self.ending = []

    def _step_failed(self, task: Task, exc: BaseException) -> None:
        """The failure hook of the lane tasks: a task's error fails the meeting (under the
        engine lock), which every rank's part then reports on its stream."""
        meeting = self.meeting
        if meeting.error is None:
            code = exc.code if isinstance(exc, HcclError) else HcclResult.E_INTERNAL
            meeting.fail(HcclError(f"{meeting.name}: its step '{task.label}' failed on a "
                                   f"communicator lane ({type(exc).__name__}: {exc})", code=code))

    def submit(self) -> None:
        """Queue every lane task (one engine lock hold; a full lane never makes the host wait:
        what drains it may be the very thread submitting)."""
        self._record_done()
        lanes = list(dict.fromkeys(lane for lane, _ in self.work))
        if lanes:
            # Every step runs as part of each rank's task: a buffer a rank freed after its call
            # (its free waits for that task) still shows the steps its bytes.
            calls = self.meeting.calls.values()
            parts = tuple((c.stream, c.task.id) for c in calls)
            behalf = tuple((f"rank {c.rank}'s {c.op}", c.stream.id, c.site,
                            tuple(b[0] for b in (c.send, c.recv) if b is not None)) for c in calls)
            failed = self._step_failed
            for _, t in self.work:
                t.acting_for = parts
                t.on_behalf = behalf  # (a race names the rank whose buffer it touched)
                t.on_fail = failed
            ENGINE.submit_all(lanes, self.work, internal=True)

    def release(self) -> None:
        """Free the scratch buffers: reused only after every stream's queued work (the lanes
        that read them included), or at once when nothing was queued."""
        for buf in self.scratch:
            buf.free()
        self.scratch = []

    # ---- run-time guards: a failed meeting moves nothing -----------------------------------

    def _alive(self, *slices) -> bool:
        meeting = self.meeting
        if meeting.error is None:
            try:
                for s in slices:
                    s.base._bytes()
            except AscentError as exc:
                meeting.fail(HcclError(f"{meeting.name}: a buffer was freed while the collective "
                                       f"used it ({exc})", code=HcclResult.E_PTR))
        return meeting.error is None

    def _copy_guard(self, dst, src):
        def resolve(args):
            return args if self._alive(dst, src) else (args[0], 0, args[2], 0, 0, 1)
        return resolve

    def _fold_guard(self, dtype):
        def resolve(args):
            out, ins, ufunc = args
            if not self._alive(out, *ins):
                return None, None, None
            return task_view(out).view(dtype), [task_view(x).view(dtype) for x in ins], ufunc
        return resolve

    def _mesh_guard(self, dtype):
        def resolve(args):
            outs, ins, ufunc, acc = args
            if not self._alive(*outs, *ins, acc):
                return None, None, None, None
            return ([task_view(x).view(dtype) for x in outs], [task_view(x).view(dtype) for x in ins],
                    ufunc, task_view(acc).view(dtype))
        return resolve


def chunks(count: int, n: int, itemsize: int) -> list[tuple[int, int]]:
    """(byte offset, byte length) of n near-equal chunks of `count` elements."""
    base, extra = divmod(count, n)
    out, off = [], 0
    for i in range(n):
        k = (base + (i < extra)) * itemsize
        out.append((off, k))
        off += k
    return out


def meeting_calls(plan: Plan) -> tuple:
    """(meeting, its ranks, how many, their calls in rank order) of a plan."""
    m = plan.meeting
    return m, m.ranks, len(m.ranks), [m.calls[r] for r in m.ranks]


def at(loc, off: int, n: int) -> BufferSlice:
    """Bytes [off, off + n) of a call's buffer location (allocation, offset)."""
    alloc, base = loc
    return BufferSlice(alloc, base + off, n)


def alone(plan: Plan, nbytes: int) -> None:
    """A group of one rank: its part copies `nbytes` from its send buffer to its receive buffer."""
    m = plan.meeting
    (r,) = m.ranks
    c = m.calls[r]
    plan.wait(0, m.arrive[r])
    plan.copy(0, at(c.recv, 0, nbytes), at(c.send, 0, nbytes), "copy")
    plan.finish(0)


__all__ = ["MESH_TILE", "Plan", "alone", "at", "chunks", "meeting_calls"]
