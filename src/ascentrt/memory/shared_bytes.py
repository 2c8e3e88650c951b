"""Which bytes objects the interpreter shares, so that no copy ever writes into one.

A bytes object is immutable to Python, so the interpreter shares some freely: the cached
empty and 1-byte objects, static (immortal or deep-frozen) objects, and the constants and
tables of code objects (`b"\\0" * 64` in a function is one constant, handed out by every call).
A copy written into one of those rewrites every use of it, or the interpreter's own data.
Any other bytes object was made at run time and is the program's, however many names,
lists or frames refer to it: pyACL programs copy device results into such a `bytes(n)`.

The code objects are found through the live functions, generators and frames, and (from
the first check on, or once watch() is called) through the code that exec and eval run, which
the program may hold in a variable only; what they hold is cached until the interpreter
reports new code (an audit hook on compile, marshal loads and code construction), so a check
costs a set lookup.
"""

from __future__ import annotations

import functools
import gc
import sys
import types
import weakref

from .. import forksafe

# No program holds this many references: objects counted so are static (immortal on 3.12+,
# deep-frozen on 3.11).
_STATIC_REFS = 1 << 29
_CODE_OF = {types.FunctionType: "__code__", types.GeneratorType: "gi_code",
            types.CoroutineType: "cr_code", types.AsyncGeneratorType: "ag_code"}
# (exec makes no code: exec of a string compiles it first. It hands over the code it runs.)
_NEW_CODE = frozenset({"compile", "marshal.load", "marshal.loads", "code.__new__"})
_PRUNE_AT = 4096  # code noted but not yet taken in, past which the dead entries are dropped

_lock = forksafe.lock()
_held: dict[int, bytes] = {}   # id -> bytes a live code object holds (kept: ids stay unique)
_state = {"stale": True, "hooked": False}
_ran: dict[int, weakref.ref] = {}  # id -> code exec / eval ran since the last check (the hook
                                   # adds, a check takes: single dict operations, atomic)
_run: dict[int, weakref.ref] = {}  # id -> code exec / eval ran, taken in, while it lives


def watch() -> None:
    """Start noting the code that exec and eval run (a check starts it too; code run before
    goes unseen unless a function, generator or frame holds it)."""
    with _lock:
        if not _state["hooked"]:
            sys.addaudithook(_on_audit)
            _state["hooked"] = True


def interpreter_shares(obj: bytes) -> bool:
    """Whether the interpreter may share `obj` (a cached, static or code-owned object):
    writing into it would change more than the program's own value."""
    if len(obj) <= 1 or sys.getrefcount(obj) >= _STATIC_REFS:
        return True
    watch()
    with _lock:
        if _ran:
            codes = []
            while _ran:  # (one item at a time: the hook may add meanwhile)
                code = _ran.popitem()[1]()
                if code is not None:
                    codes.append(code)
            for code in codes:
                key = id(code)
                if key not in _run:
                    _run[key] = weakref.ref(code, functools.partial(_forget, key))
            if not _state["stale"]:
                _held.update((id(b), b) for b in _held_by(codes))
        if _state["stale"]:
            _state["stale"] = False  # (before the scan: code made during it marks it stale again)
            _held.clear()
            _held.update((id(b), b) for b in _code_bytes())
        return id(obj) in _held


def _forget(key: int, _: weakref.ref) -> None:
    """A code exec / eval ran is gone."""
    _run.pop(key, None)


def _on_audit(event: str, args: tuple) -> None:
    if event in _NEW_CODE:
        _state["stale"] = True
    elif event == "exec" and type(args[0]) is types.CodeType:
        code = args[0]
        key = id(code)
        for known in (_run.get(key), _ran.get(key)):
            if known is not None and known() is code:
                return  # (seen already: a loop that execs one code pays two lookups)
        _ran[key] = weakref.ref(code)  # (taken in at the next check, under its lock)
        if len(_ran) > _PRUNE_AT:
            for dead in [k for k, r in list(_ran.items()) if r() is None]:
                _ran.pop(dead, None)


def _code_bytes() -> list[bytes]:
    """Every bytes object held by a code object reachable from a function, generator,
    coroutine or running frame, or run by exec / eval since watch()."""
    codes = [getattr(obj, _CODE_OF[type(obj)]) for obj in gc.get_objects() if type(obj) in _CODE_OF]
    for top in sys._current_frames().values():
        f: types.FrameType | None = top
        while f is not None:
            codes.append(f.f_code)
            f = f.f_back
    del top  # (this frame is among them: held in a local, it would keep every caller's locals)
    codes += [c for c in (r() for r in list(_run.values())) if c is not None]
    return _held_by(codes)


def _held_by(codes: list) -> list[bytes]:
    """The bytes objects these code objects hold: constants at any depth, the bytecode (3.11
    caches co_code on the code object, and code.replace() builds from it) and the line and
    exception tables."""
    seen: set[int] = set()
    found: list[bytes] = []
    stack: list[object] = list(codes)
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, bytes):
            found.append(item)
        elif isinstance(item, types.CodeType):
            stack.extend(item.co_consts)
            stack.extend((item.co_code, item.co_linetable, item.co_exceptiontable))
        elif isinstance(item, (tuple, frozenset)):
            stack.extend(item)
    return found
