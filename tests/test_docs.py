"""The README stays true to the code: every setting is documented, every public name exists."""

import pathlib
import re

import ascentrt as art
from ascentrt import config

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_documents_every_setting():
    documented = set(re.findall(r"^\| `((?:ASCENTRT|ASCEND)_[A-Z0-9_]+)` \|", README, re.M))
    assert documented == {env for env, _, _ in config.table()}


def test_every_name_in_all_exists_and_has_a_docstring():
    for name in art.__all__:
        obj = getattr(art, name)
        if callable(obj) and not name.startswith("_"):
            assert (obj.__doc__ or "").strip(), f"ascentrt.{name} has no docstring"
