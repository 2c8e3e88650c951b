"""The report's views: one time axis for the timeline, memory and allocations; slice labels; a
colour per kind with a key; graph nodes under their own names; named host threads; the
program's name as title; each allocation with its call site. The page checks run in one
headless-Chromium load (skipped without a browser), the data checks in process."""

import html
import json
import pathlib
import re
import threading

import numpy as np
import pytest

import ascentrt as art
from ascentrt.engine.task import KIND_NAMES
from ascentrt.profiler import views
from ascentrt.profiler.data import Allocation, ProfileData
from ascentrt.profiler.report import render_html
from ascentrt.profiler.summary import sections

from test_profiler_report import CHROMIUM, _chromium

needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                   "(apt-get install -y chromium)")
T = 30


def _busy(out, rounds=12):
    for _ in range(rounds):
        np.sin(out, out=out)


def _alloc_small():
    return art.malloc(1 << 16)


def _alloc_large():
    return art.malloc(1 << 20)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """A profile with kernels long enough to label, a replayed graph, a host thread named
    'loader' that ended before the profile did, and buffers from two call sites."""
    dev = art.set_device(0)
    s, s2 = dev.create_stream(), dev.create_stream()
    x = art.malloc(1 << 19)
    xv = x.view(np.float64)
    s.begin_capture()
    art.launch(_busy, xv, stream=s, name="node_alpha")
    art.launch(_busy, xv, stream=s, name="node_beta")
    graph = s.end_capture()
    folder = tmp_path_factory.mktemp("views") / "profile"
    with art.profile(folder) as session:
        def loader():
            b = _alloc_small()
            art.launch(_busy, b.view(np.float64), stream=s2, name="loader_kernel")
            s2.synchronize(timeout=T)
            b.free()
        t = threading.Thread(target=loader, name="loader")
        t.start()
        t.join(timeout=T)
        big = [_alloc_large() for _ in range(3)]
        big.pop(0).free()  # the two above it drop into its place
        art.launch(_busy, xv, 200, stream=s, name="long_kernel_with_a_name")
        graph.launch(s)
        s.synchronize(timeout=T)
        for b in big:
            b.free()
    graph.destroy()
    x.free()
    for st in (s, s2):
        st.destroy()
    return session.profile, folder


# ---- the data, in process --------------------------------------------------------------------

def test_every_kind_has_a_colour_of_its_own():
    kinds = set(KIND_NAMES) | {"graph", "api", "range"}
    assert kinds <= set(views.KIND_COLORS)
    colours = [c.lower() for c in views.KIND_COLORS.values()]
    assert len(set(colours)) == len(colours)


def test_graph_segments_get_a_track_of_their_own_and_nodes_keep_their_names(profiled):
    prof, _ = profiled
    data = views.view_data(prof)
    tracks = {t["id"]: t for t in data["tracks"]}
    seg_tracks = [t for t in tracks if t.endswith("-graph")]
    assert len(seg_tracks) == 1
    kinds = {data["kinds"][row[3]] for row in tracks[seg_tracks[0]]["s"]}
    assert kinds == {"graph"}
    stream_track = tracks[seg_tracks[0][: -len("-graph")]]
    names = {data["names"][row[2]] for row in stream_track["s"]}
    assert {"node_alpha", "node_beta", "long_kernel_with_a_name"} <= names
    assert not any(data["kinds"][row[3]] == "graph" for row in stream_track["s"])


def test_graph_segments_are_not_counted_as_work_beside_their_nodes(profiled):
    prof, _ = profiled
    top = next(rows for title, _, rows in sections(prof) if title == "Top tasks")
    names = [row[0] for row in top]
    assert "node_alpha" in names and not any(n.startswith("graph") for n in names)


def test_a_host_thread_that_ended_before_the_profile_keeps_its_name(profiled):
    prof, _ = profiled
    assert "loader" in prof.threads.values()
    labels = [t["label"] for t in views.view_data(prof)["tracks"] if t["group"] == "host"]
    assert "loader API" in labels and "MainThread API" in labels


def test_the_title_is_the_program_name():
    assert views.program_name(["/home/u/train.py", "--lr", "0.1"]) == "train.py"
    assert views.program_name(["/venv/lib/site-packages/pytest/__main__.py", "-q"]) == "pytest"
    # (the demo's profile was titled `cli.py`: ascentrt's own command goes by its name)
    assert views.program_name(["/src/ascentrt/cli.py", "demo", "--force"]) == "ascentrt demo"
    assert views.program_name(["/venv/bin/ascentrt", "-q", "demo"]) == "ascentrt demo"
    assert views.program_name(["-c"]) == "python -c"
    assert views.program_name([]) == ""
    page = render_html(ProfileData(duration_ns=1000, command=["/home/u/train.py", "--lr"]), [], [])
    assert "<title>train.py \u2014 ascentrt profile</title>" in page
    assert "/home/u/train.py --lr" in page  # the whole command line stays under the title


def test_allocations_keep_the_largest_with_their_call_sites(monkeypatch):
    monkeypatch.setattr(views, "MAX_ALLOCATIONS", 2)
    allocs = [Allocation(0, 0x1000 * (i + 1), n, 100 * i, 100 * i + 50 if i else None, f"p.py:{i}")
              for i, n in enumerate([4096, 64, 8192, 128])]
    data = views.view_data(ProfileData(duration_ns=1000, allocations=allocs))
    dev = data["allocations"]["0"]
    assert dev["hidden"] == 2
    # The two largest, in allocation order: [alloc us, free us (None: live), bytes, site, address]
    assert [(r[0], r[1], r[2], data["names"][r[3]], r[4]) for r in dev["rows"]] == \
        [(0.0, None, 4096, "p.py:0", 0x1000), (0.2, 0.25, 8192, "p.py:2", 0x3000)]


def test_the_page_is_one_file_with_its_script_and_style_inline(profiled):
    _, folder = profiled
    text = (folder / "report.html").read_text()
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert "function drawAllocations" in text and "#views svg" in text


# ---- the page, in one browser load ----------------------------------------------------------

# Appended to a copy of the report: zooms the views, then writes what they show into the page
# (the DOM dump carries it back).
PROBE = pathlib.Path(__file__).with_name("report_probe.js")


def _rgb(hex_colour: str) -> str:
    v = int(hex_colour[1:], 16)
    return f"rgb({v >> 16}, {(v >> 8) & 255}, {v & 255})"


@pytest.fixture(scope="module")
def page(profiled, tmp_path_factory):
    """What the probe found in the loaded report (and the screenshot of it, zoomed)."""
    _, folder = profiled
    tmp = tmp_path_factory.mktemp("browser")
    head, end, tail = (folder / "report.html").read_text().rpartition("</body>")
    probe = tmp / "probe.html"
    probe.write_text(f"{head}<script>{PROBE.read_text()}</script>{end}{tail}")
    shot = tmp / "shot.png"
    out = _chromium(tmp, "--window-size=1400,1000", "--dump-dom", f"--screenshot={shot}",
                    f"file://{probe}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert '<div id="errors"></div>' in out.stdout, "the page reported script errors"
    found = re.search(r'<pre id="probe">(.*?)</pre>', out.stdout, re.S)
    assert found, "the probe did not run"
    return json.loads(html.unescape(found.group(1))), shot


@needs_browser
def test_zooming_the_memory_view_zooms_every_view_to_the_same_range(page):
    probe, _ = page
    assert len(probe["after"]) >= 3  # timeline, memory over time, one allocations view
    assert all(r == probe["before"][0] for r in probe["before"])
    t0, t1 = probe["after"][0]
    assert all(r == [t0, t1] for r in probe["after"])
    full = probe["before"][0][1] - probe["before"][0][0]
    assert 0 < t1 - t0 < 0.5 * full  # four wheel steps in: 0.8 ** 4 of the range
    assert all(ticks == probe["ticks"][0] for ticks in probe["ticks"])  # same axis, same places
    assert len(probe["ticks"][0]) == 8


@needs_browser
def test_slices_are_labelled_where_the_label_fits(page):
    probe, _ = page
    for labels in (probe["labelsBefore"], probe["labels"]):  # the full range, and zoomed in
        assert all(lab["len"] <= lab["width"] for lab in labels)  # drawn inside the slice
    before = [lab["text"] for lab in probe["labelsBefore"]]
    assert any(t.startswith("long_k") for t in before)
    assert "long_kernel_with_a_name" in [lab["text"] for lab in probe["labels"]]  # more room
    assert {"node_alpha", "node_beta"} <= set(probe["names"])  # graph nodes under their names


@needs_browser
def test_the_key_shows_each_kind_present_in_its_own_colour(page):
    probe, _ = page
    key = dict(probe["key"])
    assert {"kernel", "api", "graph"} <= set(key)
    assert len(set(key.values())) == len(key)
    for kind, colour in key.items():
        assert colour == _rgb(views.KIND_COLORS[kind])
    for kind, fills in probe["fills"].items():  # every slice drawn in its kind's key colour
        assert fills == [views.KIND_COLORS[kind]], kind


@needs_browser
def test_tracks_name_threads_and_graph_segments(page):
    probe, _ = page
    assert "loader API" in probe["tracks"] and "MainThread API" in probe["tracks"]
    assert any(t.endswith("graph segments") for t in probe["tracks"])


@needs_browser
def test_the_title_names_the_program(page):
    probe, _ = page
    assert probe["title"].endswith("\u2014 ascentrt profile") and probe["h1"] == probe["title"]


@needs_browser
def test_each_allocation_is_a_band_with_its_call_site(page):
    probe, shot = page
    here = f"{__file__.rsplit('/', 1)[-1]}:"
    titles = [title for title, _, _ in probe["bandsBefore"]]
    assert sum(t.startswith("64.0 KiB") for t in titles) == 1  # the loader thread's buffer
    large = [band for band in probe["bandsBefore"] if band[0].startswith("1.0 MiB")]
    assert len(large) == 3 and all(here in t and "freed at" in t for t, _, _ in large)
    # The first is freed first: the two allocated after it drop into its place (y grows down).
    assert [end > start for _, start, end in large] == [False, True, True]
    sites = {t.split(" by ", 1)[1].split(",", 1)[0] for t in titles}
    assert len(sites) == 2 and all(any(k.startswith(s) for k in probe["sites"]) for s in sites)
    # Zoomed in: only the buffers that lived inside the window are drawn (which ones depends
    # on how long each part of the program took here: the window is about the long kernel).
    t0, t1 = probe["after"][1]  # (the memory view's window, in us)
    def lived(title):
        start = float(re.search(r"allocated at ([0-9.]+) ms", title).group(1)) * 1e3
        end = re.search(r"freed at ([0-9.]+) ms", title)
        return start, float(end.group(1)) * 1e3 if end else float("inf")
    inside = [t for t in titles if lived(t)[0] < t1 and lived(t)[1] > t0]
    assert sorted(title for title, _, _ in probe["bands"]) == sorted(inside)
    assert t1 - t0 < probe["before"][1][1] - probe["before"][1][0]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
