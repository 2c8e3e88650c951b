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
    buf.free()  # (a buffer left live counts in the next profile's figures)


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
    gc.collect()  # (what earlier tests left for the collector must not count in `before`)
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
    del view
    buf.free()


def test_other_types_are_rejected():
    with pytest.raises(AscentError):
        register_host("text")
    with pytest.raises(AscentError):
        register_host(np.zeros((4, 4))[:, 1])


@pytest.mark.parametrize("first_writable", [True, False])
def test_registering_an_array_after_a_view_of_its_start_makes_all_of_it_reachable(dev, first_writable):
    """A small view registered first (writable or not) once hid the rest of the array: its
    start was known, so registering the array registered nothing, and copies past the view's
    16 bytes (or into it, read-only) were refused. Both registrations stay: work queued or
    captured with the view's keeps running."""
    arr = np.zeros(4096, np.uint8)
    head = arr[:16]
    register_host(head, writable=first_writable)
    count = registered_count()
    p = register_host(arr)
    assert registered_count() == count + 1
    buf = art.malloc(4096)
    art.memset(buf, 7)
    art.memcpy(p, buf, 4096)
    assert (arr == 7).all()
    unregister_host(p)  # (the latest at that address: the array's)
    with pytest.raises(AscentError):
        art.memcpy(p, buf, 4096)  # past the view, all that is left registered there
    unregister_host(p)
    buf.free()


def _registered_view_and_device_bytes(value: int):
    """A 100-byte array, a view of its first 50 bytes and their registered address (the caller
    keeps the view: a registration nothing else refers to is pruned), and 64 device bytes of
    `value`."""
    arr = np.zeros(100, np.uint8)
    view = arr[:50]
    src = art.malloc(64)
    art.memset(src, value)
    return arr, view, register_host(view), src


def test_a_read_only_registration_of_a_whole_array_leaves_its_writable_view_writable(dev):
    arr, view, p, src = _registered_view_and_device_bytes(3)
    register_host(arr, writable=False)  # (the same start: both stay, each as it was asked)
    art.memcpy(p, src, 10)  # a write takes the writable one that holds the range
    assert (arr[:10] == 3).all() and not arr[10:].any()
    with pytest.raises(AscentError):
        art.memcpy(p, src, 64)  # past the view: only the read-only array holds it
    unregister_host(p)
    unregister_host(p)
    src.free()


def test_a_graph_captured_with_a_view_replays_after_its_array_is_registered(dev):
    arr, view, p, dev_buf = _registered_view_and_device_bytes(9)
    s = dev.create_stream()
    try:
        s.begin_capture(2)  # (RELAXED: a copy to pageable memory is synchronous)
        art.memcpy_async(p, dev_buf, 50, stream=s)
        graph = s.end_capture()
        register_host(arr)  # (once replaced the view's registration: the replay found it gone)
        graph.launch(s)
        s.synchronize(timeout=10)
        assert (arr[:50] == 9).all()
    finally:
        s.destroy(force=True)
    unregister_host(p)
    unregister_host(p)
    dev_buf.free()
