"""Communicators across processes: one rank per process (`mpiexec -n N python prog.py`), the
ranks meeting over MPI through mpi4py (the optional `[mpi]` extra).

Each collective is a host function on the caller's stream (so it is stream-ordered like any
task): it first exchanges the ranks' call descriptions, point to point, so that a mismatch
fails every rank with E_PARA naming each call and a rank that never comes fails the others
with E_TIMEOUT naming it, as in one process; then it moves the data with MPI's own collective
on host-reachable views of the buffers. The collectives are MPI's non-blocking ones, all the
parts of a group started before any is waited for (two communicators may be used in either
order inside one), and only once every rank voted to go: a rank that never comes is reported
within HCCL_EXEC_TIMEOUT, never waited for inside MPI.
A part that timed out before every rank took part breaks the communicator, as in one process:
the ranks' later calls would no longer pair up, so they are refused. (On the cpu and sim backends device memory is host
memory, so the views are the staging buffers; a device backend would stage through pinned
ones here.) Over MPI, a communicator's collectives must be issued in the same order on every
rank, as MPI requires. A rank's comm_destroy sends the others a notice of how many calls it
made: their parts of a call it never made fail at once with E_REMOTE, as in one process.
A rank whose interpreter exits (sys.exit, an uncaught exception) without comm_destroy sends
the same notice as it exits (a process killed, or ended by os._exit, cannot: the others then
time out).
The processes of a communicator find each other through join.py (only they take part).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import cast

import numpy as np

from ..engine import ENGINE
from ..engine.task import HOST_FUNC, Task
from ..memory.buffer import BufferSlice
from .comm import Communicator, GroupState, RootInfo, is_local, read_setting
from ..errors import AscentError
from . import join
from .constants import HcclError, HcclReduceOp, HcclResult
from .meeting import Meeting

_log = logging.getLogger("ascentrt.hccl")
_LAUNCHER_SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS")


def launched_under_mpi() -> bool:
    """Whether this process is one of several that an MPI launcher started."""
    for name in _LAUNCHER_SIZES:
        try:
            if int(os.environ.get(name, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


def maker_tag() -> str:
    """What a root info made in this process says about it: its COMM_WORLD rank."""
    return join.maker_tag(_mpi().COMM_WORLD.Get_rank())


def _mpi():
    """mpi4py's MPI module, or E_NOT_SUPPORT saying how to get it."""
    try:
        from mpi4py import MPI
    except ImportError:
        raise HcclError("communicators across processes need mpi4py and an MPI: pip install "
                        "'ascentrt[mpi]' (mpi4py and the mpich wheel), then run under mpiexec",
                        code=HcclResult.E_NOT_SUPPORT) from None
    return MPI


def _poll(requests, deadline: float, objects: bool = False) -> list:
    """Test the requests until all completed or the deadline passed: per request whether it
    completed, or (objects: requests of pickled messages) (completed, message)."""
    done = [(False, None)] * len(requests)
    pause = 0.0
    while True:
        for i, r in enumerate(requests):
            if not done[i][0]:
                done[i] = r.test() if objects else (r.Test(), None)
        if all(d[0] for d in done) or time.monotonic() >= deadline:
            return done if objects else [d[0] for d in done]
        time.sleep(pause)
        pause = min(0.001, pause + 0.00005)  # a busy start, then at most a millisecond


_NOTICE_TAG = 3  # a destroy notice on a group's ctl communicator (the meetings' tags are 0-2 mod 4)


class MpiGroup(GroupState):
    """A communicator whose ranks are processes: this rank, and MPI's communicators."""

    transport = "mpi"

    def __init__(self, comm, rank: int, device):
        super().__init__([device if r == rank else None for r in range(comm.Get_size())])
        self.rank = rank
        self.data = comm          # MPI's collectives on the buffers
        self.ctl = comm.Dup()     # the call descriptions, point to point
        self.vote = comm.Dup()    # each rank's go (or abort) once it heard the others
        self.seq = 0              # collectives this rank has called
        self.tag_span = comm.Get_attr(_mpi().TAG_UB) // 4  # sequence numbers before tags repeat
        self.gone: dict[int, tuple] = {}  # destroyed rank -> (its collectives, its send/recv counts)
        self._notices: list = []  # this rank's destroy notices in flight
        self.pid = os.getpid()    # (a forked child holds a copy: it is no rank of it)
        _LIVE.add(self)

    def on_destroy(self, rank: int, exited: bool = False) -> None:
        """This rank was destroyed (`exited`: its process exits without having destroyed it):
        tell the others how many calls it made (their parts of the ones it never made then fail
        at once, E_REMOTE, as in one process)."""
        with self.lock:
            notice = (self.seq, dict(self.p2p), exited)
        self._notices = [self.ctl.isend(notice, dest=q, tag=_NOTICE_TAG)
                         for q in range(self.size) if q != rank]

    def leave(self, wait_s: float) -> None:
        """This rank's process exits without having destroyed it: tell the others as a destroy
        would, and give the notices up to `wait_s` to leave before MPI is finalized."""
        with self.lock:
            if os.getpid() != self.pid or self.destroyed[self.rank]:
                return
            self.destroyed[self.rank] = True
        self.on_destroy(self.rank, exited=True)
        deadline = time.monotonic() + wait_s
        while not _mpi().Request.Testall(self._notices) and time.monotonic() < deadline:
            time.sleep(0.001)

    def hear_notices(self) -> None:
        """Take in the destroy notices of the other ranks that arrived."""
        MPI = _mpi()
        status = MPI.Status()
        with self.lock:
            while (msg := self.ctl.improbe(source=MPI.ANY_SOURCE, tag=_NOTICE_TAG, status=status)) is not None:
                self.gone[status.Get_source()] = msg.recv()


_LIVE: weakref.WeakSet = weakref.WeakSet()  # this process's MPI communicators
_LEAVE_WAIT_S = 2.0  # how long an exiting rank lets its notices leave


@atexit.register  # (Python's exit handlers run before mpi4py finalizes MPI)
def _leave_at_exit() -> None:
    """At interpreter exit: each communicator this rank never destroyed tells the others it
    left (their parts of calls it never made fail at once with E_REMOTE, not after
    HCCL_EXEC_TIMEOUT, as if it were slow)."""
    for group in list(_LIVE):
        try:
            group.leave(_LEAVE_WAIT_S)
        except Exception:  # (MPI finalized already, or the process is going down: nothing to tell)
            _log.debug("ascentrt.hccl: could not tell the other ranks this one left", exc_info=True)


def comm_init(nranks: int, root_info: RootInfo, rank: int, device) -> Communicator | None:
    """Join, as `rank` of `nranks`, the communicator of the processes passing the same root
    info (only they call this: see join.py). None when this process made the root info and
    another of its threads joins it too: its ranks are threads of this process."""
    MPI = _mpi()
    maker = MPI.COMM_WORLD.Get_rank() if is_local(root_info) else join.maker_of(root_info.internal)
    if maker is None or not 0 <= maker < MPI.COMM_WORLD.Get_size():
        raise HcclError("comm_init_root_info: this root info does not name an MPI process of this "
                        "job: over MPI, one process of the group makes it (get_root_info) and "
                        "sends it to the others", code=HcclResult.E_PARA)
    digest = int.from_bytes(hashlib.sha256(root_info.internal).digest()[:7], "little")
    timeout = read_setting("HCCL_CONNECT_TIMEOUT")
    members = join.join(MPI, digest, maker, nranks, rank, device.id, timeout)
    if members is None:
        return None
    world = MPI.COMM_WORLD
    # (a collective over the members alone, all of them told to go: it completes)
    sub = world.Create_group(world.Get_group().Incl(members), tag=digest % (1 << 15))
    return Communicator(MpiGroup(sub, rank, device), rank)


class RemoteCall:
    """Another rank's call, as its description told it (what the meeting checks and records)."""

    __slots__ = ("rank", "op", "count", "nbytes", "sig", "text", "site", "posted_ns", "done_ns",
                 "task", "stream")

    def __init__(self, rank, op, count, nbytes, sig, text, site):
        self.rank, self.op, self.count, self.nbytes = rank, op, count, nbytes
        self.sig, self.text, self.site = sig, text, site
        self.posted_ns, self.done_ns, self.task, self.stream = 0, 0, None, None

    def signature(self) -> tuple:
        """What must agree between the ranks (as the rank sent it)."""
        return self.sig

    def describe(self) -> str:
        """The call as text (as the rank sent it)."""
        return self.text


def post(comm: Communicator, call, pair: tuple | None, parts) -> None:
    """Queue the rank's part: a host function on its stream (held for group_end in a group).
    A stream that refuses it leaves the communicator as if the call was never made."""
    group = cast(MpiGroup, comm.group)
    with group.lock:
        if group.broken is not None:  # (refused: nothing queued, no sequence number taken)
            raise group.broken.again()
        if pair is None:
            seq = group.seq
            key, ranks = ("coll", seq), tuple(range(group.size))
            group.seq += 1
        else:
            seq = group.p2p.get((*pair, call.op), 0)
            key, ranks = ("p2p", *pair, seq), pair
            group.p2p[(*pair, call.op)] = seq + 1
        meeting = Meeting(group, key, seq, ranks, local=False)  # (the other ranks: other processes)
        meeting.calls[call.rank] = call
        group.flight.add(meeting)
    item = (group, meeting, call, pair)
    task = Task(HOST_FUNC, lambda: run([item]), (), f"hccl_{call.op}")
    task.nbytes = call.nbytes
    task.reads, task.writes = _accesses(call, group.size)  # (for the race sanitizer)
    call.task = task
    if parts is not None:
        parts.append((call.stream, item))
        return
    _submit([call.stream], [(call.stream, task)], [item])


def _submit(streams, work, items) -> None:
    """Queue the host functions (all or none); a refusal withdraws the items, latest first."""
    try:
        ENGINE.submit_all(streams, work)
    except BaseException as exc:
        for group, meeting, call, pair in reversed(items):  # the calls never were
            with group.lock:  # (only the rank's latest call can be taken back)
                if pair is None:
                    if group.seq == meeting.seq + 1:
                        group.seq -= 1
                elif group.p2p[(*pair, call.op)] == meeting.seq + 1:
                    group.p2p[(*pair, call.op)] -= 1
                group.flight.forget(meeting)
        if isinstance(exc, HcclError) or not isinstance(exc, AscentError):
            raise
        raise HcclError(f"the stream refused the collective: {exc}",
                        code=HcclResult.E_RUNTIME) from exc


def queue_group(parts) -> None:
    """Queue a group's MPI parts: one host function per stream, running them together, all
    queued at once (or, refused, none)."""
    tasks = group_tasks(parts or ())
    if tasks:
        _submit([st for st, _, _ in tasks], [(st, t) for st, t, _ in tasks],
                [it for _, _, its in tasks for it in its])


def group_tasks(parts) -> list:
    """(stream, task, items): one host function per stream for the MPI parts of a group."""
    per_stream: dict = {}
    for stream, item in parts:
        per_stream.setdefault(stream, []).append(item)
    out = []
    for stream, its in per_stream.items():
        task = Task(HOST_FUNC, lambda its=its: run(its), (), "hccl_group")
        task.nbytes = sum(it[2].nbytes for it in its)
        spans = [_accesses(it[2], it[0].size) for it in its]
        task.reads = tuple(b for r, _ in spans for b in r)
        task.writes = tuple(b for _, w in spans for b in w)
        for it in its:
            it[2].task = task
        out.append((stream, task, its))
    return out


_SPANS = {"all_reduce": (1, 1), "reduce_scatter": (0, 1), "all_gather": (1, 0),
          "all_to_all": (0, 0), "broadcast": (1, 1), "send": (1, None), "recv": (None, 1),
          "barrier": (None, None)}  # per op, send and receive bytes: 1 = nbytes, 0 = nbytes x ranks


def _accesses(call, size: int) -> tuple:
    """(reads, writes): the bytes of its buffers a part reads and writes, as buffer slices."""
    spans = _SPANS[call.op]
    out = []
    for loc, k in ((call.send, spans[0]), (call.recv, spans[1])):
        out.append(() if k is None or loc is None else
                   (BufferSlice(loc[0], loc[1], call.nbytes * (1 if k else size)),))
    reads, writes = out
    if call.op == "broadcast" and call.rank != call.root:
        reads = ()
    elif call.op == "broadcast":
        writes = ()
    return reads, writes


def run(items) -> None:
    """Run the parts (one, or a group's on one stream): exchange and check the calls, then
    move the data. Raises the first failure (HcclError)."""
    items = [it[:3] for it in items]
    for group, meeting, _ in items:
        if group.broken is not None:  # called before the communicator broke: it never pairs up
            _fail(meeting, group.broken.again())
    _exchange(items)
    MPI = _mpi()
    # Every rank voted go: each is in these very parts, so MPI's collectives end. A group's are
    # all started before any is waited for (the ranks may start them in different orders);
    # one part alone runs MPI's blocking collective (a few tens of microseconds faster).
    start = len(items) > 1
    moves = [(meeting, _move(MPI, group, meeting, call, start)) for group, meeting, call in items]
    requests = [req for _, (reqs, _) in moves for req in reqs]
    if requests:
        MPI.Request.Waitall(requests)
    for _, (_, then) in moves:
        if then is not None:
            then()
    for group, meeting, call in items:
        call.done_ns = call.stream.device.now_ns()
        meeting.state = "done"
        if meeting.key[0] == "coll":  # it completed here, so every rank took part in it
            for q in meeting.ranks:
                group.completed(q, meeting.seq)


def _tag(meeting: Meeting) -> int:
    """The message tag of a meeting: its sequence number and kind (a collective, or a
    send/recv in one direction: a pair of ranks may have both directions in flight), cycling
    through the tags MPI allows (a stale message of a meeting that gave up is dropped by the
    sequence number it carries)."""
    key = meeting.key
    kind = 0 if key[0] == "coll" else 1 if key[1] < key[2] else 2
    return (meeting.seq % meeting.group.tag_span) * 4 + kind


def _hear(comm, wanted: list, deadline: float, gone=None) -> list:
    """Receive one message (a Python object) per (source, tag, key) in `wanted` whose first element is
    `key` (others are stale: dropped), until the deadline; the payloads (None: not heard, GONE:
    not waited for, as gone(i) said: the rank will never send it)."""
    got: list = [None] * len(wanted)
    reqs = {i: comm.irecv(source=src, tag=tag) for i, (src, tag, _) in enumerate(wanted)}
    while reqs:
        order = list(reqs)
        # (in rounds: between them, a rank whose communicator was destroyed is noticed)
        heard = _poll([reqs[i] for i in order], min(deadline, time.monotonic() + 0.05), objects=True)
        for i, (ok, message) in zip(order, heard):
            if not ok:
                if gone is not None and gone(i):
                    reqs.pop(i).Cancel()
                    got[i] = GONE
                continue
            payload = message  # (mpi4py unpickled it)
            src, tag, key = wanted[i]
            if payload[0] == key:
                got[i] = payload
                del reqs[i]
            else:  # left by a meeting that gave up long ago: listen again
                reqs[i] = comm.irecv(source=src, tag=tag)
        if time.monotonic() >= deadline:
            for req in reqs.values():
                req.Cancel()
            break
    return got


GONE = ("gone",)  # what _hear gives for a message a destroyed rank will never send


def _gone(group, meeting: Meeting) -> int | None:
    """A rank of the meeting whose communicator was destroyed before it called it (as its
    notice said), or None."""
    group.hear_notices()
    for q, (seq, p2p, _) in list(group.gone.items()):
        if q in meeting.ranks and q != group.rank:  # (its count says whether it called it)
            key = meeting.key
            if key[0] == "coll":
                if meeting.seq >= seq:
                    return q
            elif meeting.seq >= p2p.get((key[1], key[2], "send" if q == key[1] else "recv"), 0):
                return q
    return None


def _abandoned(group, meeting: Meeting, rank: int) -> HcclError:
    """The error of `meeting`, which `rank` left (see _gone) before it called it."""
    return meeting.abandoned_by(rank, exited=group.gone[rank][2])


def _exchange(items) -> None:
    """Send each part's call description to its meeting's other ranks and hear theirs, all
    parts at once (a group's sends and receives must not wait for each other); fail with
    E_TIMEOUT naming the ranks not heard from, or E_PARA when the calls disagree."""
    timeout = exec_timeout()
    for group, meeting, _ in items:
        q = _gone(group, meeting)  # (a rank that was destroyed before calling it never will)
        if q is not None:
            _fail(meeting, _abandoned(group, meeting, q))
    sends, wanted, whose = [], [], []
    for group, meeting, call in items:
        me = call.rank
        desc = (meeting.key, call.op, call.count, call.nbytes, call.signature(),
                call.describe(), call.site, group.last_done[me])
        for q in meeting.ranks:
            if q != me:
                sends.append(group.ctl.isend(desc, dest=q, tag=_tag(meeting)))
                wanted.append((group.ctl, q, _tag(meeting), meeting.key))
                whose.append((group, meeting, q))
    abandoned: dict = {}  # meeting key -> a rank destroyed before it called it

    def gone(i: int) -> bool:
        group, meeting, _ = whose[i]
        if meeting.key not in abandoned:
            q = _gone(group, meeting)
            if q is None:
                return False
            abandoned[meeting.key] = q
        return True
    heard = _hear_all(wanted, _deadline(timeout), gone)
    for _, meeting, _ in items:
        if meeting.key in abandoned:  # (every other rank waits for it too: none votes on it)
            for r in sends:
                r.wait()
            _fail(meeting, _abandoned(group, meeting, abandoned[meeting.key]))
    for (group, meeting, q), payload in zip(whose, heard):
        if payload is not None:
            _, op, count, nbytes, sig, text, site, last = payload
            meeting.calls[q] = RemoteCall(q, op, count, nbytes, sig, text, site)
            group.last_done[q] = max(group.last_done[q], last)
    timed_out = None
    unheard = {}  # meeting key -> the ranks not heard from
    for group, meeting, call in items:
        missing = [q for (_, m, q), p in zip(whose, heard) if m is meeting and p is None]
        unheard[meeting.key] = missing
        if missing and timed_out is None:
            # (a rank's description goes out when its stream reaches the call: one not heard
            # from may have called it behind other work)
            timed_out = (meeting, HcclError(
                f"{meeting.name} timed out after {timeout:g} s (HCCL_EXEC_TIMEOUT) on rank "
                f"{call.rank}: rank(s) {', '.join(map(str, missing))} have not reached it (not "
                f"called, or their stream has not run up to it; last completed: "
                f"{group.last_completed_text(missing)})", code=HcclResult.E_TIMEOUT))
    for r in sends:
        r.wait()
    # Every rank votes: go once it heard all the others, abort when it gave up. A rank enters
    # MPI's collective only on every go, so a late rank never waits in it for ranks that left.
    vote = "abort" if timed_out is not None else "go"
    cast, ballots, voters = [], [], []
    for group, meeting, call in items:
        for q in meeting.ranks:
            if q != call.rank:
                cast.append(group.vote.isend((meeting.key, vote, unheard[meeting.key]), dest=q,
                                             tag=_tag(meeting)))
                ballots.append((group.vote, q, _tag(meeting), meeting.key))
                voters.append((meeting, q))
    for r in cast:
        r.wait()  # (a few bytes: sent at once, whether or not the peer ever takes them)
    if timed_out is not None:
        meeting = timed_out[0]
        _break(meeting, f"rank(s) {', '.join(map(str, unheard[meeting.key]))} reached it", timed_out[1])
        _fail(*timed_out)
    # Each rank that called votes within its own timeout of hearing the others: twice the
    # timeout is only passed by a rank that died or stalled between the two.
    votes = _hear_all(ballots, _deadline(2 * timeout if timeout else None))
    for (meeting, q), got in zip(voters, votes):
        if got is None or got[1] != "go":
            if got is None:
                why = "sent no vote (it stalled or died)"
            else:
                why = (f"gave up waiting for it (HCCL_EXEC_TIMEOUT) before rank(s) "
                       f"{', '.join(map(str, got[2]))} reached it (called it and their stream "
                       f"ran up to it)")
            error = HcclError(f"{meeting.name}: rank {q} {why}", code=HcclResult.E_TIMEOUT)
            _break(meeting, f"rank {q} took part in it", error)
            _fail(meeting, error)
    for _, meeting, _ in items:
        error = meeting.mismatch()
        if error is not None:
            _fail(meeting, error)


def _hear_all(wanted: list, deadline: float, gone=None) -> list:
    """_hear over several communicators: wanted is (comm, source, tag, key) per message, gone(i)
    whether message i will never come."""
    got = [None] * len(wanted)
    by_comm: dict = {}
    for i, (comm, src, tag, key) in enumerate(wanted):
        by_comm.setdefault(id(comm), (comm, []))[1].append((i, (src, tag, key)))
    for comm, entries in by_comm.values():
        mine = None if gone is None else (lambda j, entries=entries: gone(entries[j][0]))
        for (i, _), payload in zip(entries, _hear(comm, [e for _, e in entries], deadline, mine)):
            got[i] = payload
    return got


def _deadline(timeout: float | None) -> float:
    """The monotonic deadline `timeout` seconds from now (None: never)."""
    return float("inf") if timeout is None else time.monotonic() + timeout


def exec_timeout() -> float | None:
    """HCCL_EXEC_TIMEOUT in seconds (None: 0, never time out); HcclError E_PARA naming a bad one."""
    return read_setting("HCCL_EXEC_TIMEOUT")


def _break(meeting: Meeting, what: str, error: HcclError | None = None) -> None:
    """Meeting failed before `what` (some rank took no part in it, or left it): a later call
    of that rank would take its place, so the communicator is broken, as in one process (see
    Meeting.break_off): every later call is refused, and those queued already fail at once."""
    group = meeting.group
    if group.broken is None:
        why = f" (the failure: {error})" if error is not None else ""
        group.broken = HcclError(
            f"communicator {group.id} is broken: {meeting.name} failed before {what}, so the "
            f"ranks' later calls no longer pair up; destroy it on every rank (comm_destroy) and "
            f"make a new one{why}", code=HcclResult.E_TIMEOUT)


def _fail(meeting: Meeting, error: HcclError) -> None:
    meeting.error = error
    meeting.state = "failed"
    _log.error("ascentrt.hccl: %s\n%s", error, meeting.group.flight.dump())
    raise error


_OPS = {HcclReduceOp.SUM: "SUM", HcclReduceOp.PROD: "PROD", HcclReduceOp.MAX: "MAX",
        HcclReduceOp.MIN: "MIN"}
_UFUNCS = {HcclReduceOp.SUM: np.add, HcclReduceOp.PROD: np.multiply,
           HcclReduceOp.MAX: np.maximum, HcclReduceOp.MIN: np.minimum}


def _view(loc, nbytes: int, dtype) -> np.ndarray:
    alloc, off = loc
    return alloc._bytes()[off:off + nbytes].view(dtype)


def _move(MPI, group, meeting: Meeting, call, start: bool) -> tuple[list, Callable[[], None] | None]:
    """Move the data of one part with MPI's collective (`start`: only start its non-blocking
    one): (the requests in flight, what to do once they completed, or None)."""
    comm, op, dt, n = group.data, call.op, call.dtype, call.nbytes
    size = group.size

    def coll(name: str, *args, **kwargs) -> list:
        if start:
            return [getattr(comm, "I" + name[0].lower() + name[1:])(*args, **kwargs)]
        getattr(comm, name)(*args, **kwargs)
        return []
    if op == "barrier":
        return coll("Barrier"), None
    if op in ("send", "recv"):
        tag = meeting.seq % (1 << 15)
        buf = _view(call.send if op == "send" else call.recv, n, np.uint8)
        if op == "send":
            return [comm.Isend(buf, dest=call.peer, tag=tag)], None
        return [comm.Irecv(buf, source=call.peer, tag=tag)], None
    if op == "broadcast":
        return coll("Bcast", _view(call.recv, n, dt), root=call.root), None
    if op == "all_gather":
        send, recv = _view(call.send, n, dt), _view(call.recv, n * size, dt)
        return coll("Allgather", MPI.IN_PLACE if _same(call.send, call.recv, call.rank * n) else send,
                    recv), None
    if op == "all_to_all":
        send = _view(call.send, n * size, dt)
        return coll("Alltoall", send.copy() if _overlap(call, n * size, n * size) else send,
                    _view(call.recv, n * size, dt)), None
    total = n if op == "all_reduce" else n * size
    send = _view(call.send, total, dt)
    recv = _view(call.recv, n, dt)
    if dt == np.float16:  # MPI has no half type: gather the ranks' inputs, reduce with numpy
        parts = np.empty((size, send.size), dtype=send.dtype)
        lo = 0 if op == "all_reduce" else call.rank * call.count

        def reduce() -> None:
            with np.errstate(all="ignore"):  # (as a device: an overflow gives inf, no warning)
                recv[:] = _UFUNCS[call.reduce].reduce(parts[:, lo:lo + recv.size], axis=0)
        return coll("Allgather", send, parts), reduce
    mpi_op = getattr(MPI, _OPS[call.reduce])
    if op == "all_reduce":
        return coll("Allreduce", MPI.IN_PLACE if _same(call.send, call.recv) else send, recv,
                    op=mpi_op), None
    return coll("Reduce_scatter_block", send.copy() if _overlap(call, n * size, n) else send, recv,
                op=mpi_op), None


def _overlap(call, send_bytes: int, recv_bytes: int) -> bool:
    """Whether the send and receive buffers share bytes (MPI wants them apart)."""
    (sa, so), (ra, ro) = call.send, call.recv
    return sa is ra and so < ro + recv_bytes and ro < so + send_bytes


def _same(a, b, offset: int = 0) -> bool:
    """Whether location a is location b shifted by `offset` bytes (an in-place call)."""
    return a[0] is b[0] and a[1] == b[1] + offset
