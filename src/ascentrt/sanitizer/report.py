"""What the race sanitizer reports: the allocation, the overlapping bytes, both accesses, the fix."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import AscentError, ErrorCode


@dataclass(frozen=True)
class Access:
    """One side of a race: what touched the bytes, from where in the program."""

    write: bool
    task_kind: str       # kernel, copy, memset, host_func
    name: str            # the kernel's or function's name
    stream: int          # stream id
    task_id: int
    site: str            # file.py:line of the call that queued it
    assumed: bool = False  # a kernel without declared reads/writes: taken as reading and writing
    stream_role: str = ""  # what the stream is for, when the runtime made it (a graph's lane)
    beside: bool = False   # a non-blocking host function: it runs beside `stream`'s later work
    for_call: str = ""     # what program call a runtime-made task did this for ("rank 1's all_reduce")
    for_stream: int = -1   # the stream of that call: the one the program orders
    inside: str = ""       # a host function's (callback's) access in its body: the line there
                           # (`site` is then where it was queued)
    captured: str = ""     # a replayed graph node the program captured: the line that captured it
    captured_on: int = -1  # ... the stream it was captured on
    capture: tuple = ()    # ... (which capture, its node number there)

    @property
    def where(self) -> str:
        """'stream 5', or with what the runtime made it for: 'stream 6 (graph 1 lane: ...)'."""
        return f"stream {self.stream}" + (f" ({self.stream_role})" if self.stream_role else "")

    @property
    def kind(self) -> str:
        """'write' or 'read'."""
        return "write" if self.write else "read"

    @property
    def on_host(self) -> bool:
        """Whether a host thread made it (a numpy view, a synchronous copy or fill; `stream` is
        then -1)."""
        return self.stream < 0

    def describe(self) -> str:
        """e.g. "write by kernel `producer` (task 3 on stream 5, prog.py:31)"."""
        if self.on_host:  # (name: what touched the bytes; a view may read and write them)
            how = "access" if self.name == "a numpy view" else self.kind
            return f"{how} by the host ({self.name}; thread {self.task_id}, {self.site})"
        guess = " (undeclared: every buffer argument counts as read and written)" if self.assumed else ""
        how = "access" if self.assumed else self.kind  # (undeclared: not known to be a read)
        beside = "non-blocking, " if self.beside else ""
        call = f"; for {self.for_call} on stream {self.for_stream}" if self.for_call else ""
        inside = f"; the {how} in it at {self.inside}" if self.inside else ""
        captured = (f"; a graph node captured on stream {self.captured_on} at {self.captured}"
                    if self.captured else "")
        return (f"{how} by {self.task_kind} `{self.name}` ({beside}task {self.task_id} on "
                f"{self.where}{call}, {self.site}{inside}{captured}){guess}")


# The allocation site of a buffer allocated while the sanitizer was off (the allocator notes
# sites only under ASCENTRT_LEAK_CHECK=sites, whose site it takes then).
BEFORE_ENABLED = "before the sanitizer was enabled"


def allocated(site: str) -> str:
    """'allocated at file.py:line' for an allocation site, or why it is not known."""
    if site == BEFORE_ENABLED:
        return f"allocated {site}; set ASCENTRT_LEAK_CHECK=sites to see where"
    return f"allocated at {site}"


# What orders a runtime-made stream's work, by the first word of its role.
_OWN_FIX = {
    "graph": "a graph's lanes join the stream it was launched on at its end: record an event "
             "there after the launch, or wait on one recorded before it, on the other side",
    "hccl": "a collective's lanes follow the stream it was called with: order that stream "
            "(an event recorded on it after the collective, or a wait on it before)",
}


def _call_side(x: Access) -> tuple[int, str, str]:
    """(stream, what, site) of one side of a race as the program queued it: a runtime-made
    task's call ("the all_reduce" on the call's stream), else the task itself."""
    if x.for_call:
        return x.for_stream, f"the {x.for_call.split()[-1]}", x.site
    return x.stream, f"`{x.name}`", x.site


@dataclass
class Race:
    """Two accesses to overlapping bytes of one allocation, at least one a write, unordered."""

    ptr: int             # the allocation
    size: int
    alloc_site: str      # where it was allocated ('?' when not known, or BEFORE_ENABLED)
    lo: int              # the overlapping byte range, as offsets into the allocation
    hi: int
    first: Access        # submitted first
    second: Access       # the access that completed the race
    count: int = field(default=1)  # how many times this pair of launch sites raced on it
    reused_from: str | None = None  # use after free: the freed allocation `first` touched
    # Raise mode refused the task that completed it: it never took its task id, which the next
    # task of its stream takes (so no later access is that task's: see Sanitizer._report)
    refused: bool = field(default=False, repr=False, compare=False)

    @property
    def fix(self) -> str:
        """The ordering that removes the race, in the program's own terms."""
        a, b = self.first, self.second
        if a.beside or (b.beside and a.stream == b.stream and not a.on_host):
            return self._beside_fix()
        if a.captured and b.captured and a.capture[0] == b.capture[0]:
            # Two nodes of one graph: a launch runs them as captured, so no event around it
            # orders them; the capture must (in the order it captured them).
            a, b = sorted((a, b), key=lambda x: x.capture[1])
            return (f"both are nodes of one graph, which runs them as they were captured: in "
                    f"the capture, record an event on stream {a.captured_on} after `{a.name}` "
                    f"({a.captured}) and make stream {b.captured_on} wait on it before "
                    f"`{b.name}` ({b.captured}), then capture the graph again")
        if a.for_call or b.for_call:
            return self._call_fix()
        internal = next((x for x in (a, b) if x.stream_role), None)
        if internal is not None:  # (a stream the program never made: say what to order instead)
            return (f"{internal.where} is the runtime's own; order the work you queued it from "
                    f"({internal.site}): " + _OWN_FIX.get(internal.stream_role.split()[0],
                                                          "order the stream you queued it on"))
        if b.on_host and not a.on_host:
            return (f"synchronize stream {a.stream} (or an event recorded after `{a.name}` "
                    f"({a.site})) before the host touches the bytes ({b.site})")
        if a.on_host:
            return (f"touch the bytes on the host ({a.site}) before queuing `{b.name}` "
                    f"({b.site}) from the same thread, or order that thread's work before "
                    f"stream {b.stream}")
        if self.reused_from is not None:
            return (f"free the old buffer only after `{a.name}` on stream {a.stream} ({a.site}): "
                    f"free it on that stream (buf.free(stream)), mark it with record_stream, or "
                    f"synchronize stream {a.stream} before the free")
        return (f"record an event on stream {a.stream} after `{a.name}` ({a.site}) and make "
                f"stream {b.stream} wait on it before `{b.name}` ({b.site})")

    def _call_fix(self) -> str:
        """The fix when one side or both are runtime-made tasks doing a program call's work (a
        collective's lane step, a replayed graph's lane): order the calls' own streams, as for
        tasks queued there. Two calls queued together on one stream (in one group) run as one:
        no event orders them, their buffers must differ."""
        a, b = self.first, self.second
        own = "; ".join(
            f"{x.where} is the runtime's own, doing {x.for_call} ({x.site}), which " + (
                f"forks from stream {x.for_stream} at the launch and joins it again at its end"
                if x.for_call.startswith("graph")
                else f"follows stream {x.for_stream}")
            for x in (a, b) if x.for_call) + ": "
        if a.for_call and b.for_call and a.for_stream == b.for_stream:
            ops = {x.for_call.split()[-1] for x in (a, b)}
            how = ("give the send and the receive separate buffers (an exchange in place cannot be "
                   "ordered)" if ops == {"send", "recv"} else
                   "give them separate buffers, or make the calls one after the other, outside a group")
            return (own + f"both calls were queued on stream {a.for_stream} together (in one "
                    f"group), and run as one: no event on that stream can order them; {how}")
        first, second = (_call_side(x) for x in (a, b))
        if a.on_host:
            return (own + f"touch the bytes on the host ({a.site}) before {second[1]} "
                    f"({second[2]}), from the same thread")
        if b.on_host:
            return own + (f"synchronize stream {first[0]} (or an event recorded after "
                          f"{first[1]} there) before the host touches the bytes ({b.site})")
        return (own + f"record an event on stream {first[0]} after {first[1]} ({first[2]}) and "
                f"make stream {second[0]} wait on it before {second[1]} ({second[2]})")

    def _beside_fix(self) -> str:
        """The fix when the earlier access is a non-blocking host function's, or the later one
        is and the earlier one is later work of its own stream: nothing on its stream waits for
        it (events recorded there and the stream's synchronize neither), so it must block."""
        a, b = self.first, self.second
        fn, other = (a, b) if a.beside else (b, a)
        how = "blocking=True" if fn.task_kind != "callback" else "ACL_CALLBACK_BLOCK (blocking=True)"
        blocking = (f"`{fn.name}` ({fn.site}) is non-blocking: it runs beside stream {fn.stream}'s "
                    f"later work, and neither an event recorded there nor synchronizing that stream "
                    f"waits for it. Launch it with {how}, so that stream {fn.stream}'s later "
                    f"work waits for it")
        if other.stream == fn.stream:
            return f"{blocking} (`{other.name}`, {other.site}, is such work)"
        if fn.task_kind == "callback":  # (run by a report thread: a device synchronize misses it)
            where = (f"before the host touches the bytes ({other.site})" if other.on_host
                     else f"before queuing `{other.name}` ({other.site})")
            return f"{blocking}, and synchronize stream {fn.stream} after it {where}"
        if other.on_host:
            return (f"{blocking}, and synchronize stream {fn.stream} after it before the host "
                    f"touches the bytes ({other.site}); or synchronize the device there (it waits "
                    f"for non-blocking host functions too)")
        return (f"{blocking}, then record an event on stream {fn.stream} after it and make stream "
                f"{other.stream} wait on it before `{other.name}` ({other.site}); or synchronize "
                f"the device before queuing `{other.name}` (it waits for non-blocking host "
                f"functions too)")

    def __str__(self) -> str:
        times = f" ({self.count} times, from the same two call sites or tasks)" if self.count > 1 else ""
        what = "race" if self.reused_from is None else "use after free / reuse without ordering"
        old = "" if self.reused_from is None else f"; the bytes belonged to {self.reused_from}"
        return (f"{what} on bytes [{self.lo}, {self.hi}) of the {self.size}-byte allocation at "
                f"{self.ptr:#x} ({allocated(self.alloc_site)}){times}{old}: "
                f"{self.first.describe()}, then {self.second.describe()}, with no ordering "
                f"between them. Fix: {self.fix}")


class RaceWarning(UserWarning):
    """A race the sanitizer found (mode warn); the program goes on."""


class RaceError(AscentError):
    """A launch that would complete a race (mode raise): it was not queued. `.race` is the report.

    Its code is 107000 (RT_PARAM_INVALID): the submission lacks an ordering it needs."""

    def __init__(self, message: str, race: Race):
        super().__init__(message, code=ErrorCode.RT_PARAM_INVALID)
        self.race = race
