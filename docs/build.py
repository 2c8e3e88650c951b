"""`make docs`: the API reference (pdoc) under docs/_build (or the folder given), failing on public modules, classes
and functions without a docstring, on `ascentrt.…` references that name nothing and on type
hints pdoc cannot evaluate."""

from __future__ import annotations

import gc
import importlib
import pkgutil
import re
import sys
import warnings
from pathlib import Path

import pdoc
import pdoc.doc

OUT = Path(__file__).resolve().parent / "_build"
_REF = re.compile(r"`(ascentrt(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")


def _walk(obj: pdoc.doc.Doc):
    yield obj
    if isinstance(obj, (pdoc.doc.Module, pdoc.doc.Class)):
        for member in obj.own_members:
            if not member.name.startswith("_") or member.name == "__init__":
                yield from _walk(member)
    if isinstance(obj, pdoc.doc.Module):
        for sub in obj.submodules:
            yield from _walk(sub)


def _public_modules() -> list[str]:
    """ascentrt and its submodules whose names have no leading underscore."""
    import ascentrt
    names = ["ascentrt"]
    for info in pkgutil.walk_packages(ascentrt.__path__, "ascentrt."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def check(root: pdoc.doc.Module) -> list[str]:
    """Problems: public modules, classes and functions without a docstring; broken references."""
    problems = []
    for doc in _walk(root):
        if isinstance(doc, (pdoc.doc.Module, pdoc.doc.Class, pdoc.doc.Function)):
            if doc.name == "__init__":
                continue
            if isinstance(doc, pdoc.doc.Function) and doc.name.startswith("_"):
                continue
            if not (doc.docstring or "").strip():
                problems.append(f"{doc.fullname}: no docstring")
            for ref in _REF.findall(doc.docstring or ""):
                if not _resolves(ref):
                    problems.append(f"{doc.fullname}: `{ref}` names nothing")
    return problems


def main(out: Path = OUT) -> int:
    """Write the site into `out`, then report what check() finds (exit 1 when anything)."""
    pdoc.render.configure(docformat="markdown", show_source=False)
    modules = _public_modules()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="The module specification")  # (a package's
        # spec already brings the submodules it lists)
        pdoc.pdoc(*modules, output_directory=out)  # a page for every public module
    # A type hint pdoc cannot evaluate is one a reader cannot follow either.
    problems = [str(w.message) for w in caught if "Error parsing type annotation" in str(w.message)]
    for name in modules:
        problems += check(pdoc.doc.Module(importlib.import_module(name)))
    problems = list(dict.fromkeys(problems))
    for p in problems:
        print(f"docs: {p}", file=sys.stderr)
    print(f"docs: wrote {out} ({len(problems)} problem(s))")
    return 1 if problems else 0


if __name__ == "__main__":
    # (one short process: the collector's passes over pdoc's hundreds of thousands of live
    # objects took a quarter of its CPU, 8.7 -> 6.5 s, to free 8 MB of 230 MB)
    gc.disable()
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))  # (the tests write elsewhere)
