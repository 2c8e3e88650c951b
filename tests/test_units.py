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


def test_synchronous_copies_count_in_the_copies_table_beside_the_asynchronous_ones():
    n = 1 << 16
    src, dst, back = art.malloc_host(n), art.malloc(n), art.malloc_host(n)
    with art.profile() as prof:
        for _ in range(2):
            art.memcpy(dst, src)                    # (no task: the call is the copy)
            art.memcpy(back.addr, dst.addr, n)      # by pointers
        art.memcpy_async(dst, src)
        art.synchronize(timeout=10)
    m = prof.profile.metrics()["copy_bandwidth"]
    assert (m["host_to_device"]["count"], m["host_to_device"].get("synchronous")) == (3, 2)
    assert m["host_to_device"]["bytes"] == 3 * n and m["host_to_device"]["busy_ns"] > 0
    assert (m["device_to_host"]["count"], m["device_to_host"]["bytes"]) == (2, 2 * n)
    copies = summary_text(prof.profile).split("Copies")[1]
    assert re.search(r"device_to_host\s+2\s+128\.0 KiB\s+\S+\s+2", copies), copies
    for b in (src, dst, back):
        b.free()


PYACL_COPIES = """
import acl
acl.init(); acl.rt.set_device(0)
s, _ = acl.rt.create_stream()
n = 1 << 20
dev, _ = acl.rt.malloc(n, 0); host, _ = acl.rt.malloc_host(n)
for _ in range(3):
    assert acl.rt.memcpy(dev, n, host, n, 1) == 0
    assert acl.rt.memcpy(host, n, dev, n, 2) == 0
assert acl.rt.memcpy_async(dev, n, host, n, 1, s) == 0
assert acl.rt.memcpy_async(host, n, dev, n, 2, s) == 0
assert acl.rt.synchronize_stream(s) == 0
acl.rt.free(dev); acl.rt.free_host(host); acl.rt.destroy_stream(s); acl.rt.reset_device(0); acl.finalize()
"""


def test_prof_counts_pyacl_synchronous_copies_in_its_copies_table(tmp_path):
    import os
    import subprocess
    import sys
    (tmp_path / "copies.py").write_text(PYACL_COPIES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}
    ran = subprocess.run([sys.executable, "-m", "ascentrt", "prof", "-o", str(tmp_path / "o"), "--",
                          "python", "copies.py"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    copies = ran.stdout.split("Copies")[1].split("\n\n")[0]
    for direction in ("host_to_device", "device_to_host"):
        assert re.search(direction + r"\s+4\s+4\.0 MiB\s+\S+\s+3", copies), copies
