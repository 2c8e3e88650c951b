"""The meeting point of one collective (or one send/recv pair): each rank's call as it arrives,
the check that the calls match, and the markers through which the ranks' streams and their
communicator lanes order each other.

A rank's call queues on its own stream: a record of `arrive[rank]` (its stream reached the
collective), a wait on `done[rank]` (recorded by a lane once the data moved), and the
collective's own task, which reports the meeting's error if it has one. When the last rank
arrives, the algorithm's steps are queued on the lanes. A meeting that can never complete
(a rank that never arrives) fails every rank's task with E_TIMEOUT when the wait times out.
"""

from __future__ import annotations

import logging

from ..engine import ENGINE
from ..engine.task import Marker
from .constants import HcclError, HcclResult

_log = logging.getLogger("ascentrt.hccl")


class Call:
    """One rank's call: what it asked for and where, and its buffers (allocation, offset)."""

    __slots__ = ("rank", "op", "count", "dtype", "reduce", "root", "peer", "send", "recv",
                 "nbytes", "stream", "site", "posted_ns", "done_ns", "task")

    def __init__(self, rank, op, count, dtype, reduce, root, peer, send, recv, nbytes, stream, site):
        self.rank, self.op, self.count, self.dtype, self.reduce = rank, op, count, dtype, reduce
        self.root, self.peer, self.send, self.recv, self.nbytes = root, peer, send, recv, nbytes
        self.stream, self.site = stream, site
        self.posted_ns = stream.device.now_ns() if stream is not None else 0  # the device clock:
        self.done_ns = 0                                                   # virtual on sim
        self.task = None  # the wait on its stream that spans the rank's part (once queued)

    def signature(self) -> tuple:
        """What must agree between the ranks of one collective."""
        op = "send/recv" if self.op in ("send", "recv") else self.op
        return op, self.count, self.dtype.str if self.dtype is not None else None, \
            self.reduce, self.root

    def describe(self) -> str:
        """'all_reduce(count=1024, FP32, SUM)' and the like."""
        parts = [f"count={self.count}"]
        if self.dtype is not None:
            parts.append(str(self.dtype))
        if self.reduce is not None:
            parts.append(self.reduce.name)
        if self.root is not None:
            parts.append(f"root={self.root}")
        if self.peer is not None:
            parts.append(f"{'dest' if self.op == 'send' else 'src'}_rank={self.peer}")
        return f"{self.op}({', '.join(parts)})"


class Meeting:
    """One collective of a communicator at one sequence number (or one send/recv pair)."""

    def __init__(self, group, key, seq: int, ranks: tuple, local: bool = True):
        self.group, self.key, self.seq, self.ranks = group, key, seq, ranks
        self.local = local  # every rank is this process's (not over MPI): only its threads call
        self.calls: dict[int, Call] = {}
        self.arrive: dict[int, Marker] = {}
        self.done = {r: self._pending_marker() for r in ranks}
        self.markers: list[Marker] = []       # every marker of the lanes' steps
        self.error: HcclError | None = None
        self.reported: set[int | None] = set()  # ranks whose wait already failed with the error
        self.state = "waiting"                # waiting -> running -> done / failed
        self._name: str | None = None
        self._names: dict[int, str] = {}      # rank -> name_for(rank)

    def _pending_marker(self) -> Marker:
        m = Marker(None, 0, False)
        m.note = self.waiting_for
        if self.local:
            m.needs_host = self.missing_calls
        return m

    def missing_calls(self) -> bool:
        """Whether some rank has not called it yet (and the meeting has not failed)."""
        return self.error is None and len(self.calls) < len(self.ranks)

    @property
    def name(self) -> str:
        """'all_reduce #3 of communicator 1' (the op is rank 0's call, else the first caller's);
        for a send/recv pair 'send/recv #0 from rank 1 to rank 0 of communicator 1'."""
        name = self._name
        if name is None:
            key = self.key
            if key[0] == "p2p":
                name = f"send/recv #{self.seq} from rank {key[1]} to rank {key[2]}"
            elif not self.calls:
                return f"collective #{self.seq} of communicator {self.group.id}"
            else:
                call = self.calls.get(self.ranks[0]) or next(iter(self.calls.values()))
                name = f"{call.op} #{self.seq}"
            name = self._name = f"{name} of communicator {self.group.id}"
        return name

    def name_for(self, rank: int) -> str:
        """The meeting as rank `rank` called it: its own op ('send #0 to rank 0 of
        communicator 1', 'recv #0 from rank 1 of ...'; a collective's op is that rank's call)."""
        name = self._names.get(rank)
        if name is None:
            if self.key[0] != "p2p" and rank not in self.calls:
                return self.name  # (not kept: the rank's own call comes later)
            name = self._names[rank] = self._own_name(rank)
        return name

    def _own_name(self, rank: int) -> str:
        key = self.key
        if key[0] == "p2p":
            what = f"send #{self.seq} to rank {key[2]}" if rank == key[1] else \
                f"recv #{self.seq} from rank {key[1]}"
            return f"{what} of communicator {self.group.id}"
        return f"{self.calls[rank].op} #{self.seq} of communicator {self.group.id}"

    def waiting_for(self) -> str:
        """What the meeting still waits for, in words (for stall and deadlock reports)."""
        missing = [r for r in self.ranks if r not in self.calls]
        if missing:
            return (f"{self.name}: rank(s) {', '.join(map(str, missing))} have not called it "
                    f"(last completed: {self.group.last_completed_text(missing)})")
        behind = [r for r in self.ranks if not self.arrive[r].done]
        return (f"{self.name}: the stream(s) of rank(s) {', '.join(map(str, behind))} have not "
                f"reached it")

    # ---- arrival (under the group's lock) ------------------------------------------------

    def post(self, call: Call) -> Marker:
        """Register `call`; returns the marker its stream records on arriving."""
        m = Marker(call.stream, 0, False)
        self.calls[call.rank] = call
        self.arrive[call.rank] = m
        return m

    def ready(self) -> bool:
        """Whether every rank has called and its part is queued on its stream."""
        return len(self.calls) == len(self.ranks) and \
            all(c.task is not None and c.task.id for c in self.calls.values())

    def mismatch(self) -> HcclError | None:
        """E_PARA naming each rank's call and call site when the calls disagree."""
        first = self.calls[self.ranks[0]].signature()
        if all(c.signature() == first for c in self.calls.values()):
            return None
        groups: dict[tuple, list] = {}
        for r in self.ranks:
            groups.setdefault(self.calls[r].signature(), []).append(r)
        usual = max(groups, key=lambda g: len(groups[g]))   # what most ranks called
        odd = [r for r in self.ranks if self.calls[r].signature() != usual]
        lines = "; ".join(f"rank {r}: {self.calls[r].describe()} at {self.calls[r].site}"
                          for r in self.ranks)
        blame = (f"rank(s) {', '.join(map(str, odd))} differ from the other "
                 f"{len(self.ranks) - len(odd)}" if len(groups[usual]) > len(odd) else
                 "no majority")
        return HcclError(f"mismatched calls at sequence number {self.seq} of communicator "
                         f"{self.group.id} ({blame}): {lines}", code=HcclResult.E_PARA)

    # ---- failure --------------------------------------------------------------------------

    def fail(self, error: HcclError) -> None:
        """Record the meeting's error (the first one wins), release everything waiting on its
        markers (the lanes' steps then move nothing), and dump the flight record."""
        if self.error is None:
            self.error = error
            self.state = "failed"
            _log.error("ascentrt.hccl: %s\n%s", error, self.group.flight.dump())
        ENGINE.release_markers(list(self.arrive.values()) + self.markers + list(self.done.values()))

    def abandoned_by(self, rank: int, exited: bool = False) -> HcclError:
        """The error of a meeting rank `rank` will never call: its communicator was destroyed
        (`exited`: its process exited without destroying it)."""
        how = "'s process exited without destroying its communicator" if exited else \
            "'s communicator was destroyed"
        return HcclError(f"{self.name}: rank {rank}{how} before it called it, so the collective "
                         f"can never complete", code=HcclResult.E_REMOTE)

    def timed_out(self, stream, task) -> HcclError:
        """The error a rank's timed-out wait fails with (called by the engine, under its lock).
        Where ranks had not called it, the communicator is broken from now on (see break_off)."""
        rank = next((r for r, c in self.calls.items() if c.stream is stream), None)
        missing = [r for r in self.ranks if r not in self.calls]
        error = HcclError(f"{self.name} timed out after {task.timeout:g} s (HCCL_EXEC_TIMEOUT) "
                          f"(first on rank {rank}): {self.waiting_for()}", code=HcclResult.E_TIMEOUT)
        self.reported.add(rank)
        self.fail(error)
        assert self.error is not None  # (fail() keeps the first error)
        if missing and self.error is error:
            self.break_off(missing)
        return self.error.again()

    def break_off(self, missing: list) -> None:
        """This meeting failed before ranks `missing` called it: a later call of theirs would
        take its place, and every later one would pair with another rank's next (the ranks'
        sequence numbers part for good). The communicator is broken, as HCCL's and NCCL's are
        after such a failure: every later call is refused at once (its error says so: destroy
        the communicator on every rank and make a new one), and the collectives called already
        after this one fail now instead of each waiting out HCCL_EXEC_TIMEOUT. (Under the
        engine's lock: the group's is not taken; a call registering meanwhile checks again once
        queued, see collectives._start_if_complete.)"""
        group = self.group
        if group.broken is None:
            group.broken = HcclError(
                f"communicator {group.id} is broken: {self.name} failed before rank(s) "
                f"{', '.join(map(str, missing))} called it, so the ranks' later calls no longer "
                f"pair up; destroy it on every rank (comm_destroy) and make a new one (the "
                f"failure: {self.error})", code=self.error.code if self.error else HcclResult.E_INTERNAL)
        for m in list(group.meetings.values()):
            if m is not self and m.error is None:
                m.fail(group.broken)

    # ---- the collective's own task on each rank's stream ------------------------------------

    def finisher(self, rank: int):
        """The kernel that ends rank `rank`'s part: it records the completion, and raises the
        meeting's error on that stream unless its wait already failed with it."""
        def finish():
            call = self.calls[rank]
            call.done_ns = call.stream.device.now_ns()
            if self.error is not None:
                if rank in self.reported:
                    return
                self.reported.add(rank)
                raise self.error.again()
            self.group.completed(rank, self.seq if self.key[0] == "coll" else None)
            if all(c.done_ns for c in self.calls.values()):
                self.state = "done"
        finish.__name__ = f"hccl_{self.calls[rank].op}"
        return finish
