"""The HTML report opens in headless Chromium without errors and renders the stream timeline."""

import re
import shutil
import subprocess

import numpy as np
import pytest

import ascentrt as art

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                "(apt-get install -y chromium)")


def _chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=90)


def _kernel(out):
    for _ in range(5):
        np.sin(out, out=out)


@pytest.fixture
def report(dev, tmp_path):
    streams = [dev.create_stream() for _ in range(3)]
    bufs = [art.malloc(1 << 16) for _ in streams]
    folder = tmp_path / "profile"
    with art.profile(folder):
        with art.profiler.range("work"):
            for i in range(6):
                s = streams[i % 3]
                art.launch(_kernel, bufs[i % 3].view(np.float64), stream=s)
        for s in streams:
            s.synchronize(timeout=30)
    for b in bufs:
        b.free()
    for s in streams:
        s.destroy()
    return folder / "report.html", [s.id for s in streams]


def test_report_renders_one_track_per_stream_without_script_errors(report, tmp_path):
    path, stream_ids = report
    out = _chromium(tmp_path, "--dump-dom", f"file://{path}")
    assert out.returncode == 0, out.stderr[-2000:]
    dom = out.stdout
    assert re.search(r'<div id="errors"></div>', dom), "the page reported script errors"
    tracks = re.findall(r'<g class="track" data-track="([^"]+)"', dom)
    for sid in stream_ids:
        assert f"d{dev_id()}-s{sid}" in tracks
    assert any(t.startswith("host-") for t in tracks)
    assert int(re.search(r'data-rendered="(\d+)"', dom).group(1)) == len(tracks)
    assert dom.count('class="slice"') >= 6          # the kernels were drawn
    assert 'class="memory-line"' in dom             # the memory chart was drawn


def test_report_screenshot_shows_the_timeline(report, tmp_path):
    path, _ = report
    shot = tmp_path / "report.png"
    out = _chromium(tmp_path, "--window-size=1400,1000", f"--screenshot={shot}", f"file://{path}")
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000  # a blank page compresses to a few KB


def test_report_is_self_contained(report):
    path, _ = report
    text = path.read_text()
    assert not re.search(r'(src|href)="(https?:)?//', text)  # no network needed to open it


def dev_id() -> int:
    return art.current_device().id
