"""What tasks access: the byte spans of buffers, pitched rows and their overlaps, a task's
access records (declared or taken from its arguments) and what a report says of each."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..callsite import Site, is_ours, site_text, user_frame
from ..engine.task import COPY, DETACH, HOST_FUNC, KERNEL, KIND_NAMES, MEMSET
from ..graph.graph import segment_nodes
from ..memory.buffer import BufferSlice, DeviceBuffer, HostBuffer, TypedView
from ..memory.registry import REGISTRY
from .report import Access

_BUFFERS = (DeviceBuffer, HostBuffer, BufferSlice, TypedView)


def span_of(buf):
    """(allocation, lo, hi) of the bytes a buffer argument names."""
    if type(buf) is TypedView:
        alloc, lo, hi = span_of(buf.buffer)
        if buf.shape is not None:
            n = buf.dtype.itemsize
            for d in (buf.shape if isinstance(buf.shape, (tuple, list)) else (buf.shape,)):
                n *= int(d)
            hi = min(hi, lo + n)
        return alloc, lo, hi
    if type(buf) is BufferSlice:
        return buf.base, buf.offset, buf.offset + buf.nbytes
    return buf, 0, buf.nbytes


def array_spans(array: np.ndarray) -> list:
    """(allocation, lo, hi, rows) of the bytes a numpy array argument reaches, when they lie
    in a known allocation (a view of a buffer's bytes: `buf.numpy()`, acl.util.ptr_to_numpy,
    host memory registered with numpy_to_ptr or host_register); [] for the program's own
    memory. Contiguous rows are one span; a 1-D or 2-D array of strided rows one strided span
    (as pitched_spans); any other layout the span from its first byte to its last."""
    nbytes = array.nbytes
    if not nbytes:
        return []
    addr = array.__array_interface__["data"][0]
    width, height = nbytes, 1
    if not array.flags.c_contiguous:
        shape, strides, width = array.shape, array.strides, array.itemsize
        dims = [(n, st) for n, st in zip(shape, strides) if n != 1]
        while dims and dims[-1][1] == width:  # (the contiguous inner dimensions make a row)
            width *= dims.pop()[0]
        if len(dims) == 1 and dims[0][1] >= width:  # rows at a pitch
            height, pitch = dims[0]
        elif dims:  # (any other layout: from its lowest byte to its highest)
            low = sum((n - 1) * st for n, st in dims if st < 0)
            high = sum((n - 1) * st for n, st in dims if st > 0)
            addr, width = addr + low, high - low + width
    if height == 1:
        pitch = width
    end = addr + (height - 1) * pitch + width
    alloc = REGISTRY.find(addr, wait=False, end=end)  # (under the engine lock: never the pool's)
    if alloc is None or end > alloc.addr + alloc.nbytes:
        return []  # memory the registry does not know (or not all of it in one allocation)
    return pitched_spans(alloc, addr - alloc.addr, pitch, width, height)


def address_spans(addr: int, pitch: int, width: int, height: int):
    """(allocation, lo, hi, rows) of what a (pitched) range touches, in live allocations only."""
    alloc = REGISTRY.find(addr, wait=False)  # (under the engine lock: never the pool's)
    if alloc is None or not width or not height:
        return []  # pageable memory the registry does not know: nothing to track
    return pitched_spans(alloc, addr - alloc.addr, pitch, width, height)


def pitched_spans(alloc, base: int, pitch: int, width: int, height: int) -> list:
    """(allocation, lo, hi, rows) of `height` rows of `width` bytes at `pitch` from offset `base`:
    one strided span (lo, hi: from the first byte to the last; rows: (pitch, width)), checked
    as exactly as a record per row would be (which the cap on records would cut); rows None:
    contiguous."""
    if height == 1 or pitch == width:
        return [(alloc, base, base + width * height, None)]
    return [(alloc, base, base + (height - 1) * pitch + width, (pitch, width))]


def in_rows(lo: int, hi: int, rows: tuple, b_lo: int, b_hi: int) -> tuple | None:
    """The first bytes [lo, hi) that the rows of a strided span (from `lo` to `hi`, rows
    (pitch, width)) share with the contiguous [b_lo, b_hi), or None."""
    pitch, width = rows
    r = max(0, (b_lo - lo - width) // pitch + 1)  # the first row that ends after b_lo
    start = lo + r * pitch
    if start >= hi or start >= b_hi:
        return None
    return max(start, b_lo), min(start + width, b_hi)


def overlap(lo: int, hi: int, rows, r) -> tuple | None:
    """The first bytes a new access (lo, hi, rows) shares with a kept record `r` whose span
    overlaps its own (either may be strided), or None when only their gaps meet."""
    r_rows = r[8]
    if rows is None:
        return (max(lo, r[0]), min(hi, r[1])) if r_rows is None else in_rows(r[0], r[1], r_rows, lo, hi)
    if r_rows is None:
        return in_rows(lo, hi, rows, r[0], r[1])
    if rows[0] == r_rows[0] and rows[1] <= rows[0] and r_rows[1] <= rows[0]:
        return same_pitch(lo, hi, rows[1], r[0], r[1], r_rows[1], rows[0])
    # Both strided: walk the rows of the one with the wider pitch (fewer) inside the other's span.
    # Where both spans lie, which bytes each has repeats with its pitch, so what they share
    # repeats with the lcm of the pitches: the first shared bytes lie within one lcm of the
    # start, or nowhere (rows no wider than their pitch).
    (a_lo, a_hi, a_rows), (b_lo, b_hi, b_rows) = sorted(((lo, hi, rows), (r[0], r[1], r_rows)),
                                                        key=lambda x: -x[2][0])
    pitch, width = a_rows
    first = max(0, (b_lo - a_lo - width) // pitch + 1)
    start = a_lo + first * pitch
    end = min(a_hi, b_hi)
    if width <= pitch and b_rows[1] <= b_rows[0]:
        end = min(end, max(a_lo, b_lo) + math.lcm(pitch, b_rows[0]))
    while start < end:
        found = in_rows(b_lo, b_hi, b_rows, start, start + width)
        if found is not None:
            return found
        start += pitch
    return None


def same_pitch(a_lo: int, a_hi: int, a_w: int, b_lo: int, b_hi: int, b_w: int, pitch: int) -> tuple | None:
    """overlap() of two strided spans of one pitch (widths at most it), in O(1): row k of `a`
    meets row k + t of `b` for at most two shifts t (the rows' offsets modulo the pitch); for
    each, the first row k both have gives its first shared bytes; the lower of those is it."""
    a_n, b_n = (a_hi - a_lo - a_w) // pitch + 1, (b_hi - b_lo - b_w) // pitch + 1
    d = b_lo - a_lo
    best = None
    t = (-b_w - d) // pitch + 1  # the least t with d + t * pitch > -b_w
    while d + t * pitch < a_w:
        k = max(0, -t)  # the first row of `a` whose row k + t of `b` exists
        if k < a_n and k + t < b_n:
            start = max(a_lo + k * pitch, b_lo + (k + t) * pitch)
            if best is None or start < best[0]:
                best = (start, min(a_lo + k * pitch + a_w, b_lo + (k + t) * pitch + b_w))
        t += 1
    return best


def submit_site(depth: int) -> Site:
    """Where the user's code called the API that submits: `depth` callers up from the caller,
    or out past our frames when a wrapper of ours lies between ("?" when none is the user's)."""
    frame: Any = sys._getframe(depth)
    if is_ours(frame.f_code.co_filename):
        frame = user_frame(depth + 1)
    return (frame.f_code, frame.f_lasti) if frame is not None else "?"


def task_accesses(task) -> list:
    """(allocation, lo, hi, write, assumed, kind name, name, rows) for each memory access of a task
    (of each node, for a replayed graph's run of nodes). The name of a launch may be its
    function still: access_of() names it (Task.label's rule) only if it is reported. rows: None,
    or (pitch, width) for a strided span (see pitched_spans)."""
    reads, writes = task.reads, task.writes
    if reads is not None or writes is not None:  # a launch that declared them: hot
        return declared_accesses(reads, writes, KIND_NAMES[task.kind], task.name or task.fn)
    nodes = segment_nodes(task)
    if nodes is not None:
        # (a node captured by the program: named with where it was captured, see access_of)
        return [access for node in nodes
                for access in op_accesses(node, getattr(node, "origin", None) or node.label)]
    if task.kind == DETACH:
        return op_accesses(task.fn, task.fn.label)
    return op_accesses(task, task.label)


def declared_accesses(reads, writes, what: str, name) -> list:
    """The accesses of declared reads and writes (a kernel's or a host function's)."""
    out = []
    if reads:
        for buf in reads:  # (span_of inlined for the common case)
            out.append((buf, 0, buf.nbytes, False, False, what, name, None) if type(buf) is DeviceBuffer
                       else (*span_of(buf), False, False, what, name, None))
    if writes:
        for buf in writes:
            out.append((buf, 0, buf.nbytes, True, False, what, name, None) if type(buf) is DeviceBuffer
                       else (*span_of(buf), True, False, what, name, None))
    return out


def op_accesses(op, name: str) -> list:
    """The accesses of one operation (a task or a graph node) named `name`: declared reads and
    writes, else its buffer arguments by kind (a copy's source and destination, a fill's bytes)."""
    kind = op.kind
    what = KIND_NAMES[kind]
    if kind in (KERNEL, HOST_FUNC):  # declared reads / writes first (a host function's too)
        reads, writes = getattr(op, "reads", None), getattr(op, "writes", None)
        if reads is not None or writes is not None:
            return declared_accesses(reads, writes, what, name)
    out = []
    if kind == KERNEL:
        letters = getattr(op.fn, "access", None)
        for i, arg in enumerate(op.args):
            if isinstance(arg, _BUFFERS):
                spans = [(*span_of(arg), None)]
            elif isinstance(arg, np.ndarray):  # (a view of known memory: see array_spans)
                spans = array_spans(arg)
            else:
                continue
            mode = letters[i] if letters is not None and i < len(letters) else "rw"
            for alloc, lo, hi, rows in spans:
                if "r" in mode:
                    out.append((alloc, lo, hi, False, letters is None, what, name, rows))
                if "w" in mode:
                    out.append((alloc, lo, hi, True, letters is None, what, name, rows))
        return out
    if kind == COPY:
        dst, dpitch, src, spitch, width, height = op.args
        out += [(a, lo, hi, False, False, what, name, rows)
                for a, lo, hi, rows in address_spans(src, spitch, width, height)]
        out += [(a, lo, hi, True, False, what, name, rows)
                for a, lo, hi, rows in address_spans(dst, dpitch, width, height)]
        return out
    if kind == MEMSET:
        dst, _, n = op.args
        return [(a, lo, hi, True, False, what, name, None) for a, lo, hi, _ in address_spans(dst, n, n, 1)]
    if kind == HOST_FUNC:
        for arg in op.args:
            if isinstance(arg, _BUFFERS):
                spans = [(*span_of(arg), None)]
            elif isinstance(arg, np.ndarray):
                spans = array_spans(arg)
            else:
                continue
            for alloc, lo, hi, rows in spans:
                out += [(alloc, lo, hi, False, True, what, name, rows), (alloc, lo, hi, True, True, what, name, rows)]
    return out


@dataclass(frozen=True)
class InsideSite:
    """The site of an access a host function (or callback) made in its body: where the
    program queued the function (`launch`, what a fix orders after) and the line inside it."""

    launch: Site
    inside: Site


def access_of(rec: tuple, roles: dict, alloc) -> Access:
    """The report's Access for an access record of `alloc` (its site formatted now); `roles`:
    what the runtime's internal streams are for, by id."""
    kind, name, stream, task_id, site, beside, behalf = rec[5]
    write, assumed = rec[2], rec[7]
    captured, captured_on = "", -1
    capture: tuple = ()
    if type(name) is not str:  # a launch's function, or a captured graph node's CapturedAt
        at = getattr(name, "site", None) if hasattr(name, "capture") else None
        if at is not None:  # (see task_accesses)
            captured, captured_on, capture = site_text(at), name.stream, (name.capture, name.number)
        name = getattr(name, "__name__", None)
    name = name or kind  # (a launch's kernel without a __name__, as Task.label names it)
    for_call, for_stream = "", -1
    for what, call_stream, call_site, allocs in behalf:  # the call whose buffer it touched
        if allocs is None or any(a is alloc or a.addr == alloc.addr for a in allocs):
            for_call, for_stream = what, call_stream
            site = site if call_site is None else call_site
            break
    inside = ""
    if isinstance(site, InsideSite):
        inside, site = site_text(site.inside), site.launch
    return Access(write, kind, name, stream, task_id, site_text(site), assumed,
                  roles.get(stream, ""), beside, for_call, for_stream, inside, captured,
                  captured_on, capture)


def access_info(kind_name: str, name, actor: int, task_id: int, site, origin: tuple | None) -> tuple:
    """What a report says of a task's access: (kind name, name, stream, task id, site,
    non-blocking, on behalf); a non-blocking host function's (`origin`: the stream and task it
    was launched as) names the program's stream, not the device's hidden one it runs as; a
    collective's lane step's or a replayed graph's lane's (`origin`: (stream, task id,
    Task.on_behalf)) the calls it serves."""
    if origin is None:
        return kind_name, name, actor, task_id, site, False, ()
    if len(origin) == 3:
        return kind_name, name, actor, task_id, site, False, origin[2]
    return kind_name, name, origin[0], origin[1], site, True, ()


def region_of(alloc):
    """What an allocation's bytes belong to beyond its life: its pool chunk (so that accesses
    of a freed buffer meet those of the next owner of its bytes), else the allocation."""
    block = getattr(alloc, "_block", None) or getattr(alloc, "_handle", None)
    chunk = getattr(block, "chunk", None)
    return chunk if chunk is not None else alloc
