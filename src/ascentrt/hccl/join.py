"""How the processes of one communicator find each other over MPI: only the group's members
take part, point to point on COMM_WORLD, through the process that made the root info.

A member sends its join (root info digest, attempt, rank, nranks, device) to the maker; once
every rank joined, the maker sends each the member list, each acknowledges, and the maker says
go (or abort). Only then do the members make their communicator, with a collective over the
group alone (Comm.Create_group). Nothing world-wide is called and nothing blocking is left
behind on a timeout: every wait is polled against HCCL_CONNECT_TIMEOUT, a member that gives up
tells the maker (its join is withdrawn), and a message of an earlier attempt is recognised by
its attempt number and dropped. The messages use one reserved tag of COMM_WORLD (TAG_UB, the
largest tag: the program must not receive it with MPI.ANY_TAG).
"""

from __future__ import annotations

import itertools
import time

from .. import forksafe
from .constants import HcclError, HcclResult

_attempts = itertools.count(1)   # this process's join attempts (its replies name one)
_lock = forksafe.lock()
_inbox: list[tuple] = []         # join messages received, not yet taken by their waiter
_sends: list = []                # isend requests not yet completed (they hold their buffers)
_hosting: dict[int, "_Host"] = {}  # digest -> the maker thread of a root info made here
_any_source = [-2]               # MPI.ANY_SOURCE (set by join)
_active: set[int] = set()        # this process's attempts still waiting (replies to others: stale)


class _Host:
    """A root info this process made, as its first caller sees it: whether another thread of
    this process joined it too (then its ranks are threads of this process)."""

    def __init__(self) -> None:
        self.threads = False


def maker_tag(world_rank: int) -> str:
    """What a root info made under MPI says about its maker (its COMM_WORLD rank)."""
    return f"world={world_rank} "


def maker_of(internal: bytes) -> int | None:
    """The COMM_WORLD rank that made a root info, or None when it does not say."""
    head = internal.split(b"\0", 1)[0].decode(errors="replace")
    for word in head.split():
        if word.startswith("world=") and word[6:].isdigit():
            return int(word[6:])
    return None


def _send(world, tag: int, dest: int, message: tuple) -> None:
    _sends.append(world.isend(message, dest=dest, tag=tag))
    _sends[:] = [r for r in _sends if not r.Test()]


def _take(world, tag: int, want) -> list:
    """Receive what arrived on the join tag into the inbox, and take out the messages for which
    want(message) holds, in arrival order. A withdrawal ('leave') cancels the join it names
    while both still wait here."""
    with _lock:
        while True:
            msg = world.improbe(source=_any_source[0], tag=tag)
            if msg is None:
                break
            m = msg.recv()
            if m[0] in ("list", "go", "abort") and m[2] not in _active:
                continue  # (a reply to an attempt that gave up)
            if m[0] == "leave":
                join = next((j for j in _inbox if j[0] == "join" and j[1:4] == m[1:4]), None)
                if join is not None:
                    _inbox.remove(join)
                    continue
            _inbox.append(m)
        out = [m for m in _inbox if want(m)]
        if out:
            _inbox[:] = [m for m in _inbox if not want(m)]
        return out


def _pause(pause: float) -> float:
    time.sleep(pause)
    return min(0.001, pause + 0.00005)  # a busy start, then at most a millisecond


def join(MPI, digest: int, maker: int, nranks: int, rank: int, device: int,
         timeout: float) -> list[int] | None:
    """Join, as `rank` of `nranks`, the group of the root info with `digest` made by COMM_WORLD
    rank `maker`: the members' COMM_WORLD ranks in rank order, or None when this process made it
    and another of its threads joined it too (its ranks are threads of this process). Raises
    HcclError E_TIMEOUT past `timeout` (0: none), E_PARA when the joins disagree."""
    world = MPI.COMM_WORLD
    tag = world.Get_attr(MPI.TAG_UB)
    _any_source[0] = MPI.ANY_SOURCE
    deadline = time.monotonic() + timeout if timeout else float("inf")
    if world.Get_rank() == maker:
        with _lock:
            host = _hosting.get(digest)
            if host is not None:
                host.threads = True
                return None
            host = _hosting[digest] = _Host()
        try:
            return _host(world, tag, host, digest, nranks, rank, device, deadline, timeout)
        finally:
            with _lock:
                if not host.threads:
                    del _hosting[digest]
    return _member(world, tag, digest, maker, nranks, rank, device, deadline, timeout)


def _member(world, tag, digest, maker, nranks, rank, device, deadline, timeout) -> list[int]:
    me, attempt = world.Get_rank(), next(_attempts)
    with _lock:
        _active.add(attempt)
    try:
        return _wait_as_member(world, tag, digest, maker, nranks, rank, device, deadline, timeout,
                               me, attempt)
    finally:
        with _lock:
            _active.discard(attempt)
            _inbox[:] = [m for m in _inbox if not (m[0] in ("list", "go", "abort") and m[2] == attempt)]


def _wait_as_member(world, tag, digest, maker, nranks, rank, device, deadline, timeout, me,
                    attempt) -> list[int]:
    _send(world, tag, maker, ("join", digest, me, attempt, rank, nranks, device))
    listed: list[int] | None = None
    pause = 0.0
    while True:
        for m in _take(world, tag, lambda m: m[0] in ("list", "go", "abort") and m[1:3] == (digest, attempt)):
            if m[0] == "abort":
                raise HcclError(m[3], code=HcclResult(m[4]))
            if m[0] == "list":
                listed = m[3]
                _send(world, tag, maker, ("ack", digest, me, attempt))
                # (committed: the maker decides within its own timeout of sending the list)
                deadline = time.monotonic() + 2 * timeout if timeout else deadline
            if m[0] == "go" and listed is not None:
                return listed
        if time.monotonic() >= deadline:
            if listed is None:
                _send(world, tag, maker, ("leave", digest, me, attempt))
                raise HcclError(f"comm_init_root_info: the group did not form within {timeout:g} s "
                                f"(HCCL_CONNECT_TIMEOUT): rank {rank} joined, through the process "
                                f"that made the root info (MPI rank {maker}), which had not heard "
                                f"from every rank of {nranks} (or has not called it itself)",
                                code=HcclResult.E_TIMEOUT)
            raise HcclError(f"comm_init_root_info: the process that made the root info (MPI rank "
                            f"{maker}) listed every rank but sent no decision (it stalled or died)",
                            code=HcclResult.E_TIMEOUT)
        pause = _pause(pause)


def _host(world, tag, host, digest, nranks, rank, device, deadline, timeout) -> list[int] | None:
    me = world.Get_rank()
    joined: dict[int, tuple] = {rank: (me, 0, device)}  # rank -> (COMM_WORLD rank, attempt, device)
    acked: set[int] = set()
    listed, pause = False, 0.0

    def abort(ranks, text: str, code: HcclResult) -> None:
        for r in ranks:
            if r != rank:
                _send(world, tag, joined[r][0], ("abort", digest, joined[r][1], text, int(code)))

    def refuse(m, text: str) -> None:
        _send(world, tag, m[2], ("abort", digest, m[3], text, int(HcclResult.E_PARA)))

    while True:
        for m in _take(world, tag, lambda m: m[0] in ("join", "leave", "ack") and m[1] == digest):
            _, _, src, attempt = m[:4]
            if m[0] == "join":
                r, n = m[4], m[5]
                if n != nranks:
                    refuse(m, f"comm_init_root_info: rank {r} (MPI rank {src}) joins with "
                              f"nranks={n}; the group it joins forms with nranks={nranks} (what "
                              f"the process that made the root info, MPI rank {me}, gave)")
                elif not 0 <= r < nranks:
                    refuse(m, f"comm_init_root_info: rank {r} (MPI rank {src}) is out of range "
                              f"for {nranks} ranks")
                elif any(j[0] == src for j in joined.values()):
                    refuse(m, f"comm_init_root_info: MPI rank {src} joins as rank {r} but holds "
                              f"a rank of this group already: over MPI, one rank per process")
                elif r in joined or listed:
                    first = f" (first as MPI rank {joined[r][0]})" if r in joined else ""
                    refuse(m, f"comm_init_root_info: rank {r} (MPI rank {src}) joined this "
                              f"group twice{first}")
                else:
                    joined[r] = (src, attempt, m[6])
            elif m[0] == "leave":  # (a member gave up after its join was taken)
                r = next((q for q, j in joined.items() if j[:2] == (src, attempt)), None)
                if r is not None and listed:
                    text = (f"comm_init_root_info: rank {r} (MPI rank {src}) gave up "
                            f"(HCCL_CONNECT_TIMEOUT) before the group formed")
                    abort(joined, text, HcclResult.E_TIMEOUT)
                    raise HcclError(text, code=HcclResult.E_TIMEOUT)
                if r is not None:
                    del joined[r]
            else:
                acked.update(q for q, j in joined.items() if j[:2] == (src, attempt))
        if host.threads:
            if len(joined) > 1:
                text = (f"comm_init_root_info: ranks of this root info joined both as threads of "
                        f"MPI rank {me} and as other processes ({sorted(joined)}): one or the other")
                abort(joined, text, HcclResult.E_PARA)
                raise HcclError(text, code=HcclResult.E_PARA)
            return None
        if not listed and len(joined) == nranks:
            members = [joined[r][0] for r in range(nranks)]
            for r in range(nranks):
                if r != rank:
                    _send(world, tag, joined[r][0], ("list", digest, joined[r][1], members))
            listed = True
            acked.add(rank)
        if listed and len(acked) == nranks:
            for r in range(nranks):
                if r != rank:
                    _send(world, tag, joined[r][0], ("go", digest, joined[r][1]))
            return [joined[r][0] for r in range(nranks)]
        if time.monotonic() >= deadline:
            waiting = sorted(set(range(nranks)) - (acked if listed else set(joined)))
            text = (f"comm_init_root_info: ranks {waiting} did not "
                    f"{'confirm' if listed else 'join'} within {timeout:g} s (HCCL_CONNECT_TIMEOUT)")
            abort(joined, text, HcclResult.E_TIMEOUT)
            raise HcclError(text, code=HcclResult.E_TIMEOUT)
        pause = _pause(pause)
