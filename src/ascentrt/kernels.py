"""Built-in kernels (numpy, in place into their output) used by the examples and benchmarks.

Each carries `.cost(*args) -> Cost`: the work it does on its arguments (flops and bytes moved),
from which a simulated device takes its duration (a roofline over its compute units and memory
bandwidth). Elementwise kernels count one flop per output element (two for axpy), matmul 2·m·n·k.
Each also carries `.access`: per positional argument "w" (written), "r" (read), "rw" or "" (not
memory), so that the race sanitizer knows exactly what it touches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .backends.base import Cost


def noop() -> None:
    """Do nothing (measures launch overhead)."""


def fill(out: np.ndarray, value: float) -> None:
    """out[...] = value."""
    out[...] = value


def copy(out: np.ndarray, src: np.ndarray) -> None:
    """out[...] = src."""
    np.copyto(out, src)


def add(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out = a + b."""
    np.add(a, b, out=out)


def axpy(y: np.ndarray, alpha: float, x: np.ndarray) -> None:
    """y = alpha * x + y."""
    y += alpha * x


def scale(out: np.ndarray, x: np.ndarray, alpha: float) -> None:
    """out = alpha * x."""
    np.multiply(x, alpha, out=out)


def matmul(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """out = a @ b."""
    np.matmul(a, b, out=out)


def reduce_sum(out: np.ndarray, x: np.ndarray) -> None:
    """out[0] = sum(x)."""
    out.reshape(-1)[0] = x.sum()


def _nbytes(*arrays: object) -> int:
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


def _declare(kernel: Any, cost: Callable[..., Cost], access: tuple[str, ...]) -> None:
    """Give a built-in kernel its .cost and .access."""
    kernel.cost, kernel.access = cost, access


_FREE = Cost(seconds=0.0)
_declare(noop, lambda: _FREE, ())
_declare(fill, lambda out, value: Cost(flops=0, bytes=out.nbytes), ("w", ""))
_declare(copy, lambda out, src: Cost(bytes=_nbytes(out, src)), ("w", "r"))
_declare(add, lambda out, a, b: Cost(flops=out.size, bytes=_nbytes(out, a, b)), ("w", "r", "r"))
_declare(axpy, lambda y, alpha, x: Cost(flops=2 * y.size, bytes=_nbytes(y, y, x)), ("rw", "", "r"))
_declare(scale, lambda out, x, alpha: Cost(flops=out.size, bytes=_nbytes(out, x)), ("w", "r", ""))
_declare(matmul, lambda out, a, b: Cost(flops=2 * a.shape[-2] * a.shape[-1] * b.shape[-1] if a.ndim >= 2
                                        and b.ndim >= 2 else 2 * a.size, bytes=_nbytes(out, a, b)),
         ("w", "r", "r"))
_declare(reduce_sum, lambda out, x: Cost(flops=x.size, bytes=_nbytes(x)), ("w", "r"))

REGISTRY = {f.__name__: f for f in (noop, fill, copy, add, axpy, scale, matmul, reduce_sum)}
