"""The race sanitizer on what reaches a task as a bare numpy array (host memory registered with
host_register or numpy_to_ptr, a pinned buffer's or a device buffer's view): the accesses count,
on the allocation and the bytes the array covers."""

import mmap

import numpy as np
import pytest

import ascentrt as art
import ascentrt.acl as acl

TIMEOUT = 20
K = art.kernels


def test_a_kernel_s_write_to_host_register_ed_memory_races_a_copy_and_a_kernel_reading_it(dev):
    # (launch_kernel handed the kernel a bare numpy view of the registered memory, which the
    # sanitizer never counted: neither race was reported)
    acl.init()
    acl.rt.set_device(0)
    a, _ = acl.rt.create_stream()
    b, _ = acl.rt.create_stream()
    mm = mmap.mmap(-1, 8192)
    host = np.frombuffer(mm, dtype=np.uint8)
    hptr = host.ctypes.data
    dptr, ret = acl.rt.malloc(8192, 0)
    assert ret == 0
    assert acl.rt.host_register(hptr, 8192, 0)[1] == 0
    try:
        with art.sanitize("log") as found:
            acl.rt.launch_kernel(K.fill, ((hptr, np.float32, (2048,)), 1.0), a)
            acl.rt.memcpy_async(dptr, 8192, hptr + 4096, 4096, 1, b)  # H2D of the last half
            acl.rt.launch_kernel(K.copy, ((dptr, np.float32, (1024,)), (hptr, np.float32, (1024,))), b)
            acl.rt.synchronize_device()
        assert len(found) == 2, [str(r) for r in found]
        assert {(r.lo, r.hi) for r in found} == {(4096, 8192), (0, 4096)}
        assert all(r.ptr == hptr and r.size == 8192 and r.first.name == "fill" for r in found)
    finally:
        acl.rt.host_unregister(hptr)
        acl.rt.free(dptr)
        for s in (a, b):
            acl.rt.destroy_stream(s)
        del host
        mm.close()


@pytest.mark.parametrize("view", ["ptr_to_numpy", "numpy_to_ptr", "pinned", "device"])
def test_a_numpy_view_of_known_memory_as_a_kernel_argument_counts_on_its_allocation(dev, streams, view):
    s1, s2 = streams
    out = art.malloc(4096)
    if view == "numpy_to_ptr":
        mine = np.zeros(1024, np.float32)
        acl.util.numpy_to_ptr(mine)
        buf = None
    else:
        buf = art.malloc_host(4096) if view == "pinned" else art.malloc(4096)
        mine = buf._array(np.float32, (1024,))  # (a view the host takes is itself an access)
        if view == "ptr_to_numpy":
            with pytest.warns(Warning):
                mine = acl.util.ptr_to_numpy(buf.ptr, (1024,), 11)  # NPY_FLOAT
    with art.sanitize("log") as found:
        art.launch(K.fill, mine, 2.0, stream=s1)
        if buf is None:
            art.memcpy_async(out, mine.ctypes.data, 4096, stream=s2)
        else:
            art.memcpy_async(out, buf, 4096, stream=s2)
        art.synchronize(TIMEOUT)
    assert len(found) == 1, [str(r) for r in found]
    race = found[0]
    assert (race.first.name, race.second.task_kind, race.lo, race.hi) == ("fill", "copy", 0, 4096)
    assert race.ptr == mine.ctypes.data
    art.synchronize(TIMEOUT)
    out.free()
    if buf is not None:
        del mine
        buf.free()


def test_strided_views_count_only_the_bytes_of_their_rows(dev, streams):
    # (columns 0 and 1 of one device buffer, written on two streams: no byte is shared)
    s1, s2 = streams
    buf = art.malloc(4096)
    grid = buf._array(np.float32, (32, 32))
    with art.sanitize("log") as found:
        art.launch(K.fill, grid[:, 0], 1.0, stream=s1)
        art.launch(K.fill, grid[:, 1], 1.0, stream=s2)  # (no race)
        art.launch(K.fill, grid[3:5, :], 1.0, stream=s2)  # rows 3 and 4 meet column 0's rows
        art.synchronize(TIMEOUT)
    assert len(found) == 1 and (found[0].lo, found[0].hi) == (3 * 128, 3 * 128 + 4), [str(r) for r in found]
    del grid
    buf.free()


def test_a_host_function_s_numpy_argument_counts_as_its_access(dev, streams):
    s1, s2 = streams
    buf = art.malloc(4096)
    view = buf._array(np.uint8, (4096,))
    with art.sanitize("log") as found:
        art.launch(K.fill, buf.view(np.float32), 1.0, stream=s1)
        art.launch_host_func(lambda a: None, view, stream=s2)
        art.synchronize(TIMEOUT)
    assert len(found) == 1 and found[0].second.task_kind == "host_func", [str(r) for r in found]
    del view
    buf.free()

