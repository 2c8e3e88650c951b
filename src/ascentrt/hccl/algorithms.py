"""The steps each collective queues on its ranks' lanes once every rank has called.

Reduce-scatter and all-gather use a ring: step by step each rank pulls one chunk from its
predecessor over the peer link, reducing it into its own as it arrives (an inline-reduce
transfer on its copy engine, as HCCL's SDMA reduce on Atlas A2) or, in the all-gather,
copying it (a peer copy). Every link carries 1/n of the data per step, so the time on `sim`
follows the peer-link model. All-reduce is that ring's reduce-scatter, then an all-gather by
owner: at step k every rank pulls the chunk rank k finished. On a full mesh (HCCS between the
NPUs of one server, NVSwitch) each pair has its own link, so each rank still receives 1/n of
the data per step and 2(n-1)/n of it crosses each rank's links in all, the bound NCCL's bus
bandwidth is defined by. The fused reduce and the owner order matter on the cpu backend,
where one thread saturates memory bandwidth: a separate copy and reduce would move 5/3 the
bytes per step, and the n-1 readers of one chunk at once share its cache lines.

Broadcast, all-to-all and send/recv pull straight from the rank that holds the data. A
barrier only joins the ranks' streams.

Ordering comes from markers: a rank's step waits for the step of the rank it pulls from, and
(all-reduce) a rank overwrites a chunk only after its successor has read it; a rank's part
ends once every rank that reads its buffers has done so.
"""

from __future__ import annotations

import functools

from ..backends.base import Cost
from ..engine import ENGINE, Task
from ..engine.task import COPY, COPY_ENGINE, EVENT_RECORD, EVENT_WAIT, KERNEL, Marker
from ..errors import AscentError
from ..memory.buffer import BufferSlice, task_view
from .constants import UFUNCS, HcclError, HcclResult


def _reduce(out, a, b, ufunc) -> None:
    """out = ufunc(a, b), elementwise (views resolved at run time; None: the meeting failed)."""
    if out is not None:
        ufunc(a, b, out=out)


_reduce.access = "wrr"  # type: ignore[attr-defined]  # for the race sanitizer: out written, a and b read


@functools.lru_cache(maxsize=256)
def _inline_reduce_cost(nbytes: int) -> Cost:
    """What an inline-reduce transfer of nbytes costs: the bytes over the link, and three
    passes over them in local memory (cached: a frozen dataclass is slow to build)."""
    return Cost(bytes=3.0 * nbytes, link_bytes=float(nbytes))


class Plan:
    """The lane tasks of one meeting, built rank by rank, queued at once by submit()."""

    def __init__(self, meeting, lanes):
        self.meeting = meeting
        self.lanes = lanes          # rank -> the lane its steps go on
        self.work: list = []
        self.scratch: list = []     # buffers freed behind the lanes' steps

    def _task(self, r: int, task: Task) -> None:
        self.work.append((self.lanes[r], task))

    def wait(self, r: int, *markers) -> None:
        """Rank r's lane waits for each marker."""
        for m in markers:
            if m is not None:
                t = Task(EVENT_WAIT, name=f"{self.meeting.name}: wait")
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
        t = Task(EVENT_RECORD, name=f"{self.meeting.name}: step")
        t.marker = m
        self._task(r, t)
        return m

    def copy(self, r: int, dst: BufferSlice, src: BufferSlice, what: str) -> None:
        """Rank r's lane copies src to dst (a peer copy when src is another device's)."""
        n = dst.nbytes
        if not n or dst.addr == src.addr:
            return
        t = Task(COPY, None, (dst.addr, n, src.addr, n, n, 1), f"{self.meeting.name}: {what}")
        t.nbytes = n
        t.resolve = self._copy_guard(dst, src)
        self._task(r, t)

    def reduce(self, r: int, out: BufferSlice, own: BufferSlice, peer: BufferSlice, dtype, op,
               what: str) -> None:
        """Rank r's copy engine reads `peer` (another rank's memory, over the link) and writes
        out = op(own, peer): an inline-reduce transfer, as HCCL's SDMA reduce on Atlas A2."""
        if not out.nbytes:
            return
        t = Task(KERNEL, _reduce, (out, own, peer, UFUNCS[op]), f"{self.meeting.name}: {what}")
        t.executor = COPY_ENGINE
        t.nbytes = out.nbytes
        t.cost = _inline_reduce_cost(out.nbytes)
        t.resolve = self._reduce_guard(dtype)
        self._task(r, t)

    def temp(self, r: int, nbytes: int) -> BufferSlice:
        """A scratch buffer on rank r's device, ordered on its lane."""
        lane = self.lanes[r]
        buf = lane.device.malloc(max(nbytes, 1), lane)
        self.scratch.append(buf)
        return buf[0:nbytes]

    def finish(self, r: int, *after) -> None:
        """Rank r's part ends once `after` are reached: its done marker is recorded."""
        self.wait(r, *after)
        m = self.meeting.done[r]
        m.stream = self.lanes[r]
        t = Task(EVENT_RECORD, name=f"{self.meeting.name}: done")
        t.marker = m
        self._task(r, t)

    def submit(self) -> None:
        """Queue every lane task (one engine lock hold; a full lane never makes the host wait:
        what drains it may be the very thread submitting)."""
        lanes = list(dict.fromkeys(lane for lane, _ in self.work))
        if lanes:
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

    def _reduce_guard(self, dtype):
        def resolve(args):
            out, a, b, ufunc = args
            if not self._alive(out, a, b):
                return None, None, None, None
            return (task_view(out).view(dtype), task_view(a).view(dtype), task_view(b).view(dtype),
                    ufunc)
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


def _calls(plan: Plan) -> tuple:
    """(meeting, its ranks, how many, their calls in rank order) of a plan."""
    m = plan.meeting
    return m, m.ranks, len(m.ranks), [m.calls[r] for r in m.ranks]


def _at(loc, off: int, n: int) -> BufferSlice:
    """Bytes [off, off + n) of a call's buffer location (allocation, offset)."""
    alloc, base = loc
    return BufferSlice(alloc, base + off, n)


def all_reduce(plan: Plan) -> None:
    """n-1 ring reduce-scatter steps, then n-1 all-gather steps by owner."""
    m, ranks, n, calls = _calls(plan)
    c0 = calls[0]
    parts = chunks(c0.count, n, c0.dtype.itemsize)
    send = [[_at(calls[r].send, *p) for p in parts] for r in range(n)]  # [rank][chunk]
    recv = [[_at(calls[r].recv, *p) for p in parts] for r in range(n)]
    if n == 1:
        plan.wait(0, m.arrive[ranks[0]])
        plan.copy(0, _at(c0.recv, 0, c0.nbytes), _at(c0.send, 0, c0.nbytes), "copy")
        plan.finish(0)
        return
    steps = [plan.markers(r, n - 1) for r in range(n)]
    for r in range(n):
        prev = (r - 1) % n
        plan.wait(r, m.arrive[ranks[r]], m.arrive[ranks[prev]])
        for s in range(n - 1):              # reduce-scatter: chunk c gathers one more rank
            c = (r - s - 1) % n
            if s:
                plan.wait(r, steps[prev][s - 1])
            src = send[prev][c] if s == 0 else recv[prev][c]
            plan.reduce(r, recv[r][c], send[r][c], src, c0.dtype, c0.reduce,
                        f"rs{s} reduce chunk {c} from rank {prev}")
            plan.mark(r, steps[r][s])
    # All-gather: at step k every rank copies the chunk rank k finished (chunk k + 1), so the
    # n - 1 readers of one chunk run together and share its cache lines.
    gathered = [plan.markers(r, n) for r in range(n)]
    for r in range(n):
        nxt = (r + 1) % n
        for k in range(n):
            if k == r:
                continue
            d = (k + 1) % n
            s_read = (r - k - 1) % n     # the rank-(r+1) RS step that read recv_r[d], if any
            plan.wait(r, steps[k][n - 2], steps[nxt][s_read] if 1 <= s_read <= n - 2 else None)
            plan.copy(r, recv[r][d], recv[k][d], f"ag pull chunk {d} from rank {k}")
            plan.mark(r, gathered[r][k])
    for r in range(n):
        plan.finish(r, *(gathered[q][r] for q in range(n) if q != r))


def reduce_scatter(plan: Plan) -> None:
    """Ring reduce-scatter: after n-1 steps rank r holds the reduction of chunk r."""
    m, ranks, n, calls = _calls(plan)
    c0 = calls[0]
    size = c0.nbytes  # recv_count elements, in bytes: chunk i of send is [i*size, (i+1)*size)
    if n == 1:
        plan.wait(0, m.arrive[ranks[0]])
        plan.copy(0, _at(c0.recv, 0, size), _at(c0.send, 0, size), "copy")
        plan.finish(0)
        return
    work = [plan.temp(r, size * n) for r in range(n)]    # partial sums, chunk c at c * size
    steps = [plan.markers(r, n - 1) for r in range(n)]
    for r in range(n):
        prev = (r - 1) % n
        plan.wait(r, m.arrive[ranks[r]], m.arrive[ranks[prev]])
        for s in range(n - 1):
            c = (r - s - 2) % n
            if s:
                plan.wait(r, steps[prev][s - 1])
                src = work[prev][c * size:(c + 1) * size]
            else:
                src = _at(calls[prev].send, c * size, size)
            out = _at(calls[r].recv, 0, size) if s == n - 2 else work[r][c * size:(c + 1) * size]
            plan.reduce(r, out, _at(calls[r].send, c * size, size), src, c0.dtype, c0.reduce,
                        f"rs{s} reduce chunk {c} from rank {prev}")
            plan.mark(r, steps[r][s])
    for r in range(n):
        plan.finish(r, steps[(r + 1) % n][-1])


def all_gather(plan: Plan) -> None:
    """Ring all-gather: rank r places its block, then pulls the others' one step at a time."""
    m, ranks, n, calls = _calls(plan)
    size = calls[0].nbytes  # send_count elements, in bytes
    placed = [plan.markers(r, 1)[0] for r in range(n)]
    steps = [plan.markers(r, n - 1) for r in range(n)]
    for r in range(n):
        plan.wait(r, m.arrive[ranks[r]])
        plan.copy(r, _at(calls[r].recv, r * size, size), _at(calls[r].send, 0, size), "place own block")
        plan.mark(r, placed[r])
    for r in range(n):
        prev = (r - 1) % n
        for t in range(n - 1):
            d = (r - 1 - t) % n
            plan.wait(r, placed[prev] if t == 0 else steps[prev][t - 1])
            plan.copy(r, _at(calls[r].recv, d * size, size), _at(calls[prev].recv, d * size, size),
                      f"ag{t} pull block {d} from rank {prev}")
            plan.mark(r, steps[r][t])
    for r in range(n):
        plan.finish(r, steps[(r + 1) % n][-1] if n > 1 else None)


def broadcast(plan: Plan) -> None:
    """Every rank pulls the root's buffer; the root's part ends when all have."""
    m = plan.meeting
    ranks = m.ranks
    calls = [m.calls[r] for r in ranks]
    root = calls[0].root
    size = calls[0].nbytes
    pulled = []
    for r in range(len(ranks)):
        if r == root:
            continue
        plan.wait(r, m.arrive[ranks[r]], m.arrive[ranks[root]])
        plan.copy(r, _at(calls[r].recv, 0, size), _at(calls[root].recv, 0, size),
                  f"pull from root {root}")
        pulled.append(plan.mark(r))
        plan.finish(r)
    plan.wait(root, m.arrive[ranks[root]])
    plan.finish(root, *pulled)


def all_to_all(plan: Plan) -> None:
    """Rank r pulls block r of every rank's send buffer into block q of its receive buffer
    (in place, every rank first stages its send buffer: it overwrites it while others read)."""
    m, ranks, n, calls = _calls(plan)
    size = calls[0].nbytes  # per-rank block
    sources: list[tuple] = []
    staged: list[Marker | None] = []
    for r in range(n):
        c = calls[r]
        if c.send[0] is c.recv[0] and c.send[1] == c.recv[1]:
            stage = plan.temp(r, size * n)
            plan.wait(r, m.arrive[ranks[r]])
            plan.copy(r, stage, _at(c.send, 0, size * n), "stage the send buffer")
            sources.append((stage.base, stage.offset))
            staged.append(plan.mark(r))
        else:
            sources.append(c.send)
            staged.append(None)
    pulled = []
    for r in range(n):
        plan.wait(r, *(m.arrive[ranks[q]] for q in range(n)), *staged)
        for k in range(n):
            q = (r + k) % n  # start with its own block, then its successors: links spread out
            plan.copy(r, _at(calls[r].recv, q * size, size), _at(sources[q], r * size, size),
                      f"pull block {r} from rank {q}")
        pulled.append(plan.mark(r))
    for r in range(n):
        plan.finish(r, *(pulled[q] for q in range(n) if q != r))


def barrier(plan: Plan) -> None:
    """Each rank's part ends once every rank's stream has reached the barrier."""
    m = plan.meeting
    for r in range(len(m.ranks)):
        plan.wait(r, *(m.arrive[q] for q in m.ranks))
        plan.finish(r)


def send_recv(plan: Plan) -> None:
    """The receiver pulls the sender's buffer; both parts end on the receiver's lane."""
    m = plan.meeting
    src, dst = m.ranks                     # a p2p meeting's ranks: (sender, receiver)
    s, d = m.calls[src], m.calls[dst]
    plan.wait(dst, m.arrive[src], m.arrive[dst])
    plan.copy(dst, _at(d.recv, 0, d.nbytes), _at(s.send, 0, s.nbytes), f"recv from rank {src}")
    sender_done = m.done[src]
    sender_done.stream = plan.lanes[dst]
    t = Task(EVENT_RECORD, name=f"{m.name}: sent")
    t.marker = sender_done
    plan._task(dst, t)
    plan.finish(dst)


PLANS = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter, "all_gather": all_gather,
         "broadcast": broadcast, "all_to_all": all_to_all, "barrier": barrier, "send": send_recv}


def lane_plan(meeting) -> Plan:
    """The Plan of a complete meeting (scratch memory already taken from the lanes' devices).
    A send/recv goes on the receiver's lane for that sender, a collective on the ranks'
    collective lanes: each lane gets its meetings in its ranks' call order."""
    group = meeting.group
    op = meeting.calls[meeting.ranks[0]].op
    if meeting.key[0] == "p2p":
        src, dst = meeting.ranks
        plan = Plan(meeting, {dst: group.recv_lane(dst, src)})
    else:
        plan = Plan(meeting, group.lanes)
    try:
        PLANS[op](plan)
    except BaseException:
        plan.release()
        raise
    return plan


__all__ = ["PLANS", "Plan", "chunks", "lane_plan"]
