"""Shared fixtures: a fresh stream per test, and a device left clean afterwards."""

import pytest

import ascentrt as art


@pytest.fixture
def dev():
    """Device 0, made current for the test's thread."""
    return art.set_device(0)


@pytest.fixture
def stream(dev):
    """A stream destroyed (with its pending work discarded) after the test."""
    s = dev.create_stream()
    yield s
    if s._refuse != "destroyed":
        s.destroy(force=True)
