"""ascentrt.memory.external: caller-owned bytes / arrays registered so their pointers pass checks."""

import gc

import numpy as np
import pytest

import ascentrt as art
from ascentrt.errors import AscentError
from ascentrt.memory import REGISTRY
from ascentrt.memory.external import register_host, registered_count, unregister_host


def test_copies_write_into_registered_bytes(dev):
    buf = dev.malloc(32)
    art.memset(buf, 0x5A)
    data = bytes(32)
    art.memcpy(register_host(data, writable=True), buf.ptr, 32)   # the caller vouches it owns it
    assert data == b"\x5a" * 32
    other = bytes(32)
    with pytest.raises(art.InvalidArgumentError):                 # by default bytes are read-only
        art.memcpy(register_host(other), buf.ptr, 32)
    assert other == bytes(32)


def test_registration_is_checked_by_range(dev):
    arr = np.zeros(8, dtype=np.uint8)
    ptr = register_host(arr)
    assert REGISTRY.find(ptr).kind == "pageable"
    with pytest.raises(AscentError):
        REGISTRY.resolve(ptr, 9)
    unregister_host(ptr)
    assert REGISTRY.find(ptr) is None
    with pytest.raises(AscentError):
        unregister_host(ptr)


def test_unreferenced_objects_are_dropped():
    before = registered_count()
    register_host(bytes(100))    # nobody else keeps it
    gc.collect()
    assert registered_count() == before


def test_registered_bytearray_cannot_move():
    ba = bytearray(16)
    ptr = register_host(ba)
    with pytest.raises(BufferError):
        ba.extend(b"more")
    unregister_host(ptr)
    ba.extend(b"more")


def test_views_of_live_allocations_are_not_registered_twice(dev):
    buf = dev.malloc(64)
    view = buf.numpy()
    assert register_host(view) == buf.ptr
    assert REGISTRY.find(buf.ptr) is buf


def test_other_types_are_rejected():
    with pytest.raises(AscentError):
        register_host("text")
    with pytest.raises(AscentError):
        register_host(np.zeros((4, 4))[:, 1])


@pytest.mark.parametrize("first_writable", [True, False])
def test_registering_an_array_after_a_view_of_its_start_makes_all_of_it_reachable(dev, first_writable):
    """A small view registered first (writable or not) once hid the rest of the array: its
    start was known, so registering the array registered nothing, and copies past the view's
    16 bytes (or into it, read-only) were refused."""
    arr = np.zeros(4096, np.uint8)
    head = arr[:16]
    register_host(head, writable=first_writable)
    count = registered_count()
    p = register_host(arr)
    assert registered_count() == count  # one registration per start: the array's replaced it
    buf = art.malloc(4096)
    art.memset(buf, 7)
    art.memcpy(p, buf, 4096)
    assert (arr == 7).all()
    unregister_host(p)
    with pytest.raises(AscentError):
        art.memcpy(p, buf, 4096)  # nothing left registered there
    buf.free()
