"""copy.copy, copy.deepcopy and pickle of runtime objects (README: Copying and pickling), and
pickling of the runtime's errors."""

import copy
import enum
import importlib
import inspect
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ascentrt as art
from ascentrt import context, errors, hccl
from ascentrt.errors import ErrorCode
from ascentrt.handles import Handle
from ascentrt.memory.buffer import TypedView, _ByteRange

# The public namespaces whose classes must each have a copy rule.
_NAMESPACES = ("ascentrt", "ascentrt.hccl", "ascentrt.memory", "ascentrt.graph")
# Plain values: they hold no handle and no memory of their own (a TaskGraph describes work
# on buffers, as a list of them does; a RootInfo is made to be sent to the other ranks).
_VALUES = {"DeviceProperties", "ExceptionInfo", "ReusePolicy", "TaskGraph", "TaskNode",
           "FlightRecord", "RootInfo"}


def _public_classes():
    found = {}
    for name in _NAMESPACES:
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", None) or dir(mod):
            obj = getattr(mod, attr, None)
            if inspect.isclass(obj) and obj.__module__.startswith("ascentrt") \
                    and not issubclass(obj, (BaseException, Warning, enum.Enum)):
                found[obj.__name__] = obj
    found["Context"] = context.Context  # (public through ascentrt.context)
    return found


def _handles(dev, stream):
    """One live instance of every handle class, made the way a program makes it."""
    s2 = dev.create_stream()
    b = art.malloc(64)
    stream.begin_capture()
    stream.begin_task_group()
    art.launch(lambda x: None, b, stream=stream)
    group = stream.end_task_group()
    graph = stream.end_capture()
    tg = art.TaskGraph()
    tg.add_kernel(lambda x: None, b, writes=[b])
    made = {
        "Stream": s2, "Event": art.Event(dev), "Notify": art.Notify(dev), "MemPool": art.MemPool(dev),
        "Graph": graph, "GraphNode": graph.nodes[0], "TaskGroup": group,
        "Schedule": tg.schedule(num_streams=1), "Context": context.create_context(0),
        "Communicator": hccl.comm_init_all([0])[0], "BlockPool": b._owner.pool,
        "ArenaChunks": b._owner.pool.upstream, "DeviceAllocator": b._owner,
        "TraceRecorder": art.memory.TraceRecorder(b._owner.pool),
        "HostChunks": art.memory.HostChunks(dev._backend),
    }
    return made, b


def test_every_public_runtime_class_has_a_copy_rule():
    """A class a program can reach is a handle, a buffer kind, the Device, or a plain value:
    a new one must choose (a class of its own gets copy.copy's field-by-field default, which
    makes a second owner of its handle or memory)."""
    undecided = [name for name, cls in _public_classes().items()
                 if not issubclass(cls, (Handle, _ByteRange, TypedView, art.Device))
                 and name not in _VALUES and not any(m in cls.__dict__ for m in ("__copy__",))]
    assert undecided == []


def test_a_copy_of_a_handle_is_the_handle_and_pickling_it_is_refused(dev, stream):
    made, b = _handles(dev, stream)
    assert copy.copy(dev) is dev and copy.deepcopy(dev) is dev  # (a Device is its number:
    assert pickle.loads(pickle.dumps(dev)) is dev               # it pickles as that)
    try:
        for name in {n for n, c in _public_classes().items() if issubclass(c, Handle)}:
            assert name in made, f"no instance of {name} in this test: add one"
        for name, obj in made.items():
            assert copy.copy(obj) is obj, name
            assert copy.deepcopy(obj) is obj, name
            assert copy.deepcopy([obj, obj])[0] is obj, name
            refusal = f"^\\[207000 .*{type(obj).__name__} cannot be pickled"
            with pytest.raises(art.NotPicklableError, match=refusal) as exc:
                pickle.dumps(obj)
            assert isinstance(exc.value, TypeError)
    finally:
        made["Graph"].destroy()
        hccl.comm_destroy(made["Communicator"])
        made["Context"].destroy()
        made["Stream"].destroy()
        b.free()


def test_a_copy_of_a_notify_is_the_notify_a_record_releases(dev, streams):
    s1, s2 = streams
    n = art.Notify(dev)
    out = []
    s1.wait_notify(copy.deepcopy(n))
    art.launch_host_func(lambda: out.append("ran"), stream=s1)
    s2.record_notify(n)
    s1.synchronize(timeout=5)
    assert out == ["ran"]
    n.destroy()


def test_a_copy_of_a_stream_is_the_stream_one_queue_one_count(dev, stream):
    c = copy.copy(stream)
    b = art.malloc(4096, stream=stream)
    art.launch(lambda x: x.fill(1), b, stream=c)
    b.free(stream=stream)
    ids = [art.launch(lambda: None, stream=c), art.launch(lambda: None, stream=stream)]
    stream.synchronize(timeout=5)
    assert ids[1] == ids[0] + 1


@pytest.mark.parametrize("kind", ["device", "host"])
def test_a_shallow_copy_of_a_buffer_is_the_buffer_and_dies_with_it(dev, kind):
    b = art.malloc(256) if kind == "device" else art.malloc_host(4096)
    c = copy.copy(b)
    assert c is b
    part, view = b[0:64], b.view(np.float32)
    assert copy.copy(part) is part and copy.copy(view) is view
    b.free()
    with pytest.raises(art.InvalidHandleError, match="207002"):
        c.free()


@pytest.mark.parametrize("kind", ["device", "host"])
def test_a_deep_copy_of_a_buffer_is_new_memory_of_its_kind_with_its_bytes(dev, kind):
    b = art.malloc(200) if kind == "device" else art.malloc_host(200)
    b.numpy()[:] = np.arange(b.nbytes, dtype=np.uint8)
    c = copy.deepcopy(b)
    try:
        assert type(c) is type(b) and c.kind == b.kind and c.nbytes == b.nbytes and c.ptr != b.ptr
        assert np.array_equal(c.numpy(), b.numpy())
        if kind == "device":
            assert c.requested == b.requested and c.device is b.device
        c.numpy()[:] = 0
        assert b.numpy()[5] == 5  # (its own memory)
    finally:
        c.free()
        b.free()


def test_a_deep_copy_keeps_slices_and_views_of_one_buffer_on_one_new_buffer(dev):
    b = art.malloc(256)
    b.numpy()[:] = 3
    pair = [b, b[64:128], b.view(np.float32, (8, 8))]
    new = copy.deepcopy(pair)
    try:
        nb, ns, nv = new
        assert nb is not b and ns.base is nb and (ns.offset, ns.nbytes) == (64, 64)
        assert nv.buffer is nb and nv.dtype == np.float32 and nv.shape == (8, 8)
        assert np.array_equal(ns.numpy(), b[64:128].numpy())
    finally:
        new[0].free()
        b.free()


def test_a_deep_copy_of_a_slice_copies_its_buffer(dev):
    b = art.malloc(256)
    b.numpy()[:] = 9
    s = copy.deepcopy(b[32:64])
    try:
        assert s.base is not b and s.base.nbytes == 256 and s.numpy().tolist() == [9] * 32
    finally:
        s.base.free()
        b.free()


def test_a_deep_copy_of_a_freed_buffer_is_refused_with_its_code(dev):
    b = art.malloc(256)
    b.free()
    with pytest.raises(art.InvalidHandleError, match="107017"):
        copy.deepcopy(b)
    with pytest.raises(art.InvalidHandleError, match="107017"):
        copy.deepcopy(b[0:32])


@pytest.mark.parametrize("make", ["device", "host", "slice", "view"])
def test_pickling_a_buffer_is_refused_naming_it(dev, make):
    b = art.malloc(64) if make != "host" else art.malloc_host(64)
    obj = {"device": b, "host": b, "slice": b[0:32], "view": b.view(np.float32)}[make]
    with pytest.raises(art.NotPicklableError, match=f"{type(obj).__name__} cannot be pickled.*numpy"):
        pickle.dumps(obj)
    b.free()


def _error_classes():
    importlib.import_module("ascentrt.sanitizer")
    importlib.import_module("ascentrt.acl")
    seen, todo = [], [errors.AscentError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(cls.__subclasses__())
    return seen


def _example(cls):
    if cls.__name__ == "RaceError":
        return cls("a race", race=None)
    if cls is art.OutOfMemoryError:
        return cls("no room", device=0)
    if cls.__name__ == "HcclError":
        return cls("no peer", code=hccl.HcclResult.E_REMOTE)
    info = errors.ExceptionInfo(0, 2, 7, int(ErrorCode.RT_AICORE_EXCEPTION), "k", ZeroDivisionError("x"))
    return cls("went wrong", code=ErrorCode.RT_MEMORY_FREE, info=info)


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_every_error_pickles_to_an_equal_error_without_side_effects(protocol):
    classes = _error_classes()
    assert len(classes) > 10
    for cls in classes:
        err = _example(cls)
        data = pickle.dumps(err, protocol)
        art.get_last_error()
        back = pickle.loads(data)
        assert art.peek_at_last_error() == 0, cls  # (unpickling is no failure of this thread)
        assert type(back) is cls and str(back) == str(err) and back.args == err.args, cls
        assert back.code == err.code and back.message == err.message, cls
        assert str(back).count(str(int(err.code))) == str(err).count(str(int(err.code))), cls
        plain = {k: v for k, v in vars(err).items() if k != "info"}
        assert {k: v for k, v in vars(back).items() if k != "info"} == plain, cls
        if err.info is not None:
            assert str(back.info) == str(err.info)
        assert str(copy.copy(err)) == str(err)


def test_an_error_from_a_spawned_worker_reads_as_it_was_raised(tmp_path):
    script = tmp_path / "pool_error.py"  # (a spawned child imports its main module's file)
    script.write_text(textwrap.dedent("""
        import multiprocessing as mp
        def work(kind):
            import ascentrt as art
            dev = art.set_device(0); s = dev.create_stream()
            if kind == "task":
                art.launch(lambda: 1 / 0, stream=s); s.synchronize(timeout=5)
            b = art.malloc(64); b.free(); b.free()
        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(1) as p:
                for kind in ("task", "free"):
                    try:
                        p.apply(work, (kind,))
                    except Exception as e:
                        print(type(e).__name__, e)
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("TaskError [507015 RT_AICORE_EXCEPTION] task 1") and lines[0].count("[") == 1
    assert lines[1].startswith("InvalidHandleError [207002 RT_MEMORY_FREE] double free")
    assert lines[1].count("[") == 1
