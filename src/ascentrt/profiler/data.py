"""The recorded profile as plain Python objects, and its JSON form (what `load()` gives back)."""

from __future__ import annotations

import bisect
import json
import operator
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any, Callable, Self, TextIO

from ..errors import ErrorCode, InvalidArgumentError

FORMAT = "ascentrt-profile/1"
DATA_FILE = "profile.json"
PART_DIR = "child-{pid}"  # the folder of a child process's part, inside its parent's profile

# A host function launched with blocking=False: it runs beside its stream's later work (which
# does not wait for it), filed under the stream and task id its launch returned.
NONBLOCKING = "host_func_nonblocking"
# Task kinds that occupy an executor (the rest are control tasks that complete inline).
WORK_KINDS = ("kernel", "copy", "memset", "host_func", NONBLOCKING)
WAIT_KINDS = ("event_wait", "notify_wait", "value_wait")  # device-side waits
# A value write (Stream.write_value): the stream's scheduler writes the word, holding no unit
# and taking no time (a simulated device stamps it as it stamps an event record): a control
# task as a record is, not a kernel, whatever executor queue the engine passes it through.
VALUE_WRITE = "value_write"
# The kind of a task that ran a segment of a replayed graph: a span around its nodes' tasks
# (which count as the work), so analyses that take WORK_KINDS do not count its time twice.
GRAPH_SEGMENT = "graph"
COMPUTE_KINDS = ("kernel", "memset")
# The names a copy task has that say its direction (memcpy_async's; a 2D or collective copy
# is named otherwise)
COPY_DIRECTIONS = ("host_to_device", "device_to_host", "device_to_device", "host_to_host")
# The executor class each kind of work runs on (a device's units of it are shared by its streams).
EXECUTOR_OF_KIND = {"kernel": "compute", "memset": "compute", "copy": "copy", "host_func": "host",
                    NONBLOCKING: "host"}
# What the profile calls the part of a submitting call that waited for a full stream's queue
# to have room (a submit on a simulated device with queue_depth tasks pending): waiting.
QUEUE_FULL = "waiting for room in a full stream queue"
SYNC_APIS = ("synchronize", "Device.synchronize", "Stream.synchronize", "Event.synchronize",
             "Graph.execute", QUEUE_FULL)  # (a replay and the wait for it)
QUERY_APIS = ("Stream.query", "Event.query")  # one that finds the work not done polls: it waits


def calls_made(calls: list, waits: bool = False) -> Iterator[tuple["ApiCall", int]]:
    """(call, its own ns) for each runtime call the program made (a thread's outermost): the
    waits for room in a full stream queue recorded inside calls are not calls, and are left
    out of the time of the call they were in; with `waits` they come too, each as a row of
    its own (named QUEUE_FULL: the host's time blocked there, which a table must show). One
    at a time: the writers stream, and a list of them all would grow what writing a profile
    holds with its length."""
    full: dict[int, list] = {}  # thread -> its waits, by start (each inside one call)
    for c in calls:
        if c.name == QUEUE_FULL:
            full.setdefault(c.thread, []).append((c.start_ns, c.end_ns))
    for spans in full.values():
        spans.sort()
    for c in calls:
        if c.name == QUEUE_FULL:
            if waits:
                yield c, c.end_ns - c.start_ns
            continue
        spans = full.get(c.thread, [])
        waited, i = 0, bisect.bisect_left(spans, (c.start_ns,))
        while i < len(spans) and spans[i][0] < c.end_ns:  # (the waits that start inside it)
            waited += min(c.end_ns, spans[i][1]) - spans[i][0]
            i += 1
        yield c, c.end_ns - c.start_ns - waited


def calls_made_count(calls: list) -> int:
    """How many runtime calls the program made (see calls_made)."""
    return sum(c.name != QUEUE_FULL for c in calls)


def top_sites(calls: Iterable["ApiCall"], top: int = 3) -> str:
    """The program lines the calls came from, the most frequent first, with their counts:
    "prog.py:26 (100 calls), prog.py:31 (2 calls)" ("not recorded" where no call has a site:
    a profile written before sites were)."""
    counts: dict[str, int] = {}
    for c in calls:
        if c.site:
            counts[c.site] = counts.get(c.site, 0) + 1
    return ranked_sites(counts, top) or "not recorded"


def ranked_sites(counts: dict[str, int], top: int = 3) -> str:
    """Program lines with their call counts, the most frequent first, `top` of them:
    "prog.py:26 (100 calls), prog.py:31 (2 calls) and 4 more" ('' for none)."""
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{site} ({n} call{'s' if n != 1 else ''})" for site, n in ranked[:top])
    return text + (f" and {len(ranked) - top} more" if len(ranked) > top else "")


def submitting_calls(tasks: Iterable[Any], profile: "ProfileData",
                     names: tuple[str, ...] | None = None) -> list[list["ApiCall"]]:
    """For each of `tasks`, the recorded API calls (any, or those named in `names`) of its
    thread that were running when it was queued: the call that submitted it, and any call it
    was made inside; in the order the profile lists them, empty where none was recorded."""
    calls: dict[int, list] = {}
    for c in profile.api_calls:
        if names is None or c.name in names:
            calls.setdefault(c.thread, []).append(c)
    return [[c for c in calls.get(t.thread, ()) if c.start_ns <= t.enqueue_ns <= c.end_ns]
            for t in tasks]


SYNC_COPY_APIS = ("memcpy",)  # synchronous copies: no task; the call is the copy


def sync_copies(calls: Iterable["ApiCall"]) -> Iterator["ApiCall"]:
    """The synchronous copies the program made that copied (a call per copy: its direction
    is its target, its bytes nbytes, its time the copy's, on the host thread that called)."""
    for c in calls:
        if c.name in SYNC_COPY_APIS and c.nbytes and not c.error and c.target in COPY_DIRECTIONS:
            yield c


def waits(call: "ApiCall") -> bool:
    """Whether the host spent `call` waiting for the device: a synchronization, or a query
    that found the work not done yet (a poll loop's)."""
    return call.name in SYNC_APIS or (call.name in QUERY_APIS and call.already_done is False)


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
    # "": it ran to its end. "dropped": its stream was destroyed or stopped (failure mode
    # STOP) before it ran, or, a wait, while it blocked (end_ns: then); a dropped record still
    # lets its waiters go. "unfinished": it still blocked, ran or waited for an executor when
    # profiling ended (end_ns: then; start_ns: when it blocked or started, else its enqueue),
    # or was queued behind one that did and never started (start_ns = end_ns: then).
    fate: str = ""
    units: int = 1     # executor units it held while it ran (a simulated kernel: its block_dim;
                       # 0: none, a value write the stream's scheduler does itself)
    block_dim: int = 0  # the blocks a kernel asked for (0: it said none; a profile written
                        # before this column: none recorded)
    tail_ns: int = 0   # a simulated kernel whose blocks ran in waves, the last one partial:
                       # how long that wave ran (at its end), holding only its own blocks'
                       # units (block_dim mod units) while the others were free

    @property
    def tail_units(self) -> int:
        """The units its last partial wave held (0: it had none)."""
        return self.block_dim % self.units if self.tail_ns and self.units else 0

    @property
    def unit_ns(self) -> int:
        """The unit-time it held its executor: its units over its run, but only its last
        partial wave's own units while that wave ran."""
        units, duration = self.units, self.duration_ns
        tail = min(self.tail_ns, duration)
        return (duration - tail) * units + tail * self.tail_units

    @property
    def duration_ns(self) -> int:
        """How long the task ran (a wait: how long it blocked its stream)."""
        return self.end_ns - self.start_ns

    @property
    def queued_ns(self) -> int:
        """Enqueue to start: the time queued in the stream behind earlier work, plus dispatch."""
        return self.start_ns - self.enqueue_ns

    @property
    def started(self) -> bool:
        """Whether it ever ran or blocked (not dropped unrun, nor still queued at the end).

        Neither of those took time: start_ns = end_ns, the drop or the profile's end."""
        return self.start_ns != self.end_ns or self.fate not in ("dropped", "unfinished")

    @property
    def key(self) -> tuple:
        """(device, stream, task_id): one task of a stream (a replayed graph's nodes share the
        id of the task that ran them)."""
        return (self.device, self.stream, self.task_id)


EXIT_MARK = "uncaught exception: "  # the name of the mark of what ended a profiled program

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
    device: int | None = None    # the device an out-of-memory error was about (None: not one)
    task_error: bool = False     # the error was a failed task's, passed on by this call (a
                                 # synchronization that waited for the work), not its own
    site: str = ""               # file:line of the program's call ("?": from ascentrt itself;
                                 # "": not recorded, a profile written before sites were)
    nbytes: int = 0              # a synchronous copy's bytes (its direction is its target)

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
    reclaimed: str = ""  # what freed it, unfreed by the program ("device 0 reset", "acl.finalize")


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
    # [H2D, D2H, D2D] engines where each direction has its own (sim); [] where any takes any
    copy_engines_per_direction: list = field(default_factory=list)
    preset_source: str = ""  # where the preset is not the stock one: its file, the fields varied
    release_ns: int = 0      # sim: the model's time from a wait's release to its stream going on


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


@dataclass(frozen=True, slots=True)
class MissingPart:
    """A process of the run whose part the profile lacks: one that ended without writing it
    (LOST: it crashed, called os._exit or was killed) or that still ran when the profile was
    written (RUNNING: `ascentrt report --rewrite` adds its part once it is written)."""

    pid: int
    state: str           # LOST or RUNNING
    command: list        # its command line, as it noted it when it started ([]: not known)


VIRTUAL, REAL = "virtual", "real"  # a profile's clock: sim's virtual time, or perf_counter_ns


def own_clock(profile: "ProfileData") -> bool:
    """Whether `profile`'s times are on a clock of its process's own (sim's virtual time, which
    each simulated process runs from its own start): they order nothing across processes."""
    if profile.clock:
        return profile.clock == VIRTUAL
    return any(d.backend == "sim" for d in profile.devices)  # (a profile written before `clock`)


LOST = "lost"
RUNNING = "running"
MISSING_STATES = {LOST: "lost: it ended without writing its part (a crash, os._exit or a kill)",
                  RUNNING: "still running when this profile was written: ascentrt report "
                           "--rewrite adds its part once it is written"}


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
    missing: list = field(default_factory=list)  # MissingPart of processes whose part it lacks
    clock: str = ""       # what its times are: VIRTUAL (sim's), REAL ("": not recorded, see own_clock)

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
                "pid": self.pid, "origin_ns": self.origin_ns, "parts": [p.pid for p in self.parts],
                "missing_parts": [asdict(m) for m in self.missing], "clock": self.clock}

    @classmethod
    def from_json(cls, data: dict) -> Self:
        """Rebuild a Profile from `to_json()` output; raises InvalidArgumentError (100003, a
        ValueError) naming the field when it is another format or a value is of the wrong
        type, sign or order (see _HEADER and _COLUMNS)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise _bad_file(f"not an ascentrt profile (expected format {FORMAT!r})")
        if "duration_ns" not in data:
            raise _bad_file("duration_ns is missing")
        for key, check in _HEADER.items():
            if key in data:
                _check(check, data[key], key)
        prof = cls(duration_ns=data["duration_ns"], started_at=data.get("started_at", ""),
                   command=data.get("command", []),
                   threads={int(k): v for k, v in data.get("threads", {}).items()},
                   pid=data.get("pid", 0), origin_ns=data.get("origin_ns", 0),
                   missing=[MissingPart(m["pid"], m["state"], list(m["command"]))
                            for m in data.get("missing_parts", [])],
                   clock=data.get("clock", ""))
        for name, rec in _RECORDS.items():
            cols, rows = _table(data, name, rec)
            released = cols.index("released_by") if rec is TaskRecord and "released_by" in cols \
                else None
            records = []
            for row in rows:
                kw = dict(zip(cols, row))
                if released is not None and row[released] is not None:
                    kw["released_by"] = tuple(row[released])
                records.append(rec(**kw))
            setattr(prof, name, records)
        return prof

    def stream_info(self) -> dict:
        """{(device, stream id): StreamInfo}."""
        return {(s.device, s.id): s for s in self.streams}


# What profile.json may hold, one check (its description, a test) per field: the records'
# types, with the signs and ranges the analysis relies on (it divides by compute_units,
# subtracts times). A hand-edited value is refused at load, naming its field, and never
# reaches diagnose(), save() or `ascentrt report` as a TypeError or a skewed figure.
_Check = tuple[str, Callable[[Any], bool]]
_LIMIT = 1 << 63  # (an int64: what a trace viewer or a CSV reader takes)


def _ints(low: int = -_LIMIT) -> _Check:
    """An int (not a bool) in [low, 2**63)."""
    return (f"an int >= {low}" if low > -_LIMIT else "an int",
            lambda v: type(v) is int and low <= v < _LIMIT)


_INT, _NS, _COUNT = _ints(), _ints(0), _ints(0)
_STR: _Check = ("a string", lambda v: type(v) is str)
_BOOL: _Check = ("true or false", lambda v: type(v) is bool)
_OPT_NS: _Check = ("null or an int >= 0", lambda v: v is None or _NS[1](v))
_OPT_BOOL: _Check = ("null, true or false", lambda v: v is None or type(v) is bool)
_STRS: _Check = ("a list of strings", lambda v: type(v) is list and all(type(x) is str for x in v))


def _int_list(n: int) -> Callable[[Any], bool]:
    """A test: a list of `n` ints."""
    return lambda v: type(v) is list and len(v) == n and all(_INT[1](x) for x in v)


_HEADER: dict[str, _Check] = {
    "duration_ns": _NS, "started_at": _STR, "command": _STRS, "pid": _NS, "origin_ns": _INT,
    "threads": ("an object of thread id -> name", lambda v: type(v) is dict and all(
        k.isascii() and k.isdigit() and int(k) < _LIMIT and type(n) is str
        for k, n in v.items())),
    "parts": ("a list of process ids (ints >= 1)",
              lambda v: type(v) is list and all(map(_ints(1)[1], v))),
    "clock": ("'virtual', 'real' or ''", lambda v: v in ("virtual", "real", "")),
    "missing_parts": ("a list of {pid, state ('lost' or 'running'), command (strings)}",
                      lambda v: type(v) is list and all(
                          type(m) is dict and set(m) == {"pid", "state", "command"}
                          and _ints(1)[1](m["pid"]) and m["state"] in MISSING_STATES
                          and _STRS[1](m["command"]) for m in v)),
}
_COLUMNS: dict[str, dict[str, _Check]] = {
    "tasks": {"device": _INT, "stream": _INT, "task_id": _INT, "kind": _STR, "name": _STR,
              "nbytes": _COUNT, "enqueue_ns": _NS, "start_ns": _NS, "end_ns": _NS,
              "thread": _INT, "failed": _BOOL, "error": _STR,
              "released_by": ("null or [device, stream, task id]",
                              lambda v: v is None or _int_list(3)(v)),
              "fate": ("'', 'dropped' or 'unfinished'", lambda v: v in ("", "dropped", "unfinished")),
              "units": _ints(0),  # (0: it held no executor unit, a value write's)
              "block_dim": _ints(0), "tail_ns": _NS},
    "api_calls": {"name": _STR, "start_ns": _NS, "end_ns": _NS, "thread": _INT,
                  "error": _ints(-1), "target": _STR, "already_done": _OPT_BOOL,
                  "done_for_ns": _NS,
                  "device": ("null or a device id", lambda v: v is None or _ints(0)[1](v)),
                  "task_error": _BOOL, "site": _STR, "nbytes": _COUNT},
    "ranges": {"name": _STR, "start_ns": _NS, "end_ns": _NS, "thread": _INT},
    "marks": {"name": _STR, "ts_ns": _NS, "thread": _INT},
    "memory": {"ts_ns": _NS, "device": _ints(-1), "allocated": _COUNT, "reserved": _COUNT,
               "free": _ints(-1), "largest_free": _ints(-1)},
    "allocations": {"device": _ints(-1), "addr": _COUNT, "nbytes": _COUNT, "alloc_ns": _NS,
                    "free_ns": _OPT_NS, "site": _STR, "reclaimed": _STR},
    "devices": {"id": _ints(0), "name": _STR, "compute_units": _ints(1),
                "copy_engines": _ints(1), "host_func_threads": _ints(1), "capacity": _ints(1),
                "backend": _STR, "preset": _STR,
                "uncosted": ("an object of kernel name -> count", lambda v: type(v) is dict
                             and all(_COUNT[1](n) for n in v.values())),
                "copy_engines_per_direction": ("[] or [h2d, d2h, d2d] engine counts",
                                               lambda v: v == [] or _int_list(3)(v)
                                               and all(n >= 1 for n in v)),
                "preset_source": _STR, "release_ns": _NS},
    "streams": {"device": _INT, "id": _INT, "priority": _INT, "role": _STR},
    "races": {"text": _STR, "first_stream": _INT, "first_task": _INT, "second_stream": _INT,
              "second_task": _INT, "reuse": _BOOL, "count": _ints(1)},
    "collectives": {"comm": _INT, "seq": _INT, "op": _STR, "nbytes": _COUNT, "state": _STR,
                    "sites": _STRS, "error": _STR,
                    "parts": ("a list of [rank, device, stream, task id]",
                              lambda v: type(v) is list and all(map(_int_list(4), v)))},
}
# Pairs of times in a row that cannot run backwards: (earlier, later); a null later is open.
_ORDER = {"tasks": [("start_ns", "end_ns")],
          "api_calls": [("start_ns", "end_ns")], "ranges": [("start_ns", "end_ns")],
          "allocations": [("alloc_ns", "free_ns")]}


def _bad_file(message: str) -> InvalidArgumentError:
    """The error of a profile.json that is not one this version wrote."""
    return InvalidArgumentError(message, code=ErrorCode.INVALID_FILE)


def _check(check: _Check, value: Any, where: str) -> None:
    """Raise _bad_file naming `where` unless `value` passes `check`."""
    if not check[1](value):
        raise _bad_file(f"{where} must be {check[0]}, got {value!r:.60}")


def _table(data: dict, name: str, rec: type) -> tuple[list, list]:
    """The columns and rows of table `name`, each checked against _COLUMNS (a table that
    is not there is empty: an older profile may lack one)."""
    table = data.get(name, {"columns": [], "rows": []})
    if type(table) is not dict or type(table.get("columns")) is not list \
            or type(table.get("rows")) is not list:
        raise _bad_file(f"{name} must be an object with a list of columns and a list of rows")
    cols, rows, checks = table["columns"], table["rows"], _COLUMNS[name]
    unknown = [c for c in cols if type(c) is not str or c not in checks]
    if unknown or len(set(cols)) < len(cols):
        raise _bad_file(f"{name} columns must be distinct names among {', '.join(checks)}; "
                        f"got {cols!r:.120}")
    required = [f.name for f in fields(rec) if f.default is MISSING
                and f.default_factory is MISSING]
    missing = [c for c in required if c not in cols]
    if missing:
        raise _bad_file(f"{name} has no column {missing[0]!r}")
    width = len(cols)
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != width:
            raise _bad_file(f"{name} row {i} must be a list of {width} values, got {row!r:.60}")
    for j, col in enumerate(cols):  # a column at a time: one pass over it when all is well
        what, ok = checks[col]
        if not all(map(ok, map(operator.itemgetter(j), rows))):
            i = next(i for i, row in enumerate(rows) if not ok(row[j]))
            raise _bad_file(f"{name} row {i}: {col} must be {what}, got {rows[i][j]!r:.60}")
    for first, then in _ORDER.get(name, ()):
        if first in cols and then in cols:
            a, b = cols.index(first), cols.index(then)
            for i, row in enumerate(rows):
                if row[b] is not None and row[b] < row[a]:
                    raise _bad_file(f"{name} row {i}: {then} ({row[b]}) is before {first} "
                                    f"({row[a]})")
    return cols, rows


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
