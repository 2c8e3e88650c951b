"""DLPack and buffer-protocol interop: buffers, slices and typed views exported zero-copy,
freeing refused while an export lives, foreign memory (numpy, torch CPU tensors, anything with
__dlpack__) accepted as host memory, and bad input refused with a code."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ascentrt as art

E = art.ErrorCode


def _freed_ok(buf) -> bool:
    gc.collect()
    buf.free()
    return not buf.alive


@pytest.mark.parametrize("kind", ["device", "host", "slice", "typed view"])
def test_np_from_dlpack_is_zero_copy_and_blocks_the_free_while_it_lives(kind):
    base = art.malloc_host(4096) if kind == "host" else art.malloc(4096)
    art.memset(base, 0)
    obj = {"device": base, "host": base, "slice": base[64:128],
           "typed view": base.view(np.float32, (32, 32))}[kind]
    assert obj.__dlpack_device__() == (1, 0)            # kDLCPU on cpu and on sim
    arr = np.from_dlpack(obj)
    start = 64 if kind == "slice" else 0
    assert arr.ctypes.data == base.ptr + start           # zero-copy: the buffer's own bytes
    if kind == "typed view":
        assert arr.dtype == np.float32 and arr.shape == (32, 32)
    arr[...] = 7
    assert base.numpy(arr.dtype)[start // arr.itemsize] == 7
    assert kind != "slice" or base.numpy()[63] == base.numpy()[128] == 0  # only its bytes
    with pytest.raises(art.InvalidArgumentError) as exc:
        base.free()
    assert exc.value.code == E.RT_MEMORY_FREE and "DLPack" in str(exc.value) and base.alive
    del arr
    assert _freed_ok(base)


def test_exporting_a_freed_buffer_is_refused():
    buf = art.malloc(64)
    view = buf.view(np.int32)
    buf.free()
    for obj in (buf, buf[0:8], view):
        with pytest.raises(art.InvalidHandleError) as exc:
            np.from_dlpack(obj)
        assert exc.value.code == E.RT_INVALID_HANDLE


class _Exporter:
    """A foreign DLPack exporter (its own memory, as another library's tensor)."""

    def __init__(self, array, same_capsule=False):
        self.array, self.capsule = array, array.__dlpack__() if same_capsule else None

    def __dlpack__(self, **kwargs):
        return self.capsule if self.capsule is not None else self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_foreign_memory_is_accepted_wherever_host_memory_is():
    src = np.arange(16, dtype=np.float32)
    dev = art.malloc(64)
    art.memcpy(dev, _Exporter(src))                       # a DLPack exporter as a copy source
    out = np.zeros(16, np.float32)
    art.memcpy(_Exporter(out), dev)                       # ... and destination
    assert (out == src).all()
    arr = art.from_dlpack(_Exporter(src))                 # registered: its address is valid
    assert arr.ctypes.data == src.ctypes.data
    art.memcpy(dev, arr.ctypes.data, 64)
    art.memcpy(out, dev)
    assert (out == src).all()
    for obj in (bytearray(64), memoryview(bytearray(64))):  # buffer-protocol objects
        art.memcpy(obj, dev)
    dev.free()


def test_bad_foreign_memory_gets_a_clear_error_with_a_code():
    dev = art.malloc(256)
    strided = np.arange(64, dtype=np.float32)[::2]
    with pytest.raises(art.InvalidArgumentError) as exc:
        art.from_dlpack(_Exporter(strided))
    assert exc.value.code == E.INVALID_PARAM and "contiguous" in str(exc.value)
    ro = np.zeros(16, np.float32)
    ro.flags.writeable = False
    with pytest.raises(art.InvalidArgumentError) as exc:
        art.memcpy(_Exporter(ro), dev, 64)                 # read-only memory as a destination
    assert "read-only" in str(exc.value)
    twice = _Exporter(np.zeros(4, np.float32), same_capsule=True)
    art.from_dlpack(twice)
    with pytest.raises(art.InvalidArgumentError) as exc:    # a capsule consumed twice
        art.from_dlpack(twice)
    assert exc.value.code == E.INVALID_PARAM
    with pytest.raises(art.InvalidArgumentError):
        art.from_dlpack(object())
    dev.free()


def test_streams_offer_the_stream_protocol():
    s = art.Stream()
    assert s.__ascentrt_stream__() == (0, s.device.id, s.id)
    s.destroy()




@pytest.fixture
def torch_mod():
    return pytest.importorskip("torch")


def test_torch_from_dlpack_shares_memory_and_tensors_work_as_host_memory(torch_mod):
    torch = torch_mod
    buf = art.malloc(4096)
    art.memset(buf, 0)
    t = torch.from_dlpack(buf.view(np.float32, (1024,)))
    t += 1.5
    assert t.data_ptr() == buf.ptr and float(buf.numpy(np.float32)[0]) == 1.5
    with pytest.raises(art.InvalidArgumentError):
        buf.free()
    del t
    assert _freed_ok(buf)
    dev = art.malloc(64)
    src = torch.arange(16, dtype=torch.float32)
    art.memcpy(dev, src)                                   # a CPU tensor as a copy source
    dst = torch.zeros(16, dtype=torch.float32)
    art.memcpy(dst, dev)
    assert torch.equal(dst, src)
    with pytest.raises(art.InvalidArgumentError) as exc:    # a dtype numpy cannot hold
        art.memcpy(dev, torch.zeros(16, dtype=torch.bfloat16))
    assert exc.value.code == E.INVALID_PARAM
    with pytest.raises(art.InvalidArgumentError):           # non-contiguous strides
        art.memcpy(dev, torch.arange(32, dtype=torch.float32)[::2])
    dev.free()


def test_an_export_keeps_its_allocation_alive_after_the_buffer_object_is_dropped():
    arr = np.from_dlpack(art.malloc(64))        # nothing else holds the buffer object
    gc.collect()
    others = [art.malloc(64) for _ in range(8)]  # new buffers: none is the exported one
    for b in others:
        b.free()                                # (and none is refused for its exports)
    arr[:] = 5
    live = [a for a in art.Device(0)._memory.live_buffers() if a.addr == arr.ctypes.data]
    assert len(live) == 1 and (live[0].numpy() == 5).all()
    del arr
    gc.collect()
    live[0].free()


def test_export_arguments_and_refusals_are_clear_and_leave_no_count():
    buf = art.malloc(256)
    for bad in (0, 1):                                    # host memory has no stream to order on
        with pytest.raises(art.InvalidArgumentError):
            buf.__dlpack__(stream=bad)
    with pytest.raises(art.InvalidArgumentError):         # a device it is not on
        buf.__dlpack__(dl_device=(2, 0))
    np.from_dlpack(_Exporter(np.from_dlpack(buf)))         # positional/keyword use by consumers
    buf.__dlpack__(None)                                   # (the capsule, never consumed, dies)
    gc.collect()
    assert _freed_ok(buf)                                  # nothing refused is counted

    class Broken:
        def __dlpack__(self, **kwargs):
            raise KeyError("broken exporter")

        def __dlpack_device__(self):
            return (1, 0)

    dev = art.malloc(64)
    for call in (lambda: art.from_dlpack(Broken()), lambda: art.memcpy(dev, Broken(), 16)):
        with pytest.raises(art.InvalidArgumentError) as exc:
            call()
        assert exc.value.code == E.INVALID_PARAM
    dev.free()


def test_typed_views_copy_as_their_bytes_and_free_in_stream_order():
    s = art.Stream()
    dev, host = art.malloc(4096), art.malloc_host(4096)
    art.memset(dev, 3)
    art.memcpy_async(host, dev.view(np.float32), stream=s)   # not a DLPack export: ours
    dev.free(stream=s)                                       # stream-ordered free goes through
    s.synchronize()
    assert (host.numpy() == 3).all()
    host.free()
    s.destroy()


def test_a_device_reset_says_when_it_frees_exported_memory():
    dev = art.Device(0)
    buf = art.malloc(256)
    arr = np.from_dlpack(buf)
    with pytest.warns(RuntimeWarning, match="live DLPack exports"):
        dev.reset()
    del arr
