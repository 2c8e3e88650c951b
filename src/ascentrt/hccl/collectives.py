"""The collectives and send/recv: each checks its arguments (nothing is queued on bad input),
posts the rank's call to its meeting, and queues the rank's part on its stream.

Inside group_start() / group_end() the parts queued on one stream are merged: every arrival
first, then every wait, so a rank may send to and receive from its neighbours in one group
without its own send waiting for a receive queued behind it (as NCCL's groups).
"""

from __future__ import annotations

import threading

from .. import config
from ..callsite import user_site
from ..engine import ENGINE, Task
from ..engine.task import EVENT_RECORD, EVENT_WAIT, KERNEL
from ..backends.base import Cost
from ..errors import AscentError
from ..memory.buffer import BufferSlice, DeviceBuffer, HostBuffer
from ..memory.registry import REGISTRY
from ..stream import Stream
from . import mpi
from .algorithms import lane_plan
from .comm import check_comm
from .constants import HcclError, HcclResult, data_type, reduce_op
from .meeting import Call, Meeting

_group = threading.local()   # .depth, .parts: this thread's open group_start()
_NO_TIME = Cost(seconds=0.0)  # the part's own task: it only reports the outcome


def _location(x, nbytes: int, device, role: str) -> tuple:
    """(allocation, offset) of a device buffer, slice or pointer holding `nbytes` on `device`."""
    if x is None or x == 0:
        raise HcclError(f"{role} is null", code=HcclResult.E_PTR)
    if isinstance(x, (DeviceBuffer, BufferSlice, HostBuffer)):
        addr = x.addr
        if nbytes > x.nbytes:
            raise HcclError(f"{role} holds {x.nbytes} bytes; the call needs {nbytes}",
                            code=HcclResult.E_PARA)
    elif type(x) is int:
        addr = x
    else:
        raise HcclError(f"{role} must be a device buffer, slice or pointer, got {type(x).__name__}",
                        code=HcclResult.E_PTR)
    try:
        alloc, off = REGISTRY.resolve(addr, nbytes)
    except AscentError as exc:
        code = HcclResult.E_PARA if REGISTRY.find(addr) is not None else HcclResult.E_PTR
        raise HcclError(f"{role}: {exc}", code=code) from None
    if alloc.kind != "device" or alloc.device is not device:
        where = "host memory" if alloc.kind != "device" else f"memory of device {alloc.device.id}"
        raise HcclError(f"{role} is {where}; this rank runs on device {device.id}",
                        code=HcclResult.E_PARA)
    return alloc, off


def _count(value, what: str = "count") -> int:
    if type(value) is not int or value < 0 or value >= 1 << 60:
        raise HcclError(f"{what} must be an int >= 0, got {value!r}", code=HcclResult.E_PARA)
    return value


def _stream(stream, comm) -> Stream:
    if not isinstance(stream, Stream):
        raise HcclError(f"stream must be a stream, got {type(stream).__name__}", code=HcclResult.E_PTR)
    try:
        stream._check_alive()
    except AscentError as exc:
        raise HcclError(str(exc), code=HcclResult.E_PTR) from None
    if stream._capture is not None:
        raise HcclError(f"stream {stream.id} is being captured into a graph: collectives are not "
                        f"captured (launch the collective outside the capture, or replay the graph "
                        f"and call the collective after it)", code=HcclResult.E_NOT_SUPPORT)
    if stream.device is not comm.device:
        raise HcclError(f"stream {stream.id} is on device {stream.device.id}; rank {comm.rank} of "
                        f"communicator {comm.group.id} runs on device {comm.device.id}",
                        code=HcclResult.E_PARA)
    return stream


def _rank(value, comm, what: str) -> int:
    if type(value) is not int or not 0 <= value < comm.group.size:
        raise HcclError(f"{what} {value!r} is not a rank of communicator {comm.group.id} "
                        f"(0..{comm.group.size - 1})", code=HcclResult.E_PARA)
    return value


def _post(comm, call: Call, pair: tuple | None = None) -> None:
    """Post `call` to its meeting and queue the rank's part (or hold it for group_end).
    `pair` is (sender, receiver) for a send/recv, None for a collective of every rank."""
    group = comm.group
    if group.transport == "mpi":
        mpi.post(comm, call, pair, getattr(_group, "mpi_parts", None))
        return
    timeout = config.get("HCCL_EXEC_TIMEOUT")
    with group.lock:
        if pair is None:
            seq = group.seq[call.rank]
            key, ranks = ("coll", seq), tuple(range(group.size))
        else:
            seq = group.p2p.get((*pair, call.op), 0)
            key, ranks = ("p2p", *pair, seq), pair
        meeting = group.meetings.get(key)
        if meeting is None:
            meeting = group.meetings[key] = Meeting(group, key, seq, ranks)
            group.flight.add(meeting)
        arrive = meeting.post(call)
        rec = Task(EVENT_RECORD, name=f"{meeting.name}: arrive")
        rec.marker = arrive
        wait = Task(EVENT_WAIT, name=meeting.name)
        wait.marker = meeting.done[call.rank]
        wait.nbytes = call.nbytes
        wait.timeout = timeout
        wait.timeout_error = meeting.timed_out
        call.task = wait
        finish = Task(KERNEL, meeting.finisher(call.rank), (), f"hccl_{call.op}")
        finish.nbytes = call.nbytes
        finish.cost = _NO_TIME
        parts = getattr(_group, "parts", None)
        if parts is not None:
            parts.append((call.stream, rec, wait, finish))
        else:
            try:
                ENGINE.submit_all([call.stream], [(call.stream, rec), (call.stream, wait),
                                                  (call.stream, finish)])
            except BaseException:
                meeting.calls.pop(call.rank, None)  # refused by the stream: the call never was
                meeting.arrive.pop(call.rank, None)
                if not meeting.calls:
                    del group.meetings[key]
                raise
        if pair is None:
            group.seq[call.rank] += 1
        else:
            group.p2p[(*pair, call.op)] = seq + 1
        if meeting.complete():
            del group.meetings[key]
            _start(meeting)


def _start(meeting: Meeting) -> None:
    """Every rank has called: check the calls agree, then queue the steps on the lanes."""
    error = meeting.mismatch()
    if error is None and meeting.error is None:
        try:
            plan = lane_plan(meeting)
            meeting.state = "running"
            plan.submit()
            return
        except AscentError as exc:
            error = HcclError(f"{meeting.name} could not start: {exc}", code=HcclResult.E_MEMORY
                              if "memory" in str(exc).lower() else HcclResult.E_INTERNAL)
    meeting.fail(error or meeting.error)


_NONE = object()  # a collective without buffers (barrier)


def _collective(op, comm, stream, *, count, dtype=None, reduce=None, root=None, send=_NONE,
                recv=_NONE, send_bytes=0, recv_bytes=0) -> None:
    comm = check_comm(comm)
    stream = _stream(stream, comm)
    device = comm.device
    s = _location(send, send_bytes, device, "send buffer") if send is not _NONE else None
    r = _location(recv, recv_bytes, device, "receive buffer") if recv is not _NONE else None
    nbytes = count * (dtype.itemsize if dtype is not None else 0)
    call = Call(comm.rank, op, count, dtype, reduce, root, None, s, r, nbytes, stream, user_site(3))
    _post(comm, call)


def all_reduce(send, recv, count, dtype, op, comm, stream) -> None:
    """recv = the reduction (op) of every rank's send, on every rank (HcclAllReduce)."""
    count, dt, op = _count(count), data_type(dtype), reduce_op(op)
    n = count * dt.itemsize
    _collective("all_reduce", comm, stream, count=count, dtype=dt, reduce=op, send=send, recv=recv,
                send_bytes=n, recv_bytes=n)


def broadcast(buf, count, dtype, root, comm, stream) -> None:
    """Every rank's buf = the root's buf (HcclBroadcast)."""
    count, dt = _count(count), data_type(dtype)
    comm = check_comm(comm)
    root = _rank(root, comm, "root")
    n = count * dt.itemsize
    _collective("broadcast", comm, stream, count=count, dtype=dt, root=root, send=buf, recv=buf,
                send_bytes=n, recv_bytes=n)


def all_gather(send, recv, send_count, dtype, comm, stream) -> None:
    """recv = every rank's send, in rank order (HcclAllGather)."""
    count, dt = _count(send_count, "send_count"), data_type(dtype)
    comm = check_comm(comm)
    n = count * dt.itemsize
    _collective("all_gather", comm, stream, count=count, dtype=dt, send=send, recv=recv,
                send_bytes=n, recv_bytes=n * comm.group.size)


def reduce_scatter(send, recv, recv_count, dtype, op, comm, stream) -> None:
    """recv = block `rank` of the reduction of every rank's send (HcclReduceScatter)."""
    count, dt, op = _count(recv_count, "recv_count"), data_type(dtype), reduce_op(op)
    comm = check_comm(comm)
    n = count * dt.itemsize
    _collective("reduce_scatter", comm, stream, count=count, dtype=dt, reduce=op, send=send,
                recv=recv, send_bytes=n * comm.group.size, recv_bytes=n)


def all_to_all(send, recv, count, dtype, comm, stream) -> None:
    """Block q of rank r's recv = block r of rank q's send, `count` elements each (HcclAlltoAll
    with equal counts)."""
    count, dt = _count(count), data_type(dtype)
    comm = check_comm(comm)
    n = count * dt.itemsize * comm.group.size
    _collective("all_to_all", comm, stream, count=count, dtype=dt, send=send, recv=recv,
                send_bytes=n, recv_bytes=n)


def barrier(comm, stream) -> None:
    """The stream goes on once every rank's stream has reached the barrier (HcclBarrier)."""
    _collective("barrier", comm, stream, count=0)


def _p2p(op, buf, count, dtype, peer, comm, stream) -> None:
    count, dt = _count(count), data_type(dtype)
    comm = check_comm(comm)
    peer = _rank(peer, comm, "dest_rank" if op == "send" else "src_rank")
    if peer == comm.rank:
        raise HcclError(f"rank {comm.rank} cannot {op} to itself", code=HcclResult.E_PARA)
    stream = _stream(stream, comm)
    n = count * dt.itemsize
    loc = _location(buf, n, comm.device, "buffer")
    pair = (comm.rank, peer) if op == "send" else (peer, comm.rank)
    call = Call(comm.rank, op, count, dt, None, None, peer, loc if op == "send" else None,
                loc if op == "recv" else None, n, stream, user_site(3))
    _post(comm, call, pair)


def send(buf, count, dtype, dest_rank, comm, stream) -> None:
    """Send `count` elements of buf to `dest_rank`, which receives them with recv (HcclSend)."""
    _p2p("send", buf, count, dtype, dest_rank, comm, stream)


def recv(buf, count, dtype, src_rank, comm, stream) -> None:
    """Receive `count` elements from `src_rank` into buf (HcclRecv)."""
    _p2p("recv", buf, count, dtype, src_rank, comm, stream)


def group_start() -> None:
    """Open a group of calls on this thread (HcclGroupStart); groups nest."""
    _group.depth = getattr(_group, "depth", 0) + 1
    if _group.depth == 1:
        _group.parts, _group.mpi_parts = [], []


def group_end() -> None:
    """Close the group: queue its parts, per stream every arrival before any wait (HcclGroupEnd)."""
    depth = getattr(_group, "depth", 0)
    if depth == 0:
        raise HcclError("group_end without group_start", code=HcclResult.E_PARA)
    _group.depth = depth - 1
    if depth > 1:
        return
    parts, _group.parts = _group.parts, None
    mpi_parts, _group.mpi_parts = _group.mpi_parts, None
    streams = list(dict.fromkeys(p[0] for p in parts))
    work = [(p[0], p[1]) for p in parts] + [(p[0], t) for p in parts for t in p[2:]]
    if work:
        ENGINE.submit_all(streams, work)
    for stream, task in mpi.group_tasks(mpi_parts):  # over MPI: one host function per stream
        stream._submit(task)
