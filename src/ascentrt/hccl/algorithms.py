"""The steps each collective queues on its ranks' lanes once every rank has called, and the
choice of algorithm: a full mesh (mesh.py) for all-reduce and reduce-scatter on the cpu
backend, rings everywhere else.

Reduce-scatter and all-gather use a ring: step by step each rank pulls one chunk from its
predecessor over the peer link, reducing it into its own as it arrives (an inline-reduce
transfer on its copy engine, as HCCL's SDMA reduce on Atlas A2) or, in the all-gather,
copying it (a peer copy). Every link carries 1/n of the data per step, so the time on `sim`
follows the peer-link model. All-reduce is that ring's reduce-scatter, then an all-gather by
owner: at step k every rank pulls the chunk rank k finished. On a full mesh (HCCS between the
NPUs of one server, NVSwitch) each pair has its own link, so each rank still receives 1/n of
the data per step and 2(n-1)/n of it crosses each rank's links in all, the bound NCCL's bus
bandwidth is defined by: on `sim` the ring reaches the preset's link bandwidth (a mesh there
would read from n-1 peers at once, a link use the preset's per-link model does not describe).

On the cpu backend there are no links: the devices share this machine's memory, one thread
saturates it, and what a collective costs is its memory traffic. There the mesh's one-step
reduce (every input read once, every output written once from the cache) moves a little over
half the ring's bytes, so all-reduce and reduce-scatter use it (HCCL too picks its algorithm
by topology).

Results are the same bits on every backend: a reduction folds the ranks' inputs in rank order,
as the mesh does. The ring's steps before a chunk's last one take their modelled time and
move nothing; the last computes the whole fold (a ring's own running sums would round
differently from the cpu backend's with three ranks or more).

Broadcast, all-to-all and send/recv pull straight from the rank that holds the data. A
barrier only joins the ranks' streams.

Ordering comes from markers: a rank's step waits for the step of the rank it pulls from, and
(all-reduce) a rank overwrites a chunk only after its successor has read it; a rank's part
ends once every rank that reads its buffers has done so.
"""

from __future__ import annotations

from ..engine import Task
from ..engine.task import EVENT_RECORD, Marker
from . import mesh
from .plan import Plan, alone, at, chunks, meeting_calls


def all_reduce(plan: Plan) -> None:
    """n-1 ring reduce-scatter steps, then n-1 all-gather steps by owner."""
    m, ranks, n, calls = meeting_calls(plan)
    c0 = calls[0]
    parts = chunks(c0.count, n, c0.dtype.itemsize)
    send = [[at(calls[r].send, *p) for p in parts] for r in range(n)]  # [rank][chunk]
    recv = [[at(calls[r].recv, *p) for p in parts] for r in range(n)]
    if n == 1:
        alone(plan, c0.nbytes)
        return
    steps = [plan.markers(r, n - 1) for r in range(n)]
    for r in range(n):
        prev = (r - 1) % n
        plan.wait(r, m.arrive[ranks[r]], m.arrive[ranks[prev]])
        for s in range(n - 1):              # reduce-scatter: chunk c gathers one more rank
            c = (r - s - 1) % n
            if s:
                plan.wait(r, steps[prev][s - 1])
            what = f"rs{s} reduce chunk {c} from rank {prev}"
            if s < n - 2:  # (a partial sum the last step computes again, in rank order)
                plan.modelled_reduce(r, recv[r][c].nbytes, send[prev][c], what)
            else:
                plan.ring_reduce(r, recv[r][c], [send[q][c] for q in range(n)], c0.dtype,
                                 c0.reduce, what, send[prev][c])
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
    m, ranks, n, calls = meeting_calls(plan)
    c0 = calls[0]
    size = c0.nbytes  # recv_count elements, in bytes: chunk i of send is [i*size, (i+1)*size)
    if n == 1:
        alone(plan, size)
        return
    steps = [plan.markers(r, n - 1) for r in range(n)]
    for r in range(n):
        prev = (r - 1) % n
        plan.wait(r, m.arrive[ranks[r]], m.arrive[ranks[prev]])
        for s in range(n - 1):
            c = (r - s - 2) % n
            if s:
                plan.wait(r, steps[prev][s - 1])
            what = f"rs{s} reduce chunk {c} from rank {prev}"
            if s < n - 2:  # (a partial sum the last step computes again, in rank order)
                plan.modelled_reduce(r, size, at(calls[prev].send, c * size, size), what)
            else:
                plan.ring_reduce(r, at(calls[r].recv, 0, size),
                                 [at(calls[q].send, c * size, size) for q in range(n)],
                                 c0.dtype, c0.reduce, what, at(calls[prev].send, c * size, size))
            plan.mark(r, steps[r][s])
    for r in range(n):  # (every rank's last step reads rank r's send: its part ends after them)
        plan.finish(r, *(steps[q][-1] for q in range(n) if q != r))


def all_gather(plan: Plan) -> None:
    """Ring all-gather: rank r places its block, then pulls the others' one step at a time."""
    m, ranks, n, calls = meeting_calls(plan)
    size = calls[0].nbytes  # send_count elements, in bytes
    placed = [plan.markers(r, 1)[0] for r in range(n)]
    steps = [plan.markers(r, n - 1) for r in range(n)]
    for r in range(n):
        plan.wait(r, m.arrive[ranks[r]])
        plan.copy(r, at(calls[r].recv, r * size, size), at(calls[r].send, 0, size), "place own block")
        plan.mark(r, placed[r])
    for r in range(n):
        prev = (r - 1) % n
        for t in range(n - 1):
            d = (r - 1 - t) % n
            plan.wait(r, placed[prev] if t == 0 else steps[prev][t - 1])
            plan.copy(r, at(calls[r].recv, d * size, size), at(calls[prev].recv, d * size, size),
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
        plan.copy(r, at(calls[r].recv, 0, size), at(calls[root].recv, 0, size),
                  f"pull from root {root}")
        pulled.append(plan.mark(r))
        plan.finish(r)
    plan.wait(root, m.arrive[ranks[root]])
    plan.finish(root, *pulled)


def all_to_all(plan: Plan) -> None:
    """Rank r pulls block r of every rank's send buffer into block q of its receive buffer
    (in place, every rank first stages its send buffer: it overwrites it while others read)."""
    m, ranks, n, calls = meeting_calls(plan)
    size = calls[0].nbytes  # per-rank block
    sources: list[tuple] = []
    staged: list[Marker | None] = []
    for r in range(n):
        c = calls[r]
        if c.send[0] is c.recv[0] and c.send[1] == c.recv[1]:
            stage = plan.temp(r, size * n)
            plan.wait(r, m.arrive[ranks[r]])
            plan.copy(r, stage, at(c.send, 0, size * n), "stage the send buffer")
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
            plan.copy(r, at(calls[r].recv, q * size, size), at(sources[q], r * size, size),
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
    plan.copy(dst, at(d.recv, 0, d.nbytes), at(s.send, 0, s.nbytes), f"recv from rank {src}")
    sender_done = m.done[src]
    sender_done.stream = plan.lanes[dst]
    t = Task(EVENT_RECORD, name=f"{m.name_for(src)}: sent")
    t.marker = sender_done
    plan._task(dst, t)
    plan.finish(dst)


PLANS = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter, "all_gather": all_gather,
         "broadcast": broadcast, "all_to_all": all_to_all, "barrier": barrier, "send": send_recv}


def lane_plan(meeting) -> Plan:
    """The Plan of a complete meeting (scratch memory already taken from the lanes' devices),
    with the algorithm for its devices' backend (the mesh's where it has one on cpu).
    A send/recv goes on the receiver's lane for that sender, a collective on the ranks'
    collective lanes: each lane gets its meetings in its ranks' call order."""
    group = meeting.group
    op = meeting.calls[meeting.ranks[0]].op
    if meeting.key[0] == "p2p":
        src, dst = meeting.ranks
        plan = Plan(meeting, {dst: group.recv_lane(dst, src)})
    else:
        plan = Plan(meeting, group.lanes)
    plans = mesh.PLANS if group.devices[0].properties.backend == "cpu" else {}
    try:
        plans.get(op, PLANS[op])(plan)
    except BaseException:
        plan.release()
        raise
    return plan


__all__ = ["PLANS", "lane_plan"]
