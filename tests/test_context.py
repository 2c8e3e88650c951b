"""ascentrt.context: primary contexts with use counts, explicit contexts, the per-thread current one."""

import threading

import pytest

import ascentrt as art
from ascentrt import context
from ascentrt.errors import AscentError, ErrorCode


@pytest.fixture
def clean():
    context.set_current_context(None)
    yield
    while context.primary_uses(0):
        context.release_primary(0, force=True)
    context.set_current_context(None)


def test_retain_primary_makes_it_current_and_counts(clean):
    ctx = context.retain_primary(0)
    assert context.current_context() is ctx and ctx.primary
    assert context.retain_primary(0) is ctx
    assert context.primary_uses(0) == 2
    assert context.release_primary(0) == 1
    assert context.release_primary(0) == 0
    assert context.current_context() is None


def test_release_without_retain_is_an_error(clean):
    with pytest.raises(AscentError) as err:
        context.release_primary(0)
    assert err.value.code == ErrorCode.RT_CONTEXT_RELEASE_ERROR


def test_primary_default_stream_is_the_devices(clean):
    ctx = context.retain_primary(0)
    assert ctx.default_stream is art.Device(0).default_stream


def test_explicit_context_owns_its_streams(clean):
    ctx = context.create_context(0)
    assert context.current_context() is ctx and not ctx.primary
    s = ctx.create_stream(3)
    assert ctx.owns(s) and ctx.owns(ctx.default_stream) and s.priority == 3
    assert context.is_default_stream(ctx.default_stream) and not context.is_default_stream(s)
    ctx.destroy()
    assert s._refuse == "destroyed" and context.current_context() is None
    with pytest.raises(AscentError):
        ctx.create_stream()


def test_primary_context_cannot_be_destroyed(clean):
    with pytest.raises(AscentError):
        context.retain_primary(0).destroy()


def test_last_release_destroys_every_context_of_the_device(clean):
    context.retain_primary(0)
    explicit = context.create_context(0)
    s = explicit.create_stream()
    buf = art.Device(0).malloc(64)
    assert context.release_primary(0) == 0
    assert explicit.destroyed and s._refuse == "destroyed" and not buf.alive


def test_current_context_is_per_thread(clean):
    ctx = context.retain_primary(0)
    seen = []
    t = threading.Thread(target=lambda: seen.append(context.current_context()))
    t.start()
    t.join(10)
    assert seen == [None] and context.current_context() is ctx


def test_set_current_context_rejects_other_objects(clean):
    with pytest.raises(AscentError):
        context.set_current_context("ctx")
