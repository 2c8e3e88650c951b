"""The public API carries complete type hints (mypy itself runs in `make lint`)."""

import inspect
import types

import pytest

import ascentrt
import ascentrt.acl
import ascentrt.acl.rt
import ascentrt.acl.util
import ascentrt.hccl
import ascentrt.kernels
import ascentrt.profiler
import ascentrt.sanitizer

# The modules whose names users call: each one's __all__ (kernels has none: its public names).
PUBLIC_MODULES = [ascentrt, ascentrt.hccl, ascentrt.profiler, ascentrt.sanitizer, ascentrt.kernels,
                  ascentrt.acl.rt, ascentrt.acl.util]


def _public_names(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return [n for n in names if not n.startswith("__")]


def _missing(func, where):
    """The parameters and return of `func` that carry no annotation."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin or C function: nothing to check
        return []
    gaps = []
    for i, param in enumerate(sig.parameters.values()):
        if i == 0 and param.name in ("self", "cls"):
            continue
        if param.annotation is inspect.Parameter.empty:
            gaps.append(f"{where}: parameter {param.name!r}")
    if sig.return_annotation is inspect.Signature.empty and func.__name__ != "__init__":
        gaps.append(f"{where}: return")
    return gaps


def _class_gaps(cls, where):
    members = {n: v for n, v in vars(cls).items() if n in ("__init__", "__call__") or not n.startswith("_")}
    gaps = []
    for name, value in members.items():
        if isinstance(value, property):
            if value.fget is not None:
                gaps += _missing(value.fget, f"{where}.{name}")
        elif isinstance(value, (staticmethod, classmethod)):
            gaps += _missing(value.__func__, f"{where}.{name}")
        elif isinstance(value, types.FunctionType):
            gaps += _missing(value, f"{where}.{name}")
    return gaps


def public_api_gaps():
    """Every unannotated parameter or return in the public API, as 'where: what'."""
    gaps, seen = [], set()
    for module in PUBLIC_MODULES:
        for name in _public_names(module):
            obj = getattr(module, name)
            if id(obj) in seen or isinstance(obj, types.ModuleType):
                continue
            seen.add(id(obj))
            where = f"{module.__name__}.{name}"
            if isinstance(obj, type):
                if obj.__module__.startswith("ascentrt"):
                    gaps += _class_gaps(obj, where)
            elif isinstance(obj, types.FunctionType):
                gaps += _missing(obj, where)
    return gaps


def test_public_api_is_fully_annotated():
    gaps = public_api_gaps()
    assert not gaps, f"{len(gaps)} gaps in the public API's type hints:\n" + "\n".join(gaps)


def test_the_check_finds_a_gap():
    # The check itself: an unannotated function is reported, an annotated one is not.
    def bare(x, y=1):
        return x

    def typed(x: int, y: int = 1) -> int:
        return x
    assert _missing(bare, "bare") == ["bare: parameter 'x'", "bare: parameter 'y'", "bare: return"]
    assert _missing(typed, "typed") == []


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_public_names_exist(module):
    for name in _public_names(module):
        assert hasattr(module, name), f"{module.__name__}.{name} is in __all__ but missing"
