"""The collectives and send/recv: each checks its arguments (nothing is queued on bad input),
posts the rank's call to its meeting, and queues the rank's part on its stream.

Inside group_start() / group_end() the parts queued on one stream are merged: every arrival
first, then every wait, so a rank may send to and receive from its neighbours in one group
without its own send waiting for a receive queued behind it (as NCCL's groups).
"""

from __future__ import annotations

import threading

from ..validate import as_int
from ..callsite import user_site
from ..interrupts import raised_by_handler
from ..engine import ENGINE, Task
from ..engine.task import EVENT_RECORD, EVENT_WAIT, KERNEL
from ..backends.base import Cost
from ..errors import AscentError
from ..memory.buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView
from ..memory.registry import REGISTRY
from ..stream import Stream
from . import mpi
from .algorithms import lane_plan
from .comm import Communicator, check_comm, read_setting
from .constants import HcclDataType, HcclError, HcclReduceOp, HcclResult, data_type, reduce_op
from .meeting import Call, Meeting



class _ThreadGroup(threading.local):
    """This host thread's open group_start(): its depth and the parts it collected."""

    depth = 0
    parts: list | None = None
    mpi_parts: list | None = None


_group = _ThreadGroup()
_NO_TIME = Cost(seconds=0.0)  # the part's own task: it only reports the outcome
Memory = DeviceBuffer | BufferSlice | TypedView | int  # what holds a call's data: a device
                                                      # buffer, a slice, a typed view, a pointer
_stream_handles: list = []  # fn(int) -> Stream: the facade that hands out int stream handles


def _location(x, nbytes: int, device, role: str) -> tuple:
    """(allocation, offset) of a device buffer, slice, typed view or pointer holding `nbytes` on
    `device`."""
    if type(x) is TypedView:  # (its bytes: the dtype is the call's, as memcpy takes it)
        x = x.buffer
    if x is None or (type(x) is int and x == 0):  # (`x == 0` of an array is an array)
        raise HcclError(f"{role} is null", code=HcclResult.E_PTR)
    if isinstance(x, (DeviceBuffer, BufferSlice, HostBuffer)):
        addr = x.addr
        if nbytes > x.nbytes:
            raise HcclError(f"{role} holds {x.nbytes} bytes; the call needs {nbytes}",
                            code=HcclResult.E_PARA)
    elif type(x) is int:
        addr = x
    else:
        raise HcclError(f"{role} must be a device buffer, slice, typed view or pointer, got "
                        f"{type(x).__name__}",
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
    number = as_int(value)  # (numpy's ints too, as every byte count of the core takes them)
    if number is None or number < 0 or number >= 1 << 60:
        raise HcclError(f"{what} must be an int >= 0, got {value!r}", code=HcclResult.E_PARA)
    return number


def accept_stream_handles(resolve) -> None:
    """Let the collectives take int stream handles too: `resolve(handle)` gives the Stream
    (the pyACL facade registers its aclrtStream handles here; it raises for a bad one)."""
    if resolve not in _stream_handles:
        _stream_handles.append(resolve)


def _stream(stream, comm) -> Stream:
    if type(stream) is int and _stream_handles:  # an aclrtStream a pyACL program holds
        try:
            stream = _stream_handles[-1](stream)
        except AscentError as exc:
            raise HcclError(f"stream handle {stream:#x}: {exc}", code=HcclResult.E_PTR) from None
    if not isinstance(stream, Stream):
        raise HcclError(f"stream must be a stream (or a pyACL stream handle), got "
                        f"{type(stream).__name__}", code=HcclResult.E_PTR)
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
    rank = as_int(value)  # (numpy's ints too, as counts)
    if rank is None or not 0 <= rank < comm.group.size:
        raise HcclError(f"{what} {value!r} is not a rank of communicator {comm.group.id} "
                        f"(0..{comm.group.size - 1})", code=HcclResult.E_PARA)
    return rank


class _Posted:
    """A call registered with its meeting, and the tasks it queues on its stream."""

    __slots__ = ("group", "key", "meeting", "call", "work", "pair")

    def __init__(self, group, key, meeting, call, work, pair):
        self.group, self.key, self.meeting, self.call = group, key, meeting, call
        self.work, self.pair = work, pair


def _register(comm, call: Call, pair: tuple | None, timeout: float | None) -> _Posted:
    """Give `call` its sequence number and meeting (under the group's lock) and make the tasks
    of the rank's part: the arrival, the wait for the data, and the part's own task."""
    group = comm.group
    with group.lock:
        if group.destroyed[call.rank]:  # (by another thread since check_comm: comm_destroy
            # counted the meetings this rank abandoned under this lock; this one would be none)
            raise HcclError(f"{comm!r} was destroyed", code=HcclResult.E_PTR)
        if group.broken is not None:  # (refused: nothing queued, no sequence number taken)
            raise group.broken.again()
        if pair is None:
            seq = group.seq[call.rank]
            key, ranks = ("coll", seq), tuple(range(group.size))
            group.seq[call.rank] = seq + 1
        else:
            seq = group.p2p.get((*pair, call.op), 0)
            key, ranks = ("p2p", *pair, seq), pair
            group.p2p[(*pair, call.op)] = seq + 1
        meeting = group.meetings.get(key)
        if meeting is None:
            meeting = group.meetings[key] = Meeting(group, key, seq, ranks)
            group.flight.add(meeting)
        arrive = meeting.post(call)
        gone = [r for r in ranks if group.destroyed[r] and r not in meeting.calls]
        if gone and meeting.error is None:
            meeting.fail(meeting.abandoned_by(gone[0]))
    mine = meeting.name_for(call.rank)  # (its own op and direction, for traces and reports)
    rec = Task(EVENT_RECORD, name=f"{mine}: arrive")
    rec.marker = arrive
    rec.on_discard = lambda: meeting.fail(HcclError(
        f"{meeting.name}: rank {call.rank}'s stream {call.stream.id} dropped its part before "
        f"reaching it (a failed stream in STOP mode, or destroyed)", code=HcclResult.E_RUNTIME))
    wait = Task(EVENT_WAIT, name=mine)
    wait.marker = meeting.done[call.rank]
    wait.nbytes = call.nbytes
    wait.timeout = timeout
    wait.timeout_error = meeting.timed_out
    wait.timeout_is_last_resort = True
    call.task = wait
    finish = Task(KERNEL, meeting.finisher(call.rank), (), f"hccl_{call.op}")
    finish.nbytes = call.nbytes
    finish.cost = _NO_TIME
    return _Posted(group, key, meeting, call, [rec, wait, finish], pair)


def _counter(group, posted: _Posted) -> tuple:
    """(table, key) of the counter that gave the part its sequence number."""
    if posted.pair is None:
        return group.seq, posted.call.rank
    return group.p2p, (*posted.pair, posted.call.op)


def _withdraw(posted: _Posted, exc: BaseException) -> None:
    """The stream refused the part. The rank's latest call on its channel, in a meeting not
    started, is forgotten (the communicator goes on as if it was never made); any other is
    failed on every rank (its number is taken: a later call of the rank has the next one)."""
    group, meeting, call = posted.group, posted.meeting, posted.call
    table, key = _counter(group, posted)
    with group.lock:
        if group.meetings.get(posted.key) is meeting and meeting.state == "waiting" \
                and table[key] == meeting.seq + 1:
            meeting.calls.pop(call.rank, None)
            meeting.arrive.pop(call.rank, None)
            table[key] -= 1
            if not meeting.calls:
                del group.meetings[posted.key]
                group.flight.forget(meeting)
            return
    meeting.fail(HcclError(f"{meeting.name}: rank {call.rank}'s stream {call.stream.id} refused "
                           f"its part ({exc})", code=HcclResult.E_RUNTIME))


def _start_ready(group, channel: tuple) -> None:
    """Start the meetings of one channel (the collectives, or one sender-receiver pair) that
    are next in sequence and have every part queued, in sequence order: each lane gets them
    in its rank's call order. A failed meeting (timed out) holds no place in that order.
    Called under the group's lock."""
    meetings = group.meetings
    while True:
        seq = group.started.get(channel, 0)
        key = (*channel, seq)
        m = meetings.get(key)
        if m is None:
            return  # no rank has called it yet
        if m.error is None:
            if not m.ready():
                return
            group.started[channel] = seq + 1
            del meetings[key]
            _start(m)
        else:
            group.started[channel] = seq + 1
            if m.ready():
                del meetings[key]
                m.fail(m.error)  # (releases the parts that came late)


def _start_if_complete(posted: _Posted) -> None:
    """After a part was queued: start what its channel now allows. A part that came to a
    failed meeting is released at once (its task reports the meeting's error)."""
    group, m, key = posted.group, posted.meeting, posted.key
    with group.lock:
        if group.broken is not None and m.error is None and group.meetings.get(key) is m:
            m.fail(group.broken)  # (registered as the communicator broke: it can never pair up)
        if m.error is not None and group.meetings.get(key) is m:
            m.fail(m.error)
            if m.ready() and key[-1] < group.started.get(key[:-1], 0):
                del group.meetings[key]
        _start_ready(group, key[:-1])


def _queue(posts: list) -> None:
    """Queue the parts on their streams (each stream: every arrival before any wait), then
    start the meetings they complete. A refusal withdraws every part, latest first
    (HcclError E_RUNTIME)."""
    streams = list(dict.fromkeys(p.call.stream for p in posts))
    work = [(p.call.stream, p.work[0]) for p in posts] + \
        [(p.call.stream, t) for p in posts for t in p.work[1:]]
    try:
        ENGINE.submit_all(streams, work)
    except BaseException as exc:
        for p in reversed(posts):
            _withdraw(p, exc)
        if isinstance(exc, HcclError) or not isinstance(exc, AscentError) or raised_by_handler(exc):
            raise
        raise HcclError(f"the stream refused the collective: {exc}",
                        code=HcclResult.E_RUNTIME) from exc
    for p in posts:
        _start_if_complete(p)


def _post(comm, call: Call, pair: tuple | None = None) -> None:
    """Post `call` to its meeting and queue the rank's part (or hold it for group_end).
    `pair` is (sender, receiver) for a send/recv, None for a collective of every rank."""
    timeout = read_setting("HCCL_EXEC_TIMEOUT")  # (a bad value fails the call: E_PARA)
    if comm.group.transport == "mpi":
        mpi.post(comm, call, pair, _group.mpi_parts)
        return
    posted = _register(comm, call, pair, timeout)
    parts = _group.parts
    if parts is not None:
        parts.append(posted)
    else:
        _queue([posted])


def _start(meeting: Meeting) -> None:
    """Every rank has called: check the calls agree, then queue the steps on the lanes."""
    error = meeting.mismatch() or meeting.error
    if error is None:
        try:
            plan = lane_plan(meeting)
        except AscentError as exc:
            error = HcclError(f"{meeting.name} could not start: {exc}", code=HcclResult.E_MEMORY
                              if "memory" in str(exc).lower() else HcclResult.E_INTERNAL)
        else:
            try:
                meeting.state = "running"
                plan.submit()
                return
            except AscentError as exc:  # (a lane refused its steps: the sanitizer in raise mode)
                error = HcclError(f"{meeting.name} could not start: {exc}",
                                  code=HcclResult.E_RUNTIME)
            finally:
                plan.release()
    meeting.fail(error)


_NONE = object()  # a collective without buffers (barrier)


def _check_overlap(op: str, send: int, send_bytes: int, recv: int, recv_bytes: int,
                   rank: int) -> None:
    """Send and receive bytes of one allocation may share only the in-place layouts: the same
    buffer (all_reduce, all_to_all), send = block `rank` of recv (all_gather), recv = block
    `rank` of send (reduce_scatter). Any other overlap is E_PARA."""
    if send >= recv + recv_bytes or recv >= send + send_bytes:
        return  # apart
    in_place = {"all_reduce": send == recv, "all_to_all": send == recv,
                "all_gather": send == recv + rank * send_bytes,
                "reduce_scatter": recv == send + rank * recv_bytes}
    if not in_place.get(op, False):
        raise HcclError(f"{op}: the send and receive buffers overlap in a way that is not the "
                        f"in-place layout (send offset {send}, {send_bytes} bytes; receive "
                        f"offset {recv}, {recv_bytes} bytes)", code=HcclResult.E_PARA)


def _collective(op, comm, stream, *, count, dtype=None, reduce=None, root=None, send=_NONE,
                recv=_NONE, send_bytes=0, recv_bytes=0) -> None:
    comm = check_comm(comm)
    stream = _stream(stream, comm)
    device = comm.device
    s = _location(send, send_bytes, device, "send buffer") if send is not _NONE else None
    r = _location(recv, recv_bytes, device, "receive buffer") if recv is not _NONE else None
    if s is not None and r is not None and s[0] is r[0] and op != "broadcast":
        _check_overlap(op, s[1], send_bytes, r[1], recv_bytes, comm.rank)
    nbytes = count * (dtype.itemsize if dtype is not None else 0)
    call = Call(comm.rank, op, count, dtype, reduce, root, None, s, r, nbytes, stream, user_site(3))
    _post(comm, call)


def all_reduce(send: Memory, recv: Memory, count: int, dtype: HcclDataType | int,
               op: HcclReduceOp | int, comm: Communicator, stream: Stream) -> None:
    """recv = the reduction (op) of every rank's send, on every rank (HcclAllReduce)."""
    count, dt, op = _count(count), data_type(dtype), reduce_op(op)
    n = count * dt.itemsize
    _collective("all_reduce", comm, stream, count=count, dtype=dt, reduce=op, send=send, recv=recv,
                send_bytes=n, recv_bytes=n)


def broadcast(buf: Memory, count: int, dtype: HcclDataType | int, root: int, comm: Communicator,
              stream: Stream) -> None:
    """Every rank's buf = the root's buf (HcclBroadcast)."""
    count, dt = _count(count), data_type(dtype)
    comm = check_comm(comm)
    root = _rank(root, comm, "root")
    n = count * dt.itemsize
    _collective("broadcast", comm, stream, count=count, dtype=dt, root=root, send=buf, recv=buf,
                send_bytes=n, recv_bytes=n)


def all_gather(send: Memory, recv: Memory, send_count: int, dtype: HcclDataType | int,
               comm: Communicator, stream: Stream) -> None:
    """recv = every rank's send, in rank order (HcclAllGather)."""
    count, dt = _count(send_count, "send_count"), data_type(dtype)
    comm = check_comm(comm)
    n = count * dt.itemsize
    _collective("all_gather", comm, stream, count=count, dtype=dt, send=send, recv=recv,
                send_bytes=n, recv_bytes=n * comm.group.size)


def reduce_scatter(send: Memory, recv: Memory, recv_count: int, dtype: HcclDataType | int,
                   op: HcclReduceOp | int, comm: Communicator, stream: Stream) -> None:
    """recv = block `rank` of the reduction of every rank's send (HcclReduceScatter)."""
    count, dt, op = _count(recv_count, "recv_count"), data_type(dtype), reduce_op(op)
    comm = check_comm(comm)
    n = count * dt.itemsize
    _collective("reduce_scatter", comm, stream, count=count, dtype=dt, reduce=op, send=send,
                recv=recv, send_bytes=n * comm.group.size, recv_bytes=n)


def all_to_all(send: Memory, recv: Memory, count: int, dtype: HcclDataType | int, comm: Communicator,
               stream: Stream) -> None:
    """Block q of rank r's recv = block r of rank q's send, `count` elements each (HcclAlltoAll
    with equal counts)."""
    count, dt = _count(count), data_type(dtype)
    comm = check_comm(comm)
    n = count * dt.itemsize * comm.group.size
    _collective("all_to_all", comm, stream, count=count, dtype=dt, send=send, recv=recv,
                send_bytes=n, recv_bytes=n)


def barrier(comm: Communicator, stream: Stream) -> None:
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


def send(buf: Memory, count: int, dtype: HcclDataType | int, dest_rank: int, comm: Communicator,
         stream: Stream) -> None:
    """Send `count` elements of buf to `dest_rank`, which receives them with recv (HcclSend)."""
    _p2p("send", buf, count, dtype, dest_rank, comm, stream)


def recv(buf: Memory, count: int, dtype: HcclDataType | int, src_rank: int, comm: Communicator,
         stream: Stream) -> None:
    """Receive `count` elements from `src_rank` into buf (HcclRecv)."""
    _p2p("recv", buf, count, dtype, src_rank, comm, stream)


def group_start() -> None:
    """Open a group of calls on this thread (HcclGroupStart); groups nest."""
    _group.depth = _group.depth + 1
    if _group.depth == 1:
        _group.parts, _group.mpi_parts = [], []


def group_end() -> None:
    """Close the group: queue its parts, per stream every arrival before any wait (HcclGroupEnd)."""
    depth = _group.depth
    if depth == 0:
        raise HcclError("group_end without group_start", code=HcclResult.E_PARA)
    _group.depth = depth - 1
    if depth > 1:
        return
    parts, _group.parts = _group.parts, None
    mpi_parts, _group.mpi_parts = _group.mpi_parts, None
    if parts:
        _queue(parts)
    mpi.queue_group(mpi_parts)  # over MPI: one host function per stream
