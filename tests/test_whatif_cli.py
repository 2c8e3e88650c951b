"""`ascentrt whatif` and the preset files it varies: what a user's sweep, preset file or
interrupted run must get (each case from a user's report)."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ascentrt.backends import presets
from ascentrt.backends.presets import PresetError

SHIPPED = os.path.join(os.path.dirname(presets.__file__), "ascend910b.toml")


def _preset_file(tmp_path, replace: dict | None = None, extra: str = "") -> str:
    """The shipped ascend910b preset with some lines replaced (None: left out) and text added."""
    lines = []
    for line in open(SHIPPED).read().splitlines():
        key = line.split("=", 1)[0].strip()
        if replace and key in replace:
            if replace[key] is None:
                continue
            line = f'{key} = {{ value = {replace[key]}, kind = "estimated", source = "test" }}'
        lines.append(line)
    path = tmp_path / "mine.toml"
    path.write_text("\n".join(lines) + "\n" + extra)
    return str(path)


def _cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "ascentrt", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


# ---- preset files -----------------------------------------------------------------------------

def test_a_field_the_file_leaves_out_is_labelled_a_default_not_documented():
    p = presets.load("ascend910b")  # (it leaves out small_copy_bytes and others)
    kind, source = p.sources["small_copy_bytes"]
    assert kind == "default" and source.startswith("not in the file: default of 0")
    assert p.sources["compute_units"][0] == "documented"


def test_a_misspelt_scalar_key_is_refused_naming_the_nearest_field(tmp_path):
    # (copy_engine_h2d = 4 was silently ignored: the run used 1 engine)
    path = _preset_file(tmp_path, extra="copy_engine_h2d = 4\n")
    with pytest.raises(PresetError, match="unknown key 'copy_engine_h2d' .*did you mean "
                                          "'copy_engines_h2d'"):
        presets.load(path)


def test_a_misspelt_required_field_is_named_as_unknown_not_missing(tmp_path):
    path = _preset_file(tmp_path, replace={"compute_units": None},
                        extra='compute_unit = { value = 24, kind = "documented", source = "x" }\n')
    with pytest.raises(PresetError, match="unknown key 'compute_unit' .*'compute_units'"):
        presets.load(path)


def test_a_misspelt_key_inside_a_field_is_refused(tmp_path):
    path = _preset_file(tmp_path, extra='small_copy_bytes = { value = 0, knd = "estimated", '
                                        'kind = "estimated", source = "x" }\n')
    with pytest.raises(PresetError, match="unknown key 'knd' .*'kind'"):
        presets.load(path)


def test_a_quoted_number_in_a_file_is_refused(tmp_path):
    # (value = "24" was read as 24; value = "fast" was refused: text is no number either way)
    path = _preset_file(tmp_path, replace={"compute_units": '"24"'})
    with pytest.raises(PresetError, match="'compute_units' must be a number, got the string '24'"):
        presets.load(path)


@pytest.mark.parametrize("value", ["0", "-5e9", "1e-3"])
def test_a_bandwidth_below_its_bound_is_told_the_real_bound(tmp_path, value):
    # (0 was told "at least 1", -5e9 "at least 1000": the bound is 1000 B/s in both)
    path = _preset_file(tmp_path, replace={"host_link_bandwidth": value})
    with pytest.raises(PresetError) as err:
        presets.load(path)
    text = str(err.value)
    assert "must be at least 1000, got" in text and "at least 1," not in text
    assert text.count("at least") == 1 and "(or 0)" not in text


def test_a_default_kind_cannot_be_claimed_by_a_file(tmp_path):
    path = _preset_file(tmp_path, extra='small_copy_bytes = { value = 0, kind = "default", '
                                        'source = "x" }\n')
    with pytest.raises(PresetError, match="needs kind = one of documented, measured, estimated"):
        presets.load(path)


def test_info_preset_json_gives_every_field_with_its_value_unit_kind_and_source():
    r = _cli("info", "--preset", "ascend910b", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["name"] == "ascend910b" and doc["file"].endswith("ascend910b.toml")
    assert set(doc["fields"]) == set(presets.FIELDS)
    assert doc["fields"]["compute_units"] == {
        "value": 24, "unit": None, "kind": "documented",
        "source": "CANN ini Ascend910B2: ai_core_cnt = cube_core_cnt = 24"}
    assert doc["fields"]["host_link_bandwidth"]["unit"] == "B/s"
    assert doc["fields"]["small_copy_bytes"]["kind"] == "default"


# ---- ascentrt whatif: the preset and the variants ---------------------------------------------

KERNEL = textwrap.dedent("""
    import ascentrt as art
    s = art.Stream()
    art.launch(lambda: None, stream=s, cost=1e-3)
    s.synchronize()
    print("compute_units", art.Device(0).properties.compute_units)
""")


def _rows(folder) -> list[dict]:
    with open(os.path.join(folder, "whatif.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_whatif_takes_its_preset_from_the_setting_and_names_it(tmp_path):
    # (it ran ascend910b whatever ASCENTRT_SIM_PRESET said, and no output named the preset)
    prog = tmp_path / "prog.py"
    prog.write_text(KERNEL)
    out = tmp_path / "wi"
    r = _cli("whatif", "--vary", "dispatch_ns=500", "-o", str(out), "--", "python", str(prog),
             env={"ASCENTRT_SIM_PRESET": "h200"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "preset h200"
    assert _rows(out)[0]["preset"] == "h200" and _rows(out)[0]["virtual_ms"]
    assert "preset h200" in (out / "whatif.html").read_text()
    summary = (out / "variant-0" / "summary.txt").read_text().splitlines()
    assert "preset h200" in summary[0] and "dispatch_ns=500" in summary[0]
    assert any("preset h200" in line for line in summary[1:])  # (the run's own profile says so)


def test_whatif_validates_each_variant_whole_so_coupled_fields_can_vary(tmp_path):
    # (each value was checked alone against the base preset: 48 > its 24 compute units, and
    # small_copy_bytes without small_copy_bandwidth, were refused)
    prog = tmp_path / "prog.py"
    prog.write_text(KERNEL)
    out = tmp_path / "wi"
    r = _cli("whatif", "--vary", "compute_units=48", "--vary", "default_block_dim=48",
             "--vary", "small_copy_bytes=4096", "--vary", "small_copy_bandwidth=5e9",
             "-o", str(out), "--", "python", str(prog))
    assert r.returncode == 0, r.stderr
    row = _rows(out)[0]
    assert (row["compute_units"], row["default_block_dim"], row["small_copy_bytes"]) == \
        ("48", "48", "4096") and row["virtual_ms"]


def test_whatif_refuses_a_variant_that_breaks_a_rule_before_anything_runs(tmp_path):
    out = tmp_path / "wi"
    r = _cli("whatif", "--vary", "compute_units=24,48", "--vary", "default_block_dim=48",
             "-o", str(out), "--", "python", "-c", "pass")
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert "variant 0 (compute_units=24, default_block_dim=48)" in r.stderr
    assert "must be at most compute_units (24)" in r.stderr and "100000 INVALID_PARAM" in r.stderr
    assert not out.exists()


def test_whatif_prints_varied_values_without_a_spurious_point_zero(tmp_path):
    # (25e9 showed as 25000000000.0 in the table, the CSV and the HTML)
    prog = tmp_path / "prog.py"
    prog.write_text(KERNEL)
    out = tmp_path / "wi"
    r = _cli("whatif", "--vary", "host_link_bandwidth=25e9,2.5e3", "-o", str(out), "--",
             "python", str(prog))
    assert r.returncode == 0, r.stderr
    assert "25000000000" in r.stdout and "25000000000.0" not in r.stdout + r.stderr
    assert [x["host_link_bandwidth"] for x in _rows(out)] == ["25000000000", "2500"]
    assert "host_link_bandwidth=25000000000<" in (out / "whatif.html").read_text()


# ---- ascentrt whatif: running the variants ----------------------------------------------------

def test_a_failure_reason_is_the_exception_not_a_warning_printed_at_exit():
    from ascentrt.whatif import failure_reason
    stderr = ("Traceback (most recent call last):\n  File \"p.py\", line 3, in <module>\n"
              "    raise RuntimeError('boom')\nRuntimeError: boom\n"
              "sys:1: LeakWarning: ascentrt: 1 buffer(s), 1.0 KiB, never freed\n"
              "/x/y.py:9: ResourceWarning: unclosed file\n  open('f')\n")
    assert failure_reason(stderr, 1) == "RuntimeError: boom"


def test_a_failure_reason_skips_warnings_and_names_a_signal():
    from ascentrt.whatif import failure_reason
    leak = "sys:1: LeakWarning: ascentrt: 1 buffer(s), 1.0 KiB, never freed\n"
    assert failure_reason("config missing\n" + leak, 2) == "config missing"
    assert "LeakWarning" not in failure_reason(leak, 3) and "3" in failure_reason(leak, 3)
    assert failure_reason("", -11) == "killed by SIGSEGV"
    ignored = ("Exception ignored in: <function Pool.__del__ at 0x7f>\nTraceback (most recent "
               "call last):\n  File \"p.py\", line 9, in __del__\nValueError: at exit\n")
    assert failure_reason("bad input file\n" + ignored, 1) == "bad input file"


def test_a_failed_variant_names_its_signal_and_keeps_its_output(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        import os, sys
        import ascentrt as art
        from ascentrt import sim
        kept = art.malloc(1024)   # never freed: a LeakWarning at exit, after the program's end
        print("to stdout"); print("to stderr", file=sys.stderr)
        if sim.variant()["mode"] == "exit":
            sys.exit(3)
        os.kill(os.getpid(), 11)
    """))
    out = tmp_path / "wi"
    r = _cli("whatif", "--vary", "program.mode=exit,segv", "-o", str(out), "--", "python", str(prog))
    assert r.returncode == 1
    exit_row, segv_row = _rows(out)
    assert exit_row["error"] == "to stderr" and "LeakWarning" not in r.stdout
    assert segv_row["error"].startswith("killed by SIGSEGV") and segv_row["exit"] == "139"
    assert (out / "variant-1" / "stdout.txt").read_text() == "to stdout\n"
    assert "to stderr" in (out / "variant-1" / "stderr.txt").read_text()
    assert any("killed by SIGSEGV" in line and "variant-1" in line and "stderr.txt" in line
               for line in r.stdout.splitlines())


# Variant 0 finishes; the others start a child (same process group) and block: both pids are
# written to pids.txt beside the script so a test can see they were stopped.
BLOCKS = textwrap.dedent("""
    import os, subprocess, sys, time
    import ascentrt as art
    from ascentrt import sim
    s = art.Stream()
    art.launch(lambda: None, stream=s, cost=1e-3)
    s.synchronize()
    if int(sim.variant().get("block", 0)):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open(os.path.join(os.path.dirname(__file__), "pids.txt"), "w") as f:
            f.write(f"{os.getpid()} {child.pid}")
        time.sleep(120)
""")


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie no init reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_whatif_kills_a_variant_past_its_timeout_with_its_process_group(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(BLOCKS)
    out = tmp_path / "wi"
    r = _cli("whatif", "--timeout", "4", "--vary", "program.block=0,1", "-o", str(out), "--",
             "python", str(prog), timeout=120)
    assert r.returncode == 1, r.stderr
    rows = _rows(out)
    assert rows[0]["error"] == "" and rows[1]["error"].startswith("timed out after 4 s")
    assert any("timed out" in line for line in r.stdout.splitlines()[1:4])
    assert all(not _alive(int(pid)) for pid in (tmp_path / "pids.txt").read_text().split())
    # one progress line per finished variant, on stderr
    progress = [line for line in r.stderr.splitlines() if line.startswith("ascentrt whatif: variant")]
    # (numbered as the folders and the CSV rows: variant 0 is variant-0/, then the count)
    assert len(progress) == 2 and progress[0].startswith("ascentrt whatif: variant 0 (program.block=0; 1 of 2)")
    assert "timed out" in progress[1] and (out / "variant-1").is_dir()


def test_ctrl_c_stops_the_running_variant_and_keeps_the_finished_ones(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(BLOCKS)
    out = tmp_path / "wi"
    # Its own session, as a terminal's foreground job: SIGINT goes to its whole process group.
    p = subprocess.Popen([sys.executable, "-m", "ascentrt", "whatif", "--vary",
                          "program.block=0,1,2", "-o", str(out), "--", "python", str(prog)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    pids = tmp_path / "pids.txt"
    try:
        deadline = time.monotonic() + 60
        while not pids.exists() or len(pids.read_text().split()) < 2:  # (variant 1 is running)
            assert time.monotonic() < deadline and p.poll() is None, "variant 1 never started"
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted (SIGINT) during variant 1" in stderr
    assert [x["program.block"] for x in _rows(out)] == ["0"]  # the finished variant, written
    assert "ascentrt whatif: variant 0 (program.block=0; 1 of 3)" in stderr  # (its progress line)
    assert "virtual ms" in stdout and (out / "whatif.html").exists()
    assert all(not _alive(int(pid)) for pid in pids.read_text().split())


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_whatif_refuses_a_timeout_that_is_no_positive_number(value):
    r = _cli("whatif", "--timeout", value, "--vary", "dispatch_ns=1", "--", "python", "-c", "pass")
    assert r.returncode == 1 and "--timeout" in r.stderr and "100000 INVALID_PARAM" in r.stderr


def test_whatif_removes_the_variant_folders_an_earlier_larger_sweep_left(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(KERNEL)
    out = tmp_path / "wi"
    for i in (3, 4):  # what an earlier sweep of five variants left
        (out / f"variant-{i}").mkdir(parents=True)
        (out / f"variant-{i}" / "summary.txt").write_text("old")
        (out / f"variant-{i}" / "stderr.txt").write_text("old")
        (out / f"variant-{i}.reads.json").write_text("[]")
    r = _cli("whatif", "--vary", "dispatch_ns=500", "-o", str(out), "--", "python", str(prog))
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["variant-0", "whatif.csv", "whatif.html"]


def test_whatif_refuses_an_earlier_variant_folder_holding_files_it_did_not_write(tmp_path):
    out = tmp_path / "wi"
    (out / "variant-7").mkdir(parents=True)
    (out / "variant-7" / "notes.txt").write_text("mine")
    r = _cli("whatif", "--vary", "dispatch_ns=500", "-o", str(out), "--", "python", "-c", "pass")
    assert r.returncode == 1 and "variant-7" in r.stderr and "notes.txt" in r.stderr
    assert "100003 INVALID_FILE" in r.stderr and not (out / "variant-0").exists()


def test_whatif_refuses_a_variant_folder_in_this_sweeps_range_holding_files_it_did_not_write(tmp_path):
    # (variant-0 with a foreign file was neither removed nor refused: the run wrote beside it)
    out = tmp_path / "wi"
    (out / "variant-0").mkdir(parents=True)
    (out / "variant-0" / "notes.txt").write_text("mine")
    r = _cli("whatif", "--vary", "dispatch_ns=500", "-o", str(out), "--", "python", "-c", "pass")
    assert r.returncode == 1 and "variant-0" in r.stderr and "notes.txt" in r.stderr
    assert "100003 INVALID_FILE" in r.stderr
    assert sorted(os.listdir(out / "variant-0")) == ["notes.txt"]  # nothing ran


def test_whatif_leaves_no_knob_note_behind(tmp_path):
    out = tmp_path / "wi"
    code = "import ascentrt as art, ascentrt.sim as sim; art.malloc(64).free(); print(sim.variant()['block'])"
    r = _cli("whatif", "--vary", "program.block=1,2", "-o", str(out), "--", "python", "-c", code)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(out)) == ["variant-0", "variant-1", "whatif.csv", "whatif.html"]
    assert "no run read" not in r.stdout  # (the notes were read before they went)


def test_a_preset_asks_for_the_sim_backend_and_is_refused_where_nothing_would_use_it():
    """`run --preset` once ran on cpu without a word, and `demo --backend cpu --preset P
    --no-compare` dropped P: a preset implies sim, and one nothing would use is an error."""
    r = _cli("run", "--preset", "h200", "--", "python", "-c",
             "import ascentrt as art; print(art.Device(0).properties.backend)", timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["sim"], r.stderr
    for args in (("run", "--backend", "cpu", "--preset", "h200", "--", "python", "-c", "1"),
                 ("demo", "--backend", "cpu", "--preset", "h200", "--no-compare")):
        r = _cli(*args, timeout=60)
        assert r.returncode != 0 and "--preset" in r.stderr and "100000" in r.stderr, args
