"""The facade's plumbing: pyACL-style argument parsing, (values..., ret) returns, int handles."""

from __future__ import annotations

import functools
import inspect
import itertools
import linecache
import operator
import threading
from typing import Any, Callable, Generic, Protocol, TypeVar, cast

import numpy as np

from .. import forksafe
from ..interrupts import raised_by_handler
from ..callback import forget_destroyed_streams
from ..callsite import GENERATED_PREFIX
from ..context import Context, current_context
from ..errors import AscentError, ErrorCode, InvalidArgumentError, set_last_error

from ..event import Event
from ..notify import Notify
from ..stream import Stream

T = TypeVar("T")

_INT32 = (-(1 << 31), (1 << 31) - 1)
_UINT32 = (-(1 << 31), (1 << 32) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class _ThreadMessage(threading.local):
    """This host thread's most recent error message (None: none)."""

    message: str | None = None


_recent = _ThreadMessage()


class _MessageScope:
    """Whether get_recent_err_msg reads the calling thread's last error text (pyACL's default)
    or the whole process's (acl.init's config with "err_msg_mode": "1"), and that text."""

    per_process = False
    message: str | None = None  # the process's last error text, kept while per_process


MESSAGES = _MessageScope()


def _is_int(x: Any) -> bool:
    """What CPython's k / K converters take: an int (or subclass, bool too), never a numpy integer
    (PyLong_Check; i, I and l also take what has __index__: parse_slow converts it first)."""
    return type(x) is int or isinstance(x, int)


def _int_in(lo: int, hi: int) -> Callable[[Any], object]:
    return lambda x: (type(x) is int or isinstance(x, (int, np.integer))) and lo <= x <= hi


# PyArg_ParseTuple format letters as pyACL uses them: i/I/l range-checked (an int that overflows
# an i or I fails to parse, as the reference says; I takes what a C int or unsigned int holds),
# k/K masked (any Python int, but no numpy integer: a pointer a program keeps in a numpy array
# must be made an int first on CANN too).
_CHECKS: dict[str, Callable[[Any], object]] = {
    "i": _int_in(*_INT32),
    "I": _int_in(*_UINT32),
    "l": _int_in(*_INT64),
    "k": _is_int,
    "K": _is_int,
    "d": lambda x: isinstance(x, (int, float, np.integer, np.floating)),
    "s": lambda x: isinstance(x, str),
    "O": lambda x: True,
}


class AclTypeError(TypeError):
    """A TypeError pyACL itself raises (argument parsing, non-callable callbacks)."""


class AclValueError(ValueError):
    """A ValueError pyACL's wrappers raise (a list argument that is no list, a key too long)."""


class AclFunction(Protocol):
    """What `api` makes: a pyACL-style call returning (values..., ret), tagged with its name and format."""

    __acl_name__: str
    __acl_fmt__: str
    __wrapped__: Callable[..., Any]
    __signature__: inspect.Signature

    def __call__(self, *args: Any) -> Any: ...


def fail(code: int, message: str) -> AscentError:
    """An error carrying a pyACL return code, for the facade's own checks."""
    return AscentError(message, code=code)


_MISSING = object()  # an argument not given (a generated call's parameter default)

# What a hot call (acl/_hot.py) takes from its function: functools.wraps' names but __module__,
# which a compiled class keeps as its own
_HOT_NAMES = ("__name__", "__qualname__", "__doc__", "__annotations__")


def api(fmt: str, out: tuple[Any, ...] = (), module: str = "acl.rt", optional: int = 0,
        hot: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
        ) -> Callable[[Callable[..., Any]], AclFunction]:
    """Wrap a facade function: parse positional args by `fmt`, turn errors into return codes.

    `out` holds the value slots returned with a failing ret (pyACL returns them untouched);
    the wrapped function returns its values (a tuple, a single value, or None) on success.
    The last `optional` letters of `fmt` may be omitted. `hot(checked)`, for the hottest
    calls, makes the call itself: its common case in one frame, handing anything else to
    `checked` (the generated call) and its errors to ret_of.
    """
    most = len(fmt)
    least = most - optional
    checked = tuple((i, _CHECKS[c]) for i, c in enumerate(fmt) if c != "O")
    # The hot path's test, per accepted argument count (optional ones may be omitted): exact
    # ints (numpy ints take the slow path, which converts them), in range for i / l; a float
    # or str slot among those given always takes the slow path.
    tests = []
    for i, c in enumerate(fmt):
        if c in "kK":
            tests.append(f"type(a{i}) is int")
        elif c in _RANGES:
            lo, hi = (0, _UINT32[1]) if c == "I" else _RANGES[c]  # (a negative I is converted)
            tests.append(f"type(a{i}) is int and {lo} <= a{i} <= {hi}")
        elif c != "O":
            tests.append("False")
        else:
            tests.append("")
    if optional:  # (the count varies: the arguments come as a tuple, a{i} standing for args[i])
        tests = [t.replace(f"a{i}", f"args[{i}]") for i, t in enumerate(tests)]
        clauses = [" and ".join([f"n == {n}"] + [t for t in tests[:n] if t]) for n in range(most, least - 1, -1)]
    else:  # a fixed count: named parameters (no tuple to index); more or fewer take the slow path
        clauses = [" and ".join(["not rest"] + [f"a{i} is not _MISSING" for i, c in enumerate(fmt) if c == "O"]
                                + [t for t in tests if t])]
    fast = " or ".join(f"({c})" for c in clauses if "False" not in c) or "False"

    def wrap(fn: Callable[..., Any]) -> AclFunction:
        message = f"{module}.{fn.__name__} args parse failed"

        def parse_slow(args: tuple[Any, ...]) -> tuple[Any, ...]:
            """Check every argument (and the count), converting numpy ints; AclTypeError if one fails."""
            if not least <= len(args) <= most:
                raise AclTypeError(message)
            convert = False
            for i, check in checked:
                if i >= len(args):
                    break
                a = args[i]
                if fmt[i] in _RANGES and not isinstance(a, (int, np.integer)) \
                        and hasattr(type(a), "__index__"):
                    # (as PyArg_ParseTuple's i, I and l: what has __index__ is an int, and an
                    # error its __index__ raises is the call's, passed through as it is)
                    a = operator.index(a)
                    args = (*args[:i], a, *args[i + 1:])
                if not check(a):
                    raise AclTypeError(message)
                convert = convert or (type(a) is not int and isinstance(a, (int, np.integer))) or \
                    (fmt[i] == "I" and a < 0)
            if convert:  # (C ints, as PyArg_ParseTuple makes them: True is 1, a numpy int its
                # value, a negative I the unsigned int it stands for: -1 is 0xFFFFFFFF)
                args = tuple((int(a) & 0xFFFFFFFF if i_fmt == "I" else int(a))
                             if i_fmt != "O" and isinstance(a, (int, np.integer)) else a
                             for a, i_fmt in zip(args, fmt))
            return args

        # The call is generated (as dataclasses generate __init__) so that the hot path's test
        # is one inline expression instead of loops over the argument slots: a facade call is
        # a few hundred ns, and this halves what the wrapper adds.
        returned = "values, 0" if len(out) == 1 else "(*values, 0)" if out else "0"
        if optional:
            head = f"""
def call(*args):
    n = len(args)
    if not ({fast}):
        args = parse_slow(args)
    try:
        values = fn(*args)
"""
        elif most:
            names = ", ".join(f"a{i}" for i in range(most))
            params = "".join(f"a{i}=_MISSING, " for i in range(most))
            head = f"""
def call({params}/, *rest):
    if not ({fast}):
        {names}, = parse_slow(tuple(a for a in ({names},) if a is not _MISSING) + rest)
    try:
        values = fn({names})
"""
        elif module in ("acl.rt", "acl"):
            # pyACL's acl and acl.rt calls without parameters never parse their arguments
            # (variadic C wrappers): public code passes one, acl.rt.synchronize_device(device_id)
            # or acl.get_soc_name(device_id), and pyACL ignores it.
            head = """
def call(*rest):
    try:
        values = fn()
"""
        else:
            head = """
def call(*rest):
    if rest:
        parse_slow(rest)
    try:
        values = fn()
"""
        source = head + f"""    except (AclTypeError, AclValueError):
        raise
    except Exception as exc:
        return ret_of(exc, out)
    return {returned}
"""
        scope: dict[str, Any] = {"fn": fn, "parse_slow": parse_slow, "out": out, "ret_of": ret_of,
                                 "_MISSING": _MISSING, "AclTypeError": AclTypeError,
                                 "AclValueError": AclValueError}
        # (named as generated code, which call sites and warnings skip like ascentrt's own; its
        # lines in linecache, as attrs does, so that a traceback shows them)
        where = f"{GENERATED_PREFIX}acl wrapper of {module}.{fn.__name__}>"
        linecache.cache[where] = (len(source), None, source.splitlines(True), where)
        exec(compile(source, where, "exec"), scope)
        if hot is None:
            tagged = cast(AclFunction, functools.wraps(fn)(scope["call"]))
        else:  # (a compiled call object: attribute slots, no __dict__ to update; see acl/_hot.py)
            tagged = cast(AclFunction, functools.update_wrapper(hot(scope["call"]), fn, _HOT_NAMES, ()))
        tagged.__signature__ = _call_signature(fn, out)
        tagged.__acl_name__ = f"{module}.{fn.__name__}"
        tagged.__acl_fmt__ = fmt
        return tagged

    return wrap


def _call_signature(fn: Callable[..., Any], out: tuple[Any, ...]) -> inspect.Signature:
    """What a wrapped call takes and returns: fn's parameters, positional only (as pyACL's C
    functions take them), and (values..., ret) where fn returns its values; a value slot whose
    failure placeholder is None may be None."""
    sig = inspect.signature(fn)
    params = [p.replace(kind=inspect.Parameter.POSITIONAL_ONLY) for p in sig.parameters.values()]
    if not out:
        return sig.replace(parameters=params, return_annotation="int")
    values = sig.return_annotation
    text = values if isinstance(values, str) else inspect.formatannotation(values)
    parts = [text]
    if len(out) > 1 and text.startswith("tuple[") and text.endswith("]"):
        parts = _top_level_items(text[len("tuple["):-1])
    if len(parts) == len(out):
        parts = [f"{p} | None" if slot is None else p for p, slot in zip(parts, out)]
    return sig.replace(parameters=params, return_annotation=f"tuple[{', '.join(parts)}, int]")


def _top_level_items(text: str) -> list[str]:
    """'a, b[c, d], e' -> ['a', 'b[c, d]', 'e']: the comma-separated items outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    items.append(text[start:].strip())
    return items


_RANGES = {"i": _INT32, "I": _UINT32, "l": _INT64}


def ret_of(exc: Exception, out: tuple[Any, ...]) -> int | tuple[Any, ...]:
    """What a facade call returns for an error: (out..., its code), kept as the thread's last
    error; any other exception (a facade bug) must still come back as a code, never a raise.
    What the program's own signal handler raised inside the call (a wait it ended) is raised
    again: in pyACL the handler runs once the C call returns, and its exception comes out."""
    if raised_by_handler(exc):
        raise exc
    if isinstance(exc, AscentError):
        return _failed(int(exc.code), str(exc), out)
    return _failed(int(ErrorCode.RT_INTERNAL_ERROR), f"{type(exc).__name__}: {exc}", out)


def _failed(code: int, message: str, out: tuple[Any, ...]) -> int | tuple[Any, ...]:
    set_last_error(code)
    _recent.message = message
    if MESSAGES.per_process:
        MESSAGES.message = message
    return (*out, code) if out else code


def recent_error_message() -> str | None:
    """Return and clear the last facade error text: this thread's, or the process's in
    err_msg_mode 1."""
    if MESSAGES.per_process:
        msg, MESSAGES.message = MESSAGES.message, None
        return msg
    msg = _recent.message
    _recent.message = None
    return msg


class Handles(Generic[T]):
    """Int handles for core objects: never reused, never confused between kinds."""

    _next = itertools.count(0x5C0000001000, 0x40)

    def __init__(self, kind: type[T], what: str) -> None:
        self.kind = kind
        self.what = what
        self._by_handle: dict[int, T] = {}
        self._by_object: dict[int, int] = {}
        self._lock = forksafe.lock()

    def add(self, obj: T) -> int:
        """The handle of `obj`, made on first use."""
        with self._lock:
            h = self._by_object.get(id(obj))
            if h is None:
                h = next(Handles._next)
                self._by_handle[h] = obj
                self._by_object[id(obj)] = h
            return h

    def get(self, handle: int) -> T:
        """The object behind `handle`; raises 100000 for 0 and 107017 for unknown handles."""
        if handle == 0:
            raise InvalidArgumentError(f"{self.what} handle is null")
        obj = self._by_handle.get(handle)
        if obj is None:
            raise InvalidArgumentError(f"{handle:#x} is not a live {self.what} handle",
                                       code=ErrorCode.RT_INVALID_HANDLE)
        return obj

    def remove(self, handle: int) -> None:
        """Forget a handle (its object was destroyed)."""
        with self._lock:
            obj = self._by_handle.pop(handle, None)
            if obj is not None:
                self._by_object.pop(id(obj), None)

    def drop_dead(self, is_dead: Callable[[T], bool]) -> None:
        """Forget every handle whose object `is_dead(obj)` says was destroyed elsewhere."""
        with self._lock:
            for h, obj in list(self._by_handle.items()):
                if is_dead(obj):
                    del self._by_handle[h]
                    self._by_object.pop(id(obj), None)

    def items(self) -> list[tuple[int, T]]:
        """(handle, object) pairs."""
        with self._lock:
            return list(self._by_handle.items())


class _ThreadTask(threading.local):
    """The id of the last task this host thread submitted to a stream it created (0: none yet)."""

    task_id: int = 0


_last_task = _ThreadTask()


def note_task(handle: int, stream: Stream, task_id: int | None = None) -> None:
    """Remember the task just submitted to `stream` (its id when the submit returned one) as
    this thread's last one (get_thread_last_task_id); CANN counts tasks on streams the program
    created only."""
    if handle and not stream._internal:
        # (without an id, the stream's count right after the submit: another thread submitting
        # to the same stream in between would make this its task's id)
        _last_task.task_id = stream._submitted if task_id is None else task_id


def last_task_id() -> int:
    """The id note_task kept for this thread, 0 before its first task."""
    return _last_task.task_id


def need_context() -> Context:
    """The calling thread's current context; raises 107002 when it has none."""
    ctx = current_context()
    if ctx is None:
        raise fail(ErrorCode.RT_CONTEXT_NULL, "no current context: call acl.rt.set_device or "
                                              "acl.rt.create_context first")
    return ctx


def timeout_ms(value: int, zero_means_forever: bool = False) -> float | None:
    """pyACL milliseconds to core seconds: -1 forever, > 0 ms; anything else 107000."""
    if value == -1 or (zero_means_forever and value == 0):
        return None
    if value <= 0:
        raise fail(ErrorCode.RT_PARAM_INVALID, f"timeout must be -1 or > 0 ms, got {value}")
    return value / 1000.0


def _tables() -> tuple[Handles[Context], Handles[Stream], Handles[Event], Handles[Notify]]:
    return (Handles(Context, "context"), Handles(Stream, "stream"), Handles(Event, "event"),
            Handles(Notify, "notify"))


CONTEXTS, STREAMS, EVENTS, NOTIFIES = _tables()


def stream_of(handle: int, own: bool = False) -> Stream:
    """The stream behind a handle; 0 is the current context's default stream. The calling
    thread needs a current context (107002, as CANN's stream calls check); with `own`, the
    stream must be that context's (107003, as CANN's destroy, record, reset, wait, async copy
    and memset and failure-mode calls check: a worker thread that forgot set_context, or uses
    a stream of another context, is refused as on the device)."""
    if handle == 0:
        return need_context().default_stream
    stream = STREAMS.get(handle)  # (a bad handle first: 107017 with or without a context)
    if stream._refuse == "destroyed":
        STREAMS.remove(handle)
        raise fail(ErrorCode.RT_INVALID_HANDLE, f"stream {handle:#x} was destroyed")
    ctx = need_context()
    if own and not ctx.owns(stream):
        raise fail(ErrorCode.RT_STREAM_CONTEXT, f"stream {handle:#x} belongs to another context "
                                                f"than this thread's current one (set_context)")
    return stream


def sweep() -> None:
    """Forget handles (and report subscriptions) of objects a reset or context destruction destroyed."""
    forget_destroyed_streams()
    CONTEXTS.drop_dead(lambda c: c.destroyed)
    STREAMS.drop_dead(lambda s: s._refuse == "destroyed")
