"""The recorded profile as plain Python objects, and its JSON form (what `load()` gives back)."""

from __future__ import annotations

import json
import operator
import os
from dataclasses import asdict, dataclass, field, fields
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, Callable, Self, TextIO

FORMAT = "ascentrt-profile/1"
DATA_FILE = "profile.json"
PART_DIR = "child-{pid}"  # the folder of a child process's part, inside its parent's profile

# Task kinds that occupy an executor (the rest are control tasks that complete inline).
WORK_KINDS = ("kernel", "copy", "memset", "host_func")
# The kind of a task that ran a segment of a replayed graph: a span around its nodes' tasks
# (which count as the work), so analyses that take WORK_KINDS do not count its time twice.
GRAPH_SEGMENT = "graph"
COMPUTE_KINDS = ("kernel", "memset")
SYNC_APIS = ("synchronize", "Device.synchronize", "Stream.synchronize", "Event.synchronize")


# The records are frozen and slotted: a 50k-task profile holds 100k of them.
@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task as the device ran it; times in ns since the profile started."""

    device: int
    stream: int
    task_id: int
    kind: str          # kernel, copy, memset, host_func, event_record, event_wait, notify_...,
                       # or graph: a replayed graph's segment (its nodes are tasks of their own)
    name: str
    nbytes: int
    enqueue_ns: int
    start_ns: int
    end_ns: int
    thread: int        # host thread that submitted it
    failed: bool = False
    released_by: tuple | None = None  # event waits: (device, stream, task_id) of the record
    error: str = ""    # a failed task: "ExceptionType: message"

    @property
    def duration_ns(self) -> int:
        """How long the task ran (a wait: how long it blocked its stream)."""
        return self.end_ns - self.start_ns

    @property
    def queued_ns(self) -> int:
        """Enqueue to start: the time queued in the stream behind earlier work, plus dispatch."""
        return self.start_ns - self.enqueue_ns

    @property
    def key(self) -> tuple:
        """(device, stream, task_id): one task of a stream (a replayed graph's nodes share the
        id of the task that ran them)."""
        return (self.device, self.stream, self.task_id)


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One outermost runtime API call on a host thread."""

    name: str
    start_ns: int
    end_ns: int
    thread: int
    error: int = 0               # the AscentError code it raised (0: returned normally)
    target: str = ""             # what it acted on, for synchronizations: "stream 3", "event 7"
    already_done: bool | None = None  # synchronizations: the work was complete before the call
    done_for_ns: int = 0         # ... and for how long (when known)

    @property
    def duration_ns(self) -> int:
        """Time spent in the call."""
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class RangeRecord:
    """A user range (`ascentrt.profiler.range`)."""

    name: str
    start_ns: int
    end_ns: int
    thread: int


@dataclass(frozen=True, slots=True)
class MarkRecord:
    """A user mark (`ascentrt.profiler.mark`): an instant."""

    name: str
    ts_ns: int
    thread: int


@dataclass(frozen=True, slots=True)
class MemorySample:
    """Device memory right after an allocation or free (device -1: pinned host memory)."""

    ts_ns: int
    device: int
    allocated: int     # bytes in live buffers
    reserved: int      # bytes the allocator holds (>= allocated)
    free: int = -1     # bytes the allocator could still hand out (-1: not measured)
    largest_free: int = -1  # the largest contiguous free range (-1: not measured)


@dataclass(frozen=True, slots=True)
class Allocation:
    """One buffer allocated while profiling."""

    device: int        # -1 for pinned host memory
    addr: int
    nbytes: int
    alloc_ns: int
    free_ns: int | None
    site: str          # file:line of the user code that allocated it


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What the profiled device had: executors and memory."""

    id: int
    name: str
    compute_units: int
    copy_engines: int
    host_func_threads: int
    capacity: int
    backend: str = "cpu"   # what produced the timings: cpu (real time) or sim (virtual)
    preset: str = ""       # the hardware model of a sim device
    uncosted: dict = field(default_factory=dict)  # sim: kernels that had no cost -> count


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream that ran tasks while profiling."""

    device: int
    id: int
    priority: int
    role: str = ""     # "default", "host functions (non-blocking)" or ""


@dataclass(frozen=True, slots=True)
class RaceRecord:
    """A race the sanitizer found while profiling (both on): the tasks it names and its text."""

    text: str
    first_stream: int    # -1: a host thread's numpy view
    first_task: int
    second_stream: int
    second_task: int
    reuse: bool          # use after free / reuse without ordering
    count: int


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One collective of a communicator (from its flight recorder): what was called, its
    state, and each rank's part as a task on its stream."""

    comm: int
    seq: int
    op: str
    nbytes: int
    state: str
    parts: list          # [rank, device, stream, task id] per rank whose part ran in the profile
    sites: list          # "rank r: call at file:line" per rank that called
    error: str


_RECORDS = {"tasks": TaskRecord, "api_calls": ApiCall, "ranges": RangeRecord, "marks": MarkRecord,
            "memory": MemorySample, "allocations": Allocation, "devices": DeviceInfo,
            "streams": StreamInfo, "races": RaceRecord, "collectives": CollectiveRecord}


@dataclass
class ProfileData:
    """Everything one profiling run recorded (the records; profile.Profile adds the analysis)."""

    duration_ns: int = 0
    started_at: str = ""
    command: list = field(default_factory=list)
    tasks: list = field(default_factory=list)
    api_calls: list = field(default_factory=list)
    ranges: list = field(default_factory=list)
    marks: list = field(default_factory=list)
    memory: list = field(default_factory=list)
    allocations: list = field(default_factory=list)
    devices: list = field(default_factory=list)
    streams: list = field(default_factory=list)
    races: list = field(default_factory=list)
    collectives: list = field(default_factory=list)
    threads: dict = field(default_factory=dict)  # host thread ident -> name
    pid: int = 0          # the process that recorded it
    origin_ns: int = 0    # its start on perf_counter_ns, which every process here shares
    parts: list = field(default_factory=list)  # the profiles of its child processes

    def to_json(self) -> dict:
        """A JSON-ready dict (the content of profile.json)."""
        out = self._json_header()
        for name, cls in _RECORDS.items():
            names = [f.name for f in fields(cls)]
            row = _row_of(names)
            out[name] = {"columns": names, "rows": [list(row(r)) for r in getattr(self, name)]}
        return out

    def write_json(self, fh: TextIO, chunk: int = 1024) -> None:
        """Write json.dumps(to_json()) to the open text file `fh`, encoding the rows a chunk at
        a time: the document is never held whole (50k tasks make tens of MB of it)."""
        fh.write(compact_json(self._json_header())[:-1])
        for name, cls in _RECORDS.items():
            names = [f.name for f in fields(cls)]
            row = _row_of(names)  # (a tuple per record: JSON writes it as a list)
            fh.write(f',"{name}":{{"columns":{compact_json(names)},"rows":')
            write_json_array(fh, map(row, getattr(self, name)), chunk)
            fh.write("}")
        fh.write("}")

    def _json_header(self) -> dict:
        # (the parts are folders of their own: the header names their pids, read() loads them)
        return {"format": FORMAT, "duration_ns": self.duration_ns, "started_at": self.started_at,
                "command": list(self.command), "threads": {str(k): v for k, v in self.threads.items()},
                "pid": self.pid, "origin_ns": self.origin_ns, "parts": [p.pid for p in self.parts]}

    @classmethod
    def from_json(cls, data: dict) -> Self:
        """Rebuild a Profile from `to_json()` output; raises ValueError on another format."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not an ascentrt profile (expected format {FORMAT!r})")
        prof = cls(duration_ns=data["duration_ns"], started_at=data.get("started_at", ""),
                   command=data.get("command", []),
                   threads={int(k): v for k, v in data.get("threads", {}).items()},
                   pid=data.get("pid", 0), origin_ns=data.get("origin_ns", 0))
        for name, rec in _RECORDS.items():
            table = data.get(name, {"columns": [], "rows": []})
            cols = table["columns"]
            rows = []
            for row in table["rows"]:
                kw = dict(zip(cols, row))
                if rec is TaskRecord and kw.get("released_by") is not None:
                    kw["released_by"] = tuple(kw["released_by"])
                rows.append(rec(**kw))
            setattr(prof, name, rows)
        return prof

    def stream_info(self) -> dict:
        """{(device, stream id): StreamInfo}."""
        return {(s.device, s.id): s for s in self.streams}


def part_path(root: str, pid: int) -> str:
    """The folder that child process `pid` writes its part of profile folder `root` to."""
    return os.path.join(root, PART_DIR.format(pid=pid))


def us(ns: int | float) -> float:
    """Nanoseconds as microseconds to 3 decimals. ns / 1000 of an int is already the double
    nearest that value, which is what round() would return (and round() costs as much again
    as the rest of a trace event); a float is rounded."""
    return ns / 1000 if type(ns) is int else round(ns / 1000, 3)


def compact_json(value: Any) -> str:
    """`value` as JSON text without spaces (json.dumps with the compact separators)."""
    return json.dumps(value, separators=(",", ":"))


def write_json_array(fh: TextIO, items: Iterable[Any], chunk: int = 1024) -> None:
    """Write the items as a JSON array to the open text file `fh`, encoding a chunk at a time
    (the array is never held whole, as a list or as a string)."""
    fh.write("[")
    batch: list = []
    first = True
    for item in items:
        batch.append(item)
        if len(batch) == chunk:
            fh.write(("" if first else ",") + compact_json(batch)[1:-1])
            batch.clear()
            first = False
    if batch:
        fh.write(("" if first else ",") + compact_json(batch)[1:-1])
    fh.write("]")


def joined(texts: Iterable[str], chunk: int = 1024) -> Iterator[str]:
    """The texts (JSON values already) comma-separated, a chunk of them per piece: the
    elements of a JSON array that is written a chunk at a time."""
    texts = iter(texts)
    sep = ""
    while batch := list(islice(texts, chunk)):
        yield sep + ",".join(batch)
        sep = ","


def _row_of(names: list[str]) -> Callable[[Any], tuple]:
    """A function giving a record's values for `names`, as a tuple."""
    if len(names) == 1:
        return lambda r: (getattr(r, names[0]),)
    return operator.attrgetter(*names)


def as_dict(record) -> dict:
    """One record as a dict (for tables and JSON)."""
    return asdict(record)
