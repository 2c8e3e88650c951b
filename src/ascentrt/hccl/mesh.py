"""All-reduce and reduce-scatter over a full mesh, as HCCL runs them between the NPUs of one
server: rank r reduces chunk r straight from every rank's send buffer, in one step.

On the cpu backend every device's memory is this machine's, so a rank reaches every other
rank's buffers at the speed of memory and there is no link to share; what bounds a collective
is the memory traffic, and one thread already saturates it. A ring moves each chunk through
n-1 partial sums in memory and then n-1 copies; the mesh reads each input once and, in the
all-reduce, writes the reduced tile into every rank's receive buffer while it is still in the
cache (Plan.mesh_reduce), so the traffic is close to the floor: every input read once, every
output written once. Each rank's step starts once every rank's stream reached the collective
(it writes into their receive buffers) and a rank's part ends once every rank's step did.
The sum runs in rank order, as numpy folds the ranks' arrays.
"""

from __future__ import annotations

from .plan import Plan, alone, at, chunks, meeting_calls


def all_reduce(plan: Plan) -> None:
    """Rank r reduces chunk r of every send buffer into chunk r of every receive buffer."""
    m, ranks, n, calls = meeting_calls(plan)
    c0 = calls[0]
    if n == 1:
        alone(plan, c0.nbytes)
        return
    written = []
    for r, (off, size) in enumerate(chunks(c0.count, n, c0.dtype.itemsize)):
        plan.wait(r, *(m.arrive[q] for q in ranks))
        plan.mesh_reduce(r, [at(c.recv, off, size) for c in calls],
                         [at(c.send, off, size) for c in calls], c0.dtype, c0.reduce,
                         f"mesh reduce chunk {r} of every rank into every rank")
        written.append(plan.mark(r))
    for r in range(n):
        plan.finish(r, *(written[q] for q in range(n) if q != r))


def reduce_scatter(plan: Plan) -> None:
    """Rank r reduces block r of every send buffer into its receive buffer."""
    m, ranks, n, calls = meeting_calls(plan)
    size = calls[0].nbytes  # recv_count elements, in bytes: block i of send is [i*size, (i+1)*size)
    if n == 1:
        alone(plan, size)
        return
    read = []
    for r in range(n):
        plan.wait(r, *(m.arrive[q] for q in ranks))
        plan.mesh_reduce(r, [at(calls[r].recv, 0, size)], [at(c.send, r * size, size) for c in calls],
                         calls[0].dtype, calls[0].reduce, f"mesh reduce block {r} of every rank")
        read.append(plan.mark(r))
    for r in range(n):
        plan.finish(r, *(read[q] for q in range(n) if q != r))


PLANS = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter}

__all__ = ["PLANS", "all_reduce", "reduce_scatter"]
