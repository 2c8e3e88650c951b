"""Host API call recording: the public API is wrapped while a profile runs, untouched otherwise.

Profiling off costs nothing on the launch path because nothing is there: `install()` swaps the
public functions and methods for recording wrappers, `uninstall()` puts the originals back.
Methods are patched on their classes; module-level functions are rebound in every module that
holds them (so `from ascentrt import launch` done earlier is profiled as well).
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable
from operator import itemgetter
from time import perf_counter_ns
from typing import Any

from . import clock

from .. import hccl
from ..backends.sim import TIMELINE
from ..callsite import is_ours, site_text
from ..callback import launch_callback, process_reports
from ..callback import subscribe as subscribe_report, unsubscribe as unsubscribe_report
from ..copies import copy_direction, memcpy, memcpy2d, memcpy2d_async, memcpy_async, memset, memset_async
from ..device import Device, current_device, set_device, synchronize
from ..errors import TaskError
from ..interrupts import raised_by_handler
from ..event import Event, elapsed_time
from ..launch import launch, launch_host_func
from ..memory import free, malloc, malloc_host
from ..memory.buffer import DeviceBuffer, HostBuffer
from ..memory.mempool import empty_cache, free_async, malloc_async, record_stream
from ..notify import Notify, record_notify, wait_and_reset_notify
from ..stream import Stream

# Module-level API functions (the `ascentrt` package exports each under the same name).
# Taken from the modules that define them when the profiler loads, so later wrapping
# always starts from the originals.
FUNCTIONS: dict[str, Callable[..., Any]] = {f.__name__: f for f in (
    launch, launch_host_func, malloc, malloc_host, free, memcpy, memcpy_async, memcpy2d,
    memcpy2d_async, memset, memset_async, synchronize, set_device, record_notify,
    wait_and_reset_notify, elapsed_time, malloc_async, free_async, record_stream, empty_cache,
    launch_callback, process_reports, subscribe_report, unsubscribe_report)}
# Collectives and communicators, under their module's name (hccl.send is not a stream's send).
FUNCTIONS.update({f"hccl.{f.__name__}": f for f in (
    hccl.all_reduce, hccl.broadcast, hccl.all_gather, hccl.reduce_scatter, hccl.all_to_all,
    hccl.barrier, hccl.send, hccl.recv, hccl.group_start, hccl.group_end, hccl.comm_init_all,
    hccl.comm_init_root_info, hccl.comm_destroy)})
METHODS = {
    Stream: ("record", "wait", "record_notify", "wait_notify", "synchronize", "query", "destroy",
             "close", "begin_capture", "end_capture"),
    Event: ("record", "synchronize", "query", "reset", "destroy", "close"),
    Notify: ("record", "wait_and_reset", "destroy", "close"),
    Device: ("create_stream", "create_event", "create_notify", "malloc", "synchronize", "reset"),
    DeviceBuffer: ("free",),
    HostBuffer: ("free",),
}
# Classes of optional parts, found when they are loaded: (module, class) -> methods.
OPTIONAL_METHODS = {("ascentrt.graph.graph", "Graph"): ("launch", "execute"),
                    ("ascentrt.memory.mempool", "MemPool"): ("malloc_async", "free_async",
                                                             "trim_to", "destroy")}
_ALIASES = {"close": "destroy"}


def _probe_stream_sync(args, kwargs):
    s = args[0]
    return f"stream {s.id}", s._completed >= s._submitted, 0


def _probe_event(args, kwargs):
    ev = args[0]
    m = ev._current()
    if m is None:
        return f"event {ev.id}", True, 0
    # (the record it waits for: the critical path goes on from that task)
    what = f"event {ev.id}" if m.stream is None else f"event {ev.id} (stream {m.stream.id} task {m.position})"
    return what, m.done, clock.now_ns() - m.ts_ns if m.done and m.ts_ns else 0


def _probe_device_sync(args, kwargs):
    dev = args[0] if args and isinstance(args[0], Device) else current_device()
    live = list(dev._dq.streams.values())
    idle = all(s._completed >= s._submitted for s in live)
    return f"device {dev.id}", idle, 0


def _probe_stream_wait(args, kwargs):
    s = args[0]
    ev = args[1] if len(args) > 1 else kwargs.get("event")
    m = getattr(ev, "_marker", None)
    if m is None:
        return f"stream {s.id}", None, 0
    where = "its own" if m.stream is s else f"stream {m.stream.id}'s"
    ago = clock.now_ns() - m.ts_ns if m.done and m.ts_ns else 0
    return f"stream {s.id} on {where} event {ev.id}", m.done or m.stream is s, ago


def _probe_sync_copy(args, kwargs):
    # (a synchronous copy makes no task: its direction and bytes are the call's, for the
    # Copies table; memcpy(dst, src, nbytes=None, kind=None))
    if len(args) >= 2 and not kwargs:
        direction, nbytes = copy_direction(args[0], args[1], args[2] if len(args) > 2 else None)
    else:
        given = dict(zip(("dst", "src", "nbytes"), args), **kwargs)
        direction, nbytes = copy_direction(given["dst"], given["src"], given.get("nbytes"))
    return direction, None, 0, nbytes


# Calls whose target and "was it already complete" the analysis needs (unnecessary syncs), and
# the synchronous copy's direction and bytes (a fourth fact).
PROBES = {"memcpy": _probe_sync_copy,
          "Stream.synchronize": _probe_stream_sync, "Stream.query": _probe_stream_sync,
          "Event.synchronize": _probe_event, "Event.query": _probe_event,
          "Device.synchronize": _probe_device_sync, "synchronize": _probe_device_sync,
          "Stream.wait": _probe_stream_wait}


def _wrap(fn: Callable[..., Any], name: str, calls: list, threads: ThreadNames,
          on_error: Callable[[str, int, int | None], None], inside: dict,
          sites: CallSites) -> Callable[..., Any]:
    """A wrapper that records each call of `fn` as (name, start, end, thread, site[, error,
    facts]), and the name of a thread it sees first in `threads` (ident -> name). The site is
    the program's call site as a key of `sites` (0: the call came from ascentrt itself), said
    as text only when the profile is written. (An int in the tuple, not the code: a tuple of
    plain values leaves the garbage collector's view, and 50k of them tracked slowed every
    collection, the profile's writing twice over.)

    Only a thread's outermost calls are recorded: `inside` holds the threads in a recorded call
    now, and a call the runtime makes inside another one is not (its time is the outer one's).
    Telling them apart by their times would not do: in virtual time a call can take none, and
    one that ended at the instant the next began looked nested in it.
    """
    probe = PROBES.get(name)
    get_ident = threading.get_ident
    append = calls.append
    now = clock.now_ns  # bound once: the clock of this profile (virtual on sim)
    getframe = sys._getframe
    index, note, locate = sites.index, sites.note, sites.locate
    ident = id  # (a local: the builtin's global lookup cost ~90 ns a call, measured)
    # (code, its index << 24) of the program's code this wrapper was last called from: a call
    # from it again (a loop) takes its site without the id() and the dict lookup, a third of
    # the site's cost. One tuple, read and replaced whole: threads never see half of one.
    last: tuple[Any, int] = (None, 0)

    def site_of(frame: Any, code: Any) -> int:
        """The site of a call from `code`, other code than the last seen (then noted as it)."""
        nonlocal last
        ci = index.get(ident(code))
        if ci is None:
            ci = note(code)
        if ci <= 0:  # (ascentrt's own code: the program's call is further out)
            return locate(frame)
        last = (code, ci << 24)
        return ci << 24 | frame.f_lasti

    if probe is None:
        def api(*args, **kwargs):
            thread = get_ident()
            if thread in inside:
                return fn(*args, **kwargs)
            # The call site (see CallSites; its common case inlined: taken on every recorded call)
            frame = getframe(1)
            code = frame.f_code
            seen = last
            where = seen[1] | frame.f_lasti if seen[0] is code else site_of(frame, code)
            inside[thread] = True
            try:
                t0 = now()
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    _failed(append, threads, on_error, name, t0, where, exc, None)
                    raise
            finally:
                del inside[thread]
            if thread not in threads:  # one lookup per call; the name only once per thread
                threads.see(thread)
            append((name, t0, now(), thread, where))  # plain values: cheap to keep
            return result
    else:
        def api(*args, **kwargs):
            thread = get_ident()
            if thread in inside:
                return fn(*args, **kwargs)
            try:
                facts = probe(args, kwargs)
            except Exception as exc:
                if raised_by_handler(exc):  # (the program's own: as if it came before the call)
                    raise
                facts = None  # bad arguments: the call itself reports them
            # The call site (see CallSites; its common case inlined: taken on every recorded call)
            frame = getframe(1)
            code = frame.f_code
            seen = last
            where = seen[1] | frame.f_lasti if seen[0] is code else site_of(frame, code)
            inside[thread] = True
            try:
                t0 = now()
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    _failed(append, threads, on_error, name, t0, where, exc, facts)
                    raise
            finally:
                del inside[thread]
            if thread not in threads:
                threads.see(thread)
            append((name, t0, now(), thread, where, 0, facts))
            return result

    wrapper: Any = api  # (a function with attributes of its own: the original, the API name)
    wrapper.__wrapped__ = fn
    wrapper.__name__ = getattr(fn, "__name__", name)
    wrapper.__qualname__ = getattr(fn, "__qualname__", name)
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    wrapper._ascentrt_api = name
    return wrapper


def _failed(append, threads, on_error, name, t0, where, exc, facts) -> None:
    code = int(getattr(exc, "code", 0) or -1)
    thread = threading.get_ident()
    if thread not in threads:
        threads.see(thread)
    device = getattr(exc, "device", None)  # (an OOM's: the device whose memory ran out)
    # (a failed task's error that a synchronization passes on: not the call's own failure)
    append((name, t0, clock.now_ns(), thread, where, code, facts, device,
            isinstance(exc, TaskError)))
    on_error(name, code, device)


class ThreadNames(dict):
    """ident -> name of the live threads a profile has seen (`see` notes the calling one).

    CPython hands an ended thread's ident to a thread started later: a thread that ends
    leaves this table for `ended` with its end time, so that the next one given its ident is
    seen as a thread of its own, as get_last_error tells them apart (errors.py); `owner`
    says whose a record of an ident at a time is."""

    def __init__(self) -> None:
        super().__init__()
        self.ended: dict[int, list[tuple[int, str]]] = {}  # ident -> [(end ns, name)] in order
        self._local = _Watch()  # (dropped as its thread ends: see _ThreadEnd)

    def see(self, ident: int) -> None:
        """Note the calling thread, whose ident is `ident`, and watch for its end."""
        name = threading.current_thread().name
        self[ident] = name
        self._local.end = _ThreadEnd(self, ident, name)

    def owner(self, ident: int, at_ns: int) -> int:
        """The key of the thread that had `ident` at `at_ns`: the ident for its first owner,
        ident + k for the k-th one after it (thread idents are far apart: no other's)."""
        ended = self.ended.get(ident)
        if not ended:
            return ident
        for k, (end, _) in enumerate(ended):
            if at_ns < end:
                return ident + k
        return ident + len(ended)

    def names(self) -> dict[int, str]:
        """key (see owner) -> name of every thread seen, the live ones under their names now."""
        out = {}
        for ident, ended in list(self.ended.items()):
            for k, (_, name) in enumerate(ended):
                out[ident + k] = name
        live = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
        for ident, name in list(self.items()):
            out[ident + len(self.ended.get(ident, ()))] = live.get(ident, name)
        return out


class _Watch(threading.local):
    """A thread's watch for its end (see ThreadNames.see)."""

    end: object = None


class _ThreadEnd:
    """Moves a thread from its ThreadNames to `ended` when the thread ends (its thread-local
    state, which holds this, is dropped then)."""

    __slots__ = ("book", "ident", "name")

    def __init__(self, book: ThreadNames, ident: int, name: str):
        self.book, self.ident, self.name = book, ident, name

    def __del__(self) -> None:
        book = self.book
        if book.get(self.ident) is not self.name:  # (seen again meanwhile: not this one's)
            return
        # The time by the host's clock, read without the dying thread's own state
        end = TIMELINE.now if clock.now_ns is not perf_counter_ns else perf_counter_ns()
        book.ended.setdefault(self.ident, []).append((end, self.name))
        book.pop(self.ident, None)


class CallSites:
    """The program's call sites of recorded calls, as small ints: a site is (the index of its
    code object here) << 24 | its instruction offset. Finding it costs a frame and an identity
    test per call from the code a wrapper was last called from (a loop), a dict lookup of the
    code's id from other code: a test of the file name of each call's code, and a key of its
    id, cost three times that (a quarter of a launch)."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}  # id(code) -> its index (1, 2, ...), or -1: ascentrt's own
        self.codes: list = [None]        # index -> code (held: the ids in `index` stay unique)

    def note(self, code: Any) -> int:
        """Take in a code object seen for the first time; its index (-1: ascentrt's own)."""
        if is_ours(code.co_filename):
            self.index[id(code)] = -1
            self.codes.append(code)  # (held too: its id must not come back as another's)
            return -1
        ci = len(self.codes)
        self.codes.append(code)
        self.index[id(code)] = ci
        return ci

    def locate(self, frame: Any) -> int:
        """The site of a call from `frame` whose code is new here or ascentrt's own (then the
        program's call is further out); 0 when none is the program's."""
        while frame is not None:
            code = frame.f_code
            ci = self.index.get(id(code))
            if ci is None:
                ci = self.note(code)
            if ci > 0:
                return ci << 24 | frame.f_lasti
            frame = frame.f_back
        return 0

    def text(self, key: int | str) -> str:
        """'file.py:line' of a recorded call's site ('?' for 0), or a text as it is."""
        if isinstance(key, str):
            return key
        return site_text((self.codes[key >> 24], key & 0xFFFFFF)) if key else "?"


def by_start(calls: list[tuple]) -> list[tuple]:
    """The recorded calls (each a thread's outermost: see _wrap) by start; calls that start at
    the same instant (in virtual time a call may take none) stay in the order they were made."""
    return sorted(calls, key=itemgetter(1))


# fn(recording) of facades whose compiled fast paths call a wrapped method directly (which no
# wrapper sees): told True as the first instrumentation is installed, False as the last goes,
# they take their wrapped path meanwhile. See watch().
_watchers: list = []
_installed = [0]  # instrumentations installed now


def watch(fn: Any) -> None:
    """Tell fn(recording) now and whenever API calls start or stop being recorded."""
    _watchers.append(fn)
    fn(_installed[0] > 0)


def _tell_watchers(change: int) -> None:
    before = _installed[0] > 0
    _installed[0] += change
    if (_installed[0] > 0) != before:
        for fn in list(_watchers):
            fn(not before)


class Instrumentation:
    """The swapped-in wrappers of one profiling run, and how to put the originals back."""

    def __init__(self, calls: list, threads: ThreadNames, on_error):
        self.calls = calls
        self.threads = threads  # ident -> name of every thread that made a recorded call
        self.on_error = on_error
        self.inside: dict[int, bool] = {}  # threads in a recorded call now (see _wrap)
        self.sites = CallSites()  # the program's call sites of the recorded calls (see _wrap)
        self.methods: list[tuple[type, str, object]] = []  # (class, attribute, original)
        self.functions: dict[int, tuple[object, object]] = {}  # id(original) -> (original, wrapper)
        self.installed = False

    def install(self) -> None:
        """Swap every public API function and method for its recording wrapper."""
        methods = dict(METHODS)
        for (module, name), attrs in OPTIONAL_METHODS.items():
            cls = getattr(sys.modules.get(module), name, None)
            if cls is not None:
                methods[cls] = attrs
        for cls, names in methods.items():
            for attr in names:
                original = cls.__dict__.get(attr)
                # (a compiled class's methods are method descriptors)
                if not isinstance(original, (types.FunctionType, types.MethodDescriptorType)) or \
                        hasattr(original, "_ascentrt_api"):
                    continue
                label = f"{cls.__name__}.{_ALIASES.get(attr, attr)}"
                setattr(cls, attr, _wrap(original, label, self.calls, self.threads, self.on_error, self.inside,
                                             self.sites))
                self.methods.append((cls, attr, original))
        for name, original in FUNCTIONS.items():
            self.functions[id(original)] = (original, _wrap(original, name, self.calls,
                                                            self.threads, self.on_error,
                                                            self.inside, self.sites))
        _rebind(self.functions)
        self.installed = True
        _tell_watchers(1)

    def uninstall(self) -> None:
        """Put the original functions and methods back (wrappers bound since are swapped too)."""
        for cls, attr, original in reversed(self.methods):
            setattr(cls, attr, original)
        self.methods.clear()
        _rebind({id(w): (w, o) for o, w in self.functions.values()})
        self.functions.clear()
        if self.installed:
            self.installed = False
            _tell_watchers(-1)


def _rebind(swaps: dict[int, tuple[object, object]]) -> None:
    """In every loaded module, replace each `old` of swaps {id(old): (old, new)} by `new`."""
    for module in list(sys.modules.values()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        if not isinstance(namespace, dict):  # (a module object of an extension may hold anything)
            continue  # type: ignore[unreachable]
        for key, value in list(namespace.items()):
            pair = swaps.get(id(value))
            if pair is not None and pair[0] is value:
                namespace[key] = pair[1]
