"""Built-in kernels (numpy, in place into their output) used by the examples and benchmarks."""

from __future__ import annotations

import numpy as np


def noop() -> None:
    """Do nothing (measures launch overhead)."""


def fill(out: np.ndarray, value) -> None:
    """out[...] = value."""
    out[...] = value


def copy(out: np.ndarray, src: np.ndarray) -> None:
    """out[...] = src."""
    np.copyto(out, src)


def add(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out = a + b."""
    np.add(a, b, out=out)


def axpy(y: np.ndarray, alpha, x: np.ndarray) -> None:
    """y = alpha * x + y."""
    y += alpha * x


def scale(out: np.ndarray, x: np.ndarray, alpha) -> None:
    """out = alpha * x."""
    np.multiply(x, alpha, out=out)


def matmul(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out = a @ b."""
    np.matmul(a, b, out=out)


def reduce_sum(out: np.ndarray, x: np.ndarray) -> None:
    """out[0] = sum(x)."""
    out.reshape(-1)[0] = x.sum()


REGISTRY = {f.__name__: f for f in (noop, fill, copy, add, axpy, scale, matmul, reduce_sum)}
