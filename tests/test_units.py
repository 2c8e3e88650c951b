"""Sizes are shown in the unit that shows them."""

import re

import ascentrt as art
from ascentrt.profiler.summary import summary_text
from ascentrt.units import format_bytes


def test_each_size_gets_the_unit_that_shows_it():
    assert [format_bytes(n) for n in (0, 512, 1024, 1536, 3 << 20, 5 << 30)] == \
        ["0 B", "512 B", "1.0 KiB", "1.5 KiB", "3.0 MiB", "5.0 GiB"]


def test_a_small_copy_is_not_shown_as_zero_mib():
    src, dst = art.malloc_host(1024), art.malloc(1024)
    with art.profile() as prof:
        art.memcpy_async(dst, src)
        art.synchronize(timeout=10)
    copies = summary_text(prof.profile).split("Copies")[1]
    assert re.search(r"host_to_device\s+1\s+1\.0 KiB", copies), copies
    src.free()
    dst.free()
