"""The pyACL-style programs under examples/acl cover the classic flows (tests/test_examples.py
runs each, and checks it prints OK)."""

import pathlib

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples" / "acl").glob("*.py"))


def test_there_is_an_example_per_classic_flow():
    names = {p.stem for p in EXAMPLES}
    assert {"quick_start", "multi_stream_events", "failure_mode", "callbacks", "timing",
            "memory_copies", "error_handling"} <= names
