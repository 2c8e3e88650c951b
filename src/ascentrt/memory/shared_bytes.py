"""Which bytes objects the interpreter shares, so that no copy ever writes into one.

A bytes object is immutable to Python, so the interpreter shares some freely: the cached
empty and 1-byte objects, static (immortal or deep-frozen) objects, and the constants and
tables of code objects (`b"\\0" * 64` in a function is one constant, handed out by every call).
A copy written into one of those rewrites every use of it, or the interpreter's own data.
Any other bytes object was made at run time and is the program's, however many names,
lists or frames refer to it: pyACL programs copy device results into such a `bytes(n)`.

The code objects are found through the live functions, generators and frames; what they
hold is cached until the interpreter reports new code (an audit hook on compile,
marshal loads and code construction), so a check costs a set lookup.
"""

from __future__ import annotations

import gc
import sys
import threading
import types

# No program holds this many references: objects counted so are static (immortal on 3.12+,
# deep-frozen on 3.11).
_STATIC_REFS = 1 << 29
_CODE_OF = {types.FunctionType: "__code__", types.GeneratorType: "gi_code",
            types.CoroutineType: "cr_code", types.AsyncGeneratorType: "ag_code"}
# (Not "exec": running code makes none; exec of a string compiles it first.)
_NEW_CODE = frozenset({"compile", "marshal.load", "marshal.loads", "code.__new__"})

_lock = threading.Lock()
_held: dict[int, bytes] = {}   # id -> bytes a live code object holds (kept: ids stay unique)
_state = {"stale": True, "hooked": False}


def interpreter_shares(obj: bytes) -> bool:
    """Whether the interpreter may share `obj` (a cached, static or code-owned object):
    writing into it would change more than the program's own value."""
    if len(obj) <= 1 or sys.getrefcount(obj) >= _STATIC_REFS:
        return True
    with _lock:
        if not _state["hooked"]:
            sys.addaudithook(_on_audit)
            _state["hooked"] = True
        if _state["stale"]:
            _state["stale"] = False  # (before the scan: code made during it marks it stale again)
            _held.clear()
            _held.update((id(b), b) for b in _code_bytes())
        return id(obj) in _held


def _on_audit(event: str, args: tuple) -> None:
    if event in _NEW_CODE:
        _state["stale"] = True


def _code_bytes() -> list[bytes]:
    """Every bytes object held by a code object reachable from a function, generator,
    coroutine or running frame: constants at any depth and the line and exception tables
    (not co_code, which is a copy made on access)."""
    codes = [getattr(obj, _CODE_OF[type(obj)]) for obj in gc.get_objects() if type(obj) in _CODE_OF]
    for top in sys._current_frames().values():
        f: types.FrameType | None = top
        while f is not None:
            codes.append(f.f_code)
            f = f.f_back
    del top  # (this frame is among them: held in a local, it would keep every caller's locals)
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
            stack.extend((item.co_linetable, item.co_exceptiontable))
        elif isinstance(item, (tuple, frozenset)):
            stack.extend(item)
    return found
