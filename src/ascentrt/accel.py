"""Compiled builds of the hottest modules: which ones are in use, and the switch that keeps to
their Python source.

`make accel` (`accel.build()`) compiles the modules in MODULES with mypyc, from the
same source, into extension modules beside it; Python then imports the extension first. The
source stays the reference and runs wherever no build exists: ASCENTRT_PURE_PYTHON=1 ignores
the builds (the test suite runs both), and a build older than its source is ignored with a
warning, so an edit never runs stale compiled code.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec
from pathlib import Path
from typing import Any

from . import config
from .errors import AscentError

MODULES = ("ascentrt.memory.pool", "ascentrt.memory.block", "ascentrt.memory.stream_order",
           "ascentrt.memory.allocator",  # what `make accel` compiles
           "ascentrt.memory.buffer", "ascentrt.memory.registry", "ascentrt.backends.sim",
           "ascentrt.interrupts", "ascentrt.memory.chunks", "ascentrt.acl._hot")
_PACKAGE = Path(__file__).parent
_from_source: set[str] = set()       # modules that load from source in this process


def _source_of(name: str) -> Path:
    return _PACKAGE.joinpath(*name.split(".")[1:]).with_suffix(".py")


def _build_of(name: str) -> Path | None:
    source = _source_of(name)
    for suffix in EXTENSION_SUFFIXES:
        path = source.with_name(source.stem + suffix)
        if path.exists():
            return path
    return None


class _SourceFirst:
    """A finder that loads the chosen compiled-module candidates from their .py source."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        """The source spec of a module kept to source; None (the usual finders) for any other."""
        if name not in _from_source:
            return None
        return importlib.util.spec_from_file_location(name, _source_of(name))


def keep_to_source_if_asked() -> None:
    """Make the modules of MODULES load from source under ASCENTRT_PURE_PYTHON=1, or when any
    build is older than its source (call before they are imported).

    They go together: one build of them all calls across them natively, so a compiled module
    beside a module kept to source would still run the other's compiled code."""
    try:
        pure = config.get("ASCENTRT_PURE_PYTHON")
    except AscentError:
        # A bad value: the source (the safe side) until the first use of the runtime refuses
        # it with its code, as every setting's (an error here would be a traceback from the
        # `ascentrt` command, which cannot catch what importing the package raises).
        pure = True
    builds = {name: _build_of(name) for name in MODULES}
    if not any(builds.values()):
        return
    # (a build also goes stale when a module it takes types or constants from changes: the
    # memory package's, and the device contract, whose Final operation kinds it inlines)
    shared_sources = [*_PACKAGE.joinpath("memory").glob("*.py"), *_PACKAGE.joinpath("backends").glob("base.py")]
    shared = max((path.stat().st_mtime for path in shared_sources), default=0.0)
    stale = [name for name, build in builds.items()
             if build is not None and build.stat().st_mtime < max(_source_of(name).stat().st_mtime, shared)]
    if stale and not pure:
        warnings.warn(f"ascentrt: the compiled build of {', '.join(stale)} is older than its "
                      "source: the source of every compiled module runs instead; run `make accel` "
                      "to rebuild", stacklevel=3)
    if stale or pure:
        _from_source.update(MODULES)
        if _SourceFirst not in sys.meta_path:
            sys.meta_path.insert(0, _SourceFirst)


def _docstrings_file(source: Path) -> Path:
    """Where a build keeps the docstrings of its module's source."""
    return source.with_name(source.stem + ".docstrings.json")


def _docstrings(source: Path) -> dict[str, str | None]:
    """The docstrings of a module's source: its own (key '') and each top-level class's."""
    import ast
    tree = ast.parse(source.read_text())
    docs = {"": ast.get_docstring(tree)}
    docs.update((node.name, ast.get_docstring(node)) for node in tree.body if isinstance(node, ast.ClassDef))
    return docs


def restore_docstrings(namespace: dict[str, Any]) -> None:
    """Give a compiled module and its classes their docstrings back from the source beside it
    (mypyc keeps only signatures); nothing when the module runs from source. They come from
    the file the build wrote (parsing sim.py's source took ~20 ms of every `import ascentrt`),
    or, where that is missing or older than the source, from the source itself."""
    name = namespace["__name__"]
    source = _source_of(name)
    if str(namespace.get("__file__", "")).endswith(".py") or not source.exists():
        return
    saved = _docstrings_file(source)
    try:
        fresh = saved.stat().st_mtime >= source.stat().st_mtime
        docs = json.loads(saved.read_text()) if fresh else _docstrings(source)
    except (OSError, ValueError):
        docs = _docstrings(source)
    namespace["__doc__"] = docs.get("")
    for cls, doc in docs.items():
        if cls and isinstance(namespace.get(cls), type):
            namespace[cls].__doc__ = doc


def built() -> list[str]:
    """The modules of MODULES that have a compiled build beside their source."""
    return [name for name in MODULES if _build_of(name) is not None]


def compiled() -> list[str]:
    """The modules of MODULES running from a compiled build in this process."""
    return [name for name in MODULES
            if name in sys.modules and not str(getattr(sys.modules[name], "__file__", "")).endswith(".py")]


def describe() -> str:
    """What runs the hot paths, in words: the compiled build, or the source and why."""
    running = compiled()
    if running:
        return f"compiled ({', '.join(running)})"
    if not built():
        return "Python source (a compiled build comes from make accel in a source checkout)"
    try:
        pure = config.get("ASCENTRT_PURE_PYTHON")
    except AscentError:
        pure = True  # (a bad value runs the source, see keep_to_source_if_asked)
    if pure:
        return "Python source (the compiled build is there, switched off by ASCENTRT_PURE_PYTHON=1)"
    return "Python source (the compiled build is older than its source: make accel)"


# The setup mypyc's own command writes, building into a folder of its own (argv[1]) instead of
# in place.
_SETUP = """\
import sys
from setuptools import setup
from mypyc.build import mypycify
setup(name="ascentrt-accel", ext_modules=mypycify(sys.argv[2:], opt_level="3", debug_level="1"),
      script_args=["build_ext", "--build-lib", sys.argv[1]])
"""


def build() -> int:
    """Compile MODULES with mypyc (it comes with mypy, in the dev extra), then put each built
    file beside its source with one rename: a process that starts meanwhile (`make test` runs
    the source's tests during the build) finds no half-written file. Returns the exit code."""
    import shutil
    import subprocess
    src = _PACKAGE.parent
    paths = [str(_source_of(name).relative_to(src)) for name in MODULES]
    out = src / "build" / "accel-lib"
    shutil.rmtree(out, ignore_errors=True)  # (a fresh folder: every file in it is this build's)
    code = subprocess.call([sys.executable, "-c", _SETUP, str(out), *paths], cwd=src)
    if code == 0:
        for name in MODULES:  # (each module's docstrings, for restore_docstrings)
            source = _source_of(name)
            saved = out / _docstrings_file(source).relative_to(src)
            saved.parent.mkdir(parents=True, exist_ok=True)
            saved.write_text(json.dumps(_docstrings(source)))
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            os.replace(path, src / path.relative_to(out))
    return code
