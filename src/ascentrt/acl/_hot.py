"""acl.rt.malloc's and acl.rt.free's common case, compiled with the memory layer (make accel).

These two calls are the facade's hottest: as Python they were two frames and a dozen generic
checks around the core's compiled allocation, 1.7x the core's own malloc and free. Compiled in
the memory layer's build, the checks are C type tests and the allocator and buffer calls are
direct. Anything but the common case goes to the generated, checked call (`checked`), which
parses, converts and refuses as pyACL does. Each instance carries its function's name,
docstring and signature as attributes of its own (declared below): a subclass defined in Python
could carry them too, but its calls would lose the compiled class's vectorcall (CPython 3.11
gives it only to the class itself), and each call would pack its arguments into a tuple.
"""

from __future__ import annotations

from typing import Any, Callable

from ..memory.allocator import DeviceAllocator
from ..memory.buffer import DeviceBuffer
from ._api import _MISSING


class HotMalloc:
    """acl.rt.malloc(size, policy): (dev_ptr, ret), a live current context's device memory."""

    # What functools.update_wrapper and the facade set on a call (a compiled instance has no
    # __dict__: these are its slots; __module__ stays the class's, the compiled type's own)
    __name__: Any
    __qualname__: Any
    __doc__: Any
    __annotations__: Any
    __wrapped__: Any
    __signature__: Any
    __acl_name__: Any
    __acl_fmt__: Any

    def __init__(self, checked: Callable[..., Any], handed: dict, current: Any, padding: int,
                 policy_range: tuple[int, int], refused: Callable[..., Any]) -> None:
        self.checked = checked    # the generated call: every other case, with pyACL's codes
        self.handed = handed      # pointer -> buffer handed out (acl/_memory.py's _handed_device)
        self.current = current    # the thread's current context (context._current)
        self.padding = padding    # bytes added to each allocation (acl/_memory.py's PADDING)
        self.lo, self.hi = policy_range
        self.refused = refused    # (memory, size, exc) -> (0, ret) for a refused allocation
        self.last: tuple[Any, Any] = (None, None)  # (context, its device's memory): see __call__
        self.recording = False  # a profile records API calls (see record)

    def record(self, recording: bool) -> None:
        """Told by the profiler as it starts and stops recording API calls."""
        self.recording = recording

    # (the parameters' names begin with __: the build ignores `/`, and pyACL takes no keywords)
    def __call__(self, __size: Any = _MISSING, __policy: Any = _MISSING, *rest: Any) -> Any:
        size, policy = __size, __policy
        ctx = self.current.context
        # (while a profile records, the checked call allocates: through Device.malloc, which
        # the profiler wraps, so that the allocation is among the profile's host API calls)
        if type(size) is not int or type(policy) is not int or rest or ctx is None or self.recording:
            return self.checked(size, policy, *rest)
        n: int = size
        p: int = policy
        if n <= 0 or not self.lo <= p <= self.hi or ctx.destroyed:
            return self.checked(n, p)
        # The device memory of the last context seen (a context's device, and the device's
        # memory, never change): one tuple, so that another thread reads a matching pair
        last = self.last
        if last[0] is ctx:
            memory: DeviceAllocator = last[1]
        else:
            memory = ctx.device._memory
            self.last = (ctx, memory)
        try:
            buf = memory.malloc(n + self.padding)
        except Exception as exc:
            return self.refused(memory, size, exc)
        ptr: object = buf.addr  # (boxed once: the key and the value returned)
        self.handed[ptr] = buf
        return ptr, 0


class HotFree:
    """acl.rt.free(dev_ptr): ret, for a pointer acl.rt.malloc handed out and still live."""

    __name__: Any  # (as HotMalloc's)
    __qualname__: Any
    __doc__: Any
    __annotations__: Any
    __wrapped__: Any
    __signature__: Any
    __acl_name__: Any
    __acl_fmt__: Any

    def __init__(self, checked: Callable[..., Any], handed: dict) -> None:
        self.checked = checked
        self.handed = handed
        self.recording = False  # a profile records API calls (see record)

    def record(self, recording: bool) -> None:
        """Told by the profiler as it starts and stops recording API calls."""
        self.recording = recording

    def __call__(self, __dev_ptr: Any = _MISSING, *rest: Any) -> Any:
        dev_ptr = __dev_ptr
        key: object = dev_ptr  # (as it came: tested as an int below, dev_ptr becomes a C int,
        # boxed anew at each use). While a profile records, the checked call frees: its call
        # of the buffer's free goes through the attribute the profiler wraps (a compiled call
        # would not), so the free is in the profile's host API calls.
        if type(dev_ptr) is int and not rest and not self.recording:
            handed = self.handed
            alloc: DeviceBuffer | None = handed.get(key)
            if alloc is not None:
                # Claimed at once (dict.pop is a generic method call here; get and del are not):
                # compiled, no other thread runs between the two; as Python, a racing free of
                # the pointer may claim it first, and this one takes the checked call.
                try:
                    del handed[key]
                except KeyError:
                    return self.checked(key)
                try:
                    alloc.free()
                    return 0
                except Exception:  # (unless a new allocation took its place meanwhile)
                    handed.setdefault(key, alloc)
                # (a refused free frees nothing: the checked call claims it again, says why)
        return self.checked(key, *rest)
