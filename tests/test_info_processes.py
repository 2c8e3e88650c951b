"""`ascentrt info` lists the other processes using each device: each publishes its usage in a
small file, info reads them, and files of dead processes are ignored and deleted."""

import json
import os
import select
import signal
import subprocess
import sys
import textwrap

import pytest

import ascentrt as art
from ascentrt import cli, usage

MiB = 1 << 20

CHILD = textwrap.dedent("""
    import sys
    import ascentrt as art
    dev = art.Device(0)
    buf = art.malloc(3 << 20)
    streams = [dev.create_stream(), dev.create_stream()]
    print("ready", flush=True)
    sys.stdin.readline()
""")


def _start_child(folder):
    env = dict(os.environ, ASCENTRT_USAGE_DIR=str(folder), ASCENTRT_LEAK_CHECK="off")
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    ready, _, _ = select.select([child.stdout], [], [], 30)
    assert ready and child.stdout.readline() == "ready\n"
    return child


def _child_usage(folder, pid, want_streams, timeout=10.0):
    """The child's published usage once its publishing thread has caught up (within ~1 s)."""
    import time
    deadline = time.monotonic() + timeout
    while True:
        mine = [p for p in usage.processes(str(folder)) if p.pid == pid]
        if mine and mine[0].devices[0].streams == want_streams or time.monotonic() > deadline:
            return mine
        time.sleep(0.05)


def test_info_lists_another_process_with_its_memory_and_streams_then_ignores_it_once_dead(
        tmp_path, monkeypatch, capsys):
    child = _start_child(tmp_path)
    try:
        mine = _child_usage(tmp_path, child.pid, want_streams=2)
        assert len(mine) == 1, os.listdir(tmp_path)
        (dev0,) = mine[0].devices
        assert dev0.device == 0 and dev0.streams == 2
        assert dev0.memory_used == 3 * MiB and dev0.memory_reserved >= 3 * MiB
        assert mine[0].program.startswith("python") and mine[0].backend == "cpu"

        monkeypatch.setenv("ASCENTRT_USAGE_DIR", str(tmp_path))
        assert cli.main(["info", "--json"]) == 0
        (row,) = [r for r in json.loads(capsys.readouterr().out) if r["device"] == 0]
        assert [(p["pid"], p["memory_used"], p["streams"]) for p in row["processes"]] == \
            [(child.pid, 3 * MiB, 2)]
        assert cli.main(["info"]) == 0
        table = capsys.readouterr().out
        assert f"0      {child.pid:<9}{'cpu':<20}3.0 MiB / " in table
        assert "each on its own devices" in table  # (not a share of this process's devices)
    finally:
        child.send_signal(signal.SIGKILL)  # no exit handler runs: its file stays behind
        child.wait(timeout=30)
    assert (tmp_path / f"{child.pid}.json").exists()
    assert usage.processes(str(tmp_path)) == []
    assert not (tmp_path / f"{child.pid}.json").exists()  # the stale file is deleted


def _file_of(folder, pid, **fields):
    data = {"format": 1, "pid": pid, "program": "python train.py", "since": 0.0,
            "start_ticks": None,
            "devices": [{"device": 0, "memory_used": 32, "memory_reserved": 64, "streams": 1}]}
    data.update(fields)
    path = folder / f"{pid}.json"
    path.write_text(json.dumps(data))
    return path


def test_a_file_whose_pid_was_reused_by_another_process_is_stale(tmp_path):
    live = os.getppid()  # a live process other than this one
    stat = usage._proc_stat(live)
    ticks = stat[1] if stat else None
    _file_of(tmp_path, live, start_ticks=ticks)
    assert [p.pid for p in usage.processes(str(tmp_path))] == [live]
    if ticks is not None:  # (without /proc the start time cannot be checked)
        path = _file_of(tmp_path, live, start_ticks=ticks + 1)
        assert usage.processes(str(tmp_path)) == []
        assert not path.exists()


def test_corrupt_and_foreign_files_are_skipped_never_raised(tmp_path):
    live = os.getppid()
    (tmp_path / f"{live}.json").write_text("{not json")
    dead = tmp_path / "999999999.json"
    dead.write_bytes(b"\xff\x00")
    _file_of(tmp_path, 99999999999999999999)     # a pid too large for the OS
    (tmp_path / f"{live + 1}.json.tmp").write_text("{}")
    other = _file_of(tmp_path, live, devices=[{"device": -1, "memory_used": "x"}])
    (tmp_path / "notes.txt").write_text("not ours")
    assert usage.processes(str(tmp_path)) == []
    assert other.exists() and (tmp_path / "notes.txt").exists()  # a live process's, or not ours
    assert not dead.exists()
    assert usage.processes(str(tmp_path / "missing")) == []


def test_the_file_is_rewritten_only_when_a_figure_changed_and_removed_at_exit(tmp_path):
    dev = art.Device(0)
    pub = usage._Publisher([dev], str(tmp_path))
    pub.publish()
    path = tmp_path / f"{os.getpid()}.json"
    first = os.stat(path).st_ino
    pub.publish()
    assert os.stat(path).st_ino == first  # nothing changed: no write
    buf = art.malloc(MiB)
    try:
        pub.publish()
        assert os.stat(path).st_ino != first
        (entry,) = json.loads(path.read_text())["devices"]
        assert entry["memory_used"] >= MiB
    finally:
        buf.free()
    pub.stop()
    assert not path.exists()
    pub.publish()  # after exit: never written again
    assert not path.exists()


def test_an_unwritable_folder_stops_publishing_quietly(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    pub = usage._Publisher([art.Device(0)], str(blocker / "usage"))
    pub.publish()
    assert pub.stopped.is_set() and pub.written is None


def test_a_folder_others_can_write_is_neither_written_nor_read(tmp_path):
    # In a shared temp dir another user could make the folder first and plant a link at the
    # name the writer would use: such a folder is not trusted, on either side.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for name in (f"{os.getpid()}.json", f"{os.getpid()}.json.tmp", f"{os.getpid() + 1}.json"):
        os.symlink(victim, shared / name)
    pub = usage._Publisher([art.Device(0)], str(shared))
    pub.publish()
    assert pub.stopped.is_set() and victim.read_text() == "keep"
    assert usage.processes(str(shared)) == [] and (shared / f"{os.getpid() + 1}.json").is_symlink()


def test_info_says_it_could_not_look_in_a_usage_folder_open_to_others(tmp_path, monkeypatch, capsys):
    # (it said "No other process uses these devices." where it had not looked)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    monkeypatch.setenv("ASCENTRT_USAGE_DIR", str(shared))
    with pytest.warns(UserWarning, match="mode 0755"):
        assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "No other process" not in out and f"could not be read: {shared} is not this user's alone" in out
    monkeypatch.setenv("ASCENTRT_USAGE_DIR", str(tmp_path / "none-yet"))
    assert cli.main(["info"]) == 0
    assert "No other process uses these devices." in capsys.readouterr().out


def test_a_usage_folder_open_to_others_is_named_once_with_its_mode(tmp_path, monkeypatch):
    # (ASCENTRT_USAGE_DIR at a 0755 folder once published nothing, and info said no process ran)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    monkeypatch.setenv("ASCENTRT_USAGE_DIR", str(shared))
    pub = usage._Publisher([art.Device(0)], str(shared))
    with pytest.warns(UserWarning) as caught:
        pub.publish()
        assert usage.processes(str(shared)) == []
    assert len(caught) == 1
    text = str(caught[0].message)
    assert f"ASCENTRT_USAGE_DIR={shared}" in text and "mode 0755" in text


@pytest.mark.parametrize("where", ["a file", "unmakeable"])
def test_a_usage_folder_that_cannot_be_written_is_named_once_with_why(tmp_path, monkeypatch, where):
    # (a file in its place, or a path that cannot be made, published nothing without a word)
    target = tmp_path / "afile"
    target.write_text("")
    if where == "unmakeable":
        target = target / "below"
    monkeypatch.setenv("ASCENTRT_USAGE_DIR", str(target))
    pub = usage._Publisher([art.Device(0)], str(target))
    with pytest.warns(UserWarning) as caught:
        pub.publish()
        pub.stopped.clear()
        pub.publish()
    assert pub.stopped.is_set() and len(caught) == 1
    text = str(caught[0].message)
    assert f"ASCENTRT_USAGE_DIR={target} cannot be written" in text
    assert ("not a folder" if where == "a file" else "Not a directory") in text


def test_a_forked_child_does_not_publish_or_remove_its_parents_file(tmp_path, monkeypatch):
    pub = usage._Publisher([art.Device(0)], str(tmp_path))
    monkeypatch.setattr(usage, "_publisher", pub)
    usage.publish()
    path = tmp_path / f"{os.getpid()}.json"
    assert path.exists()
    pid = os.fork()
    if pid == 0:  # the child: what it does at exit and when asked to publish
        usage._stop_at_exit()
        usage.publish()
        os._exit(0 if usage._publisher is None else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert path.exists() and sorted(os.listdir(tmp_path)) == [path.name]
