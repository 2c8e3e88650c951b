"""Call sites taken cheaply (code and instruction offset) say the same line as the frame."""

import os
import sys

from ascentrt.callsite import site_text, user_code_site, user_site


def _both():
    """(the lazy site's text, the frame's own file:line) of the caller."""
    frame = sys._getframe(1)
    return site_text(user_code_site(3)), f"{os.path.basename(__file__)}:{frame.f_lineno}"


def test_a_lazy_site_names_the_line_the_frame_names_on_every_kind_of_line():
    seen = []
    for i in range(3):              # a loop: the same code offset over and over
        seen.append(_both())
        if i:
            seen.append(_both(
            ))                      # a call over two lines
    try:
        raise ValueError
    except ValueError:
        seen.append(_both())         # in a handler
    seen += [_both() for _ in range(2)]            # in a comprehension
    seen.append((lambda: _both())())               # in a lambda
    assert len(seen) == 9
    for lazy, eager in seen:
        assert lazy == eager


def test_a_site_taken_from_inside_the_package_or_given_as_text_reads_as_it_is():
    assert site_text("?") == "?" and site_text("prog.py:3") == "prog.py:3"
    line = sys._getframe().f_lineno + 1
    assert user_site(1) == f"{os.path.basename(__file__)}:{line}"  # (1: the caller itself)
    assert site_text(user_code_site(1)) == f"{os.path.basename(__file__)}:{line + 1}"


def test_equal_code_from_two_files_keeps_each_file_s_name():
    source = "import sys\ndef where():\n    return sys._getframe(0)\n"
    frames = []
    for name in ("/tmp/plugin_a.py", "/tmp/plugin_b.py"):
        scope: dict = {}
        exec(compile(source, name, "exec"), scope)
        frames.append(scope["where"]())
    codes = [f.f_code for f in frames]
    assert codes[0] == codes[1]  # (code compares by content, not by file)
    texts = [site_text((f.f_code, f.f_lasti)) for f in frames]
    assert texts == ["plugin_a.py:3", "plugin_b.py:3"]


def test_code_of_a_sibling_folder_whose_name_starts_like_the_package_s_is_the_user_s(tmp_path):
    # (a program's package ascentrt_app/ beside ascentrt/ was taken for the runtime's own:
    # its call sites were skipped, a leak report named the caller of its caller)
    import ascentrt
    from ascentrt.callsite import is_ours
    package = os.path.dirname(os.path.abspath(ascentrt.__file__))
    assert is_ours(ascentrt.__file__) and is_ours(os.path.join(package, "memory", "pool.py"))
    sibling = package + "_app"
    assert not is_ours(os.path.join(sibling, "model.py"))
    code = compile("def load():\n    return site()\n", os.path.join(sibling, "model.py"), "exec")
    scope = {"site": user_site}
    exec(code, scope)
    assert scope["load"]() == "model.py:2"


def test_every_test_of_whether_code_is_the_runtime_s_own_goes_through_is_ours():
    # (five modules each compared a file name with the package's folder, one way or another)
    import re
    from pathlib import Path
    import ascentrt
    root = Path(ascentrt.__file__).parent
    # (a file name's test against anything but the standard library's folder, or against the
    # package's folder by any name)
    pattern = re.compile(r"co_filename\.startswith\((?!_LIBRARY\))|startswith\(\(?_?(OURS|_PACKAGE)")
    found = [(str(path.relative_to(root)), line.strip()) for path in sorted(root.rglob("*.py"))
             for line in path.read_text(encoding="utf-8").splitlines() if pattern.search(line)]
    assert found == [("callsite.py", "return filename.startswith(OURS)")]  # (is_ours itself)
