"""Communicators: a group of ranks, one device each, formed in this process by comm_init_all
or by comm_init_root_info called from one host thread per rank.

Each rank of a group has a lane, an internal stream on its device on which the collectives'
steps (peer copies and reduce kernels) run, so the ranks' own streams only wait for them.
"""

from __future__ import annotations

import os
import uuid
import weakref
from typing import Any, cast

from ..handles import Handle
from .. import forksafe
from .. import config
from ..errors import AscentError
from ..validate import as_int
from ..device import Device, current_device, device_count, more_devices_hint
from ..engine import ENGINE
from ..stream import Stream
from .constants import HcclError, HcclResult
from .flight import FlightRecorder

ROOT_INFO_BYTES = 4108  # HCCL_ROOT_INFO_BYTES: the size of HCCL's opaque root info
_ids = iter(range(1, 1 << 62))
_forming: dict[bytes, "_Forming"] = {}   # root info -> the group its ranks are joining
_forming_lock = forksafe.lock()
_groups: "weakref.WeakSet[GroupState]" = weakref.WeakSet()  # live communicators (for the profiler)


class RootInfo:
    """HcclRootInfo: the opaque token every rank of a group passes to comm_init_root_info."""

    __slots__ = ("internal",)

    def __init__(self, internal: bytes):
        self.internal = internal

    def __bytes__(self) -> bytes:
        return self.internal

    def __eq__(self, other) -> bool:
        return isinstance(other, RootInfo) and other.internal == self.internal

    def __hash__(self) -> int:
        return hash(self.internal)

    def __repr__(self) -> str:
        return f"RootInfo({self.internal[:48]!r}...)"


def get_root_info(maker: str = "") -> RootInfo:
    """A new root info for one group (HcclGetRootInfo), to hand to every rank (`maker`: what
    it says about the process that made it, for ranks in other processes)."""
    head = f"ascentrt-hccl pid={os.getpid()} id={uuid.uuid4().hex} {maker}".encode()
    return RootInfo(head.ljust(ROOT_INFO_BYTES, b"\0"))


def is_local(root_info: RootInfo) -> bool:
    """Whether `root_info` was made by this process (its ranks are threads of it)."""
    return root_info.internal.startswith(f"ascentrt-hccl pid={os.getpid()} ".encode())


def read_setting(env: str):
    """An HCCL setting's value, read by the call that uses it: HcclError E_PARA naming a bad one
    (the runtime's own start does not refuse it: only the hccl calls read it)."""
    try:
        return config.get(env)
    except AscentError as exc:
        raise HcclError(getattr(exc, "message", str(exc)), code=HcclResult.E_PARA) from None


def next_id() -> int:
    """A new communicator id (unique in this process)."""
    return next(_ids)


def register_group(group: GroupState) -> None:
    """Make a communicator's state visible to groups() (the profiler reads its flight record)."""
    _groups.add(group)


class GroupState:
    """What every communicator keeps, whatever its transport: id, size, devices, lock,
    send/recv counters, the last collective each rank completed, destroyed ranks, the flight
    recorder."""

    transport = ""

    def __init__(self, devices: list):
        self.id = next_id()
        self.devices = devices               # rank -> its device (None: another process's)
        self.size = len(devices)
        self.lock = forksafe.lock()
        self.p2p: dict[tuple, int] = {}      # (src, dst, "send"/"recv") -> calls so far
        self.last_done = [-1] * self.size    # the last collective each rank completed
        self.destroyed = [False] * self.size
        self.broken: HcclError | None = None  # set once its ranks' calls no longer pair up
        self.flight = FlightRecorder()
        register_group(self)

    def on_destroy(self, rank: int) -> None:
        """Rank `rank` of this process was destroyed (a transport across processes tells the
        others here)."""

    def completed(self, rank: int, seq) -> None:
        """Rank `rank` finished collective `seq` (None: a send/recv)."""
        if seq is not None and seq > self.last_done[rank]:
            self.last_done[rank] = seq

    def last_completed_text(self, ranks) -> str:
        """'rank 1: #4, rank 2: none' for the flight record and timeout messages."""
        return ", ".join(f"rank {r}: " + (f"#{self.last_done[r]}" if self.last_done[r] >= 0 else "none")
                         for r in ranks)


class Group(GroupState):
    """A communicator whose ranks are devices of this process: lanes, meetings."""

    transport = "process"

    def __init__(self, devices: list):
        super().__init__(devices)
        self.lanes = [self._lane(r, "collectives") for r in range(self.size)]
        self.recv_lanes: dict[tuple, Stream] = {}  # (receiver, sender) -> its lane
        self.seq = [0] * self.size           # collectives each rank has called
        self.meetings: dict = {}             # key -> Meeting not yet started
        self.started: dict[tuple, int] = {}  # channel -> the sequence number it starts next

    def _lane(self, rank: int, what: str) -> Stream:
        lane = Stream(self.devices[rank], 0, _internal=True)
        lane.role = f"hccl lane: communicator {self.id} rank {rank}, {what}"
        return lane

    def recv_lane(self, rank: int, sender: int) -> Stream:
        """The lane of `rank`'s receives from `sender` (made on first use; called under the
        lock): each channel has its own, so that no lane holds a meeting behind one that
        completes later in its rank's call order."""
        lane = self.recv_lanes.get((rank, sender))
        if lane is None:
            lane = self.recv_lanes[(rank, sender)] = self._lane(rank, f"receives from {sender}")
        return lane

    def retire_lanes(self) -> None:
        """Once every rank is destroyed: the lanes with nothing left to run go (the others
        finish their steps first and stay until the device is reset)."""
        with ENGINE.lock:
            for lane in self.lanes + list(self.recv_lanes.values()):
                if not lane._tasks and lane._running is None:
                    lane._refuse = "destroyed"
                    lane._dq.streams.pop(lane.id, None)


def groups() -> list[GroupState]:
    """The communicators alive in this process (what the profiler reads flight records from)."""
    return list(_groups)


class Communicator(Handle):
    """HcclComm: one rank of a group (what the collectives take as `comm`)."""

    __slots__ = ("group", "rank")

    def __init__(self, group: GroupState, rank: int):
        self.group, self.rank = group, rank  # the group: any transport's (Group, MpiGroup)

    @property
    def device(self) -> Device:
        """The device this rank runs on."""
        return self.group.devices[self.rank]

    def __repr__(self) -> str:
        state = " destroyed" if self.group.destroyed[self.rank] else ""
        return f"Communicator(id={self.group.id}, rank={self.rank}/{self.group.size}{state})"


def check_comm(comm: object) -> Communicator:
    """`comm` itself when it is a live communicator; HcclError E_PTR otherwise."""
    if not isinstance(comm, Communicator):
        raise HcclError(f"comm must be a communicator, got {type(comm).__name__}", code=HcclResult.E_PTR)
    if comm.group.destroyed[comm.rank]:
        raise HcclError(f"{comm!r} was destroyed", code=HcclResult.E_PTR)
    return comm


def _check_devices(devices: object) -> list:
    if not isinstance(devices, (list, tuple)) or not devices:
        raise HcclError("devices must be a non-empty list of device ids", code=HcclResult.E_PARA)
    ids = []
    for d in devices:
        i = d.id if isinstance(d, Device) else d
        if type(i) is not int or not 0 <= i < device_count():
            hint = f" ({more_devices_hint(device_count())})" if type(i) is int and i >= device_count() else ""
            raise HcclError(f"device {d!r} is not a device id in [0, {device_count()}){hint}",
                            code=HcclResult.E_PARA)
        ids.append(i)
    if len(set(ids)) != len(ids):
        raise HcclError(f"devices {ids} repeat a device: one rank per device", code=HcclResult.E_PARA)
    return [Device(i) for i in ids]


def comm_init_all(devices: list[int | Device] | tuple[int | Device, ...]) -> list[Communicator]:
    """One communicator per device of this process, rank i on devices[i] (HcclCommInitAll)."""
    group = Group(_check_devices(devices))
    return [Communicator(group, r) for r in range(group.size)]


class _Forming:
    """A group whose ranks are joining through comm_init_root_info."""

    def __init__(self, nranks: int):
        self.nranks = nranks
        self.devices: dict[int, Device] = {}
        self.joined = forksafe.condition(_forming_lock)
        self.group: Group | None = None
        self.error: HcclError | None = None


def check_init_args(nranks, root_info, rank) -> tuple[int, int]:
    """What comm_init_root_info checks before joining (HcclError E_PTR / E_PARA); returns
    (nranks, rank) as ints."""
    if not isinstance(root_info, RootInfo):
        raise HcclError("root_info must come from get_root_info()", code=HcclResult.E_PTR)
    for name, v in (("nranks", nranks), ("rank", rank)):
        if as_int(v) is None:
            raise HcclError(f"{name} must be an int, got {v!r}", code=HcclResult.E_PARA)
    nranks, rank = int(nranks), int(rank)
    if nranks < 1 or not 0 <= rank < nranks:
        raise HcclError(f"rank {rank} is out of range for {nranks} ranks", code=HcclResult.E_PARA)
    return nranks, rank


def comm_init_root_info(nranks: int, root_info: RootInfo, rank: int) -> Communicator:
    """Join the group `root_info` names as `rank` of `nranks`, on this thread's current device,
    the ranks being threads of this process; returns once every rank joined, E_TIMEOUT after
    HCCL_CONNECT_TIMEOUT."""
    nranks, rank = check_init_args(nranks, root_info, rank)
    if not is_local(root_info):
        raise HcclError("this root info was made by another process: its ranks meet over MPI "
                        "(install ascentrt[mpi] and run under mpiexec)", code=HcclResult.E_NOT_SUPPORT)
    if nranks > device_count():  # (one rank per device: the group could never form)
        raise HcclError(f"{nranks} ranks need {nranks} devices; this process has "
                        f"{device_count()} (ASCENTRT_DEVICES)", code=HcclResult.E_PARA)
    device = current_device()
    timeout = read_setting("HCCL_CONNECT_TIMEOUT")
    with _forming_lock:
        forming = _forming.get(root_info.internal)
        if forming is None:
            forming = _forming[root_info.internal] = _Forming(nranks)
        if forming.nranks != nranks:
            raise HcclError(f"rank {rank} joins with nranks={nranks}; the group it joins is forming "
                            f"with nranks={forming.nranks} (what the ranks that joined before it "
                            f"gave)", code=HcclResult.E_PARA)
        if rank in forming.devices:
            raise HcclError(f"rank {rank} joined this group twice", code=HcclResult.E_PARA)
        if device in forming.devices.values():
            raise HcclError(f"device {device.id} already holds a rank of this group: one rank per "
                            f"device (call set_device first)", code=HcclResult.E_PARA)
        forming.devices[rank] = device
        if len(forming.devices) == nranks:
            forming.group = Group([forming.devices[r] for r in range(nranks)])
            del _forming[root_info.internal]
            forming.joined.notify_all()
        elif not _wait_to_form(forming, rank, root_info, timeout):
            missing = sorted(set(range(nranks)) - set(forming.devices))
            _withdraw_join(forming, rank, root_info)
            raise HcclError(f"comm_init_root_info: ranks {missing} did not join within "
                            f"{timeout:g} s (HCCL_CONNECT_TIMEOUT)", code=HcclResult.E_TIMEOUT)
        assert forming.group is not None  # (formed here, or what the wait waited for)
        return Communicator(forming.group, rank)


def _wait_to_form(forming: Any, rank: int, root_info: Any, timeout: float) -> bool:
    """Wait (the group's lock held) until the group formed; False past `timeout`. A wait that
    something else ends (a Ctrl-C, the program's signal handler) withdraws the rank's join
    first: the group must not form with a rank that is no longer there."""
    try:
        return forming.joined.wait_for(lambda: forming.group is not None, timeout)
    except BaseException:
        if forming.group is None:
            _withdraw_join(forming, rank, root_info)
        raise


def _withdraw_join(forming: Any, rank: int, root_info: Any) -> None:
    """Take back `rank`'s join of a group still forming (its lock held)."""
    forming.devices.pop(rank, None)
    if not forming.devices and _forming.get(root_info.internal) is forming:
        del _forming[root_info.internal]  # the last to give up: the root info is fresh again


def comm_destroy(comm: Communicator) -> None:
    """Release this rank of its communicator (HcclCommDestroy): later calls with it get E_PTR."""
    comm = check_comm(comm)
    group = comm.group
    with group.lock:
        group.destroyed[comm.rank] = True
        local = group.transport == "process"
        # (the collectives this rank never called: the others would wait for it until
        # HCCL_EXEC_TIMEOUT, 30 minutes by default; they fail now, naming it)
        abandoned = [m for m in cast(Group, group).meetings.values()
                     if m.error is None and comm.rank in m.ranks and comm.rank not in m.calls] \
            if local else []
        last = local and all(group.destroyed) and \
            all(m.error is not None for m in cast(Group, group).meetings.values())
    for m in abandoned:
        m.fail(m.abandoned_by(comm.rank))
    group.on_destroy(comm.rank)
    if last:
        cast(Group, group).retire_lanes()


def get_rank_size(comm: Communicator) -> int:
    """How many ranks the communicator has (HcclGetRankSize)."""
    return check_comm(comm).group.size


def get_rank_id(comm: Communicator) -> int:
    """This communicator's rank (HcclGetRankId)."""
    return check_comm(comm).rank
