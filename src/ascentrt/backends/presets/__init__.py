"""Hardware models for the simulated device: loading, checking and describing preset files.

A preset is a TOML file with a name, a description and one table per field:
`field = { value = 24, kind = "documented", source = "where the number comes from" }`,
kind being "documented", "measured" or "estimated". Every field in FIELDS must be there, except
those with a DEFAULTS entry (fields added later, whose default keeps the older model): such a
field a file leaves out has the kind "default". Any other key is refused, naming the nearest
valid one.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import stat
import tomllib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any


class PresetError(ValueError):
    """A preset that cannot be used: unknown, unreadable, or a field missing or out of range
    (the runtime layer and the command say it as an InvalidArgumentError's code, 100000)."""

FILE_KINDS = ("documented", "measured", "estimated")  # what a file may say of its numbers
DEFAULT_KIND = "default"  # a field the file leaves out: its value is DEFAULTS', no one's claim
KINDS_OF_SOURCE = (*FILE_KINDS, DEFAULT_KIND)
_ENTRY_KEYS = ("value", "kind", "source")
_OTHER_KEYS = ("name", "description")
_MOST_BYTES = 1 << 20  # a preset file is a page of text
_HERE = os.path.dirname(os.path.abspath(__file__))

# name: (type, smallest allowed value, unit, meaning). Counts are ints; rates and times floats.
FIELDS: dict[str, tuple[type, float, str, str]] = {
    "compute_units": (int, 1, "", "AI Cores (SMs): kernels occupy block_dim of them"),
    "compute_flops_per_unit": (float, 1, "FLOP/s", "peak FP16 rate of one compute unit"),
    "ai_cpus": (int, 0, "", "AI CPUs (not modelled yet: no AI CPU kernels run on them)"),
    "host_func_threads": (int, 1, "", "host threads running host functions and callbacks"),
    "copy_engines_h2d": (int, 1, "", "copy engines for host-to-device copies"),
    "copy_engines_d2h": (int, 1, "", "copy engines for device-to-host copies"),
    "copy_engines_d2d": (int, 1, "", "copy engines for device-to-device copies"),
    "memory_bytes": (int, 1, "B", "device memory capacity"),
    "memory_bandwidth": (float, 1, "B/s", "device memory bandwidth (D2D copies read and write it)"),
    "memory_bandwidth_per_unit": (float, 0, "B/s", "memory bandwidth one compute unit can draw: "
                                  "a kernel's declared bytes move at most at its units times "
                                  "this, and a kernel on every unit the whole (0: any unit "
                                  "draws the whole memory bandwidth)"),
    "copy_engine_bandwidth": (float, 0, "B/s", "bytes per second one copy engine moves within "
                              "device memory (a D2D copy or a fill) when nothing else runs (0: "
                              "half the memory bandwidth, a copy reading and writing it once)"),
    "host_link_bandwidth": (float, 1, "B/s", "host link bandwidth per direction, pinned memory"),
    "pageable_bandwidth": (float, 1, "B/s", "copies from or to pageable memory (staged by the host)"),
    "host_link_latency_ns": (float, 0, "ns", "latency of one copy over the host link"),
    "small_copy_bytes": (int, 0, "B", "contiguous copies (pinned host, or within the device "
                         "where the memory bandwidth allows it) smaller than this move at "
                         "small_copy_bandwidth instead (a cpu backend's memmove writes through "
                         "the cache below glibc's non-temporal threshold, and is slower there "
                         "from memory the cache no longer holds, as a pipeline's is; 0: one "
                         "rate for every size)"),
    "small_copy_bandwidth": (float, 0, "B/s", "the rate of the copies small_copy_bytes names "
                             "(given with it: both or neither)"),
    "peer_link_bandwidth": (float, 1, "B/s", "link between two devices, per direction (peer copies)"),
    "peer_link_latency_ns": (float, 0, "ns", "latency of one peer copy over that link"),
    "dispatch_ns": (float, 0, "ns", "device-side overhead of each task"),
    "event_latency_ns": (float, 0, "ns", "from an event/notify record to the wait it releases"),
    "executor_handoff_ns": (float, 0, "ns", "from a stream's task ending to its next task "
                            "starting on another executor class (a copy after a kernel): the "
                            "wake-up of that class's parked thread on a cpu backend"),
    "default_kernel_ns": (float, 0, "ns", "duration of a kernel that declares no cost"),
    "host_func_ns": (float, 0, "ns", "duration of a host function (beyond what it waits for)"),
    "host_launch_ns": (float, 0, "ns", "host cost of a kernel launch, async copy or memset"),
    "host_record_ns": (float, 0, "ns", "host cost of an event/notify record or wait"),
    "host_sync_ns": (float, 0, "ns", "host cost of a synchronize (on top of the wait)"),
    "host_graph_launch_ns": (float, 0, "ns", "host cost of launching a captured graph"),
    "host_malloc_driver_ns": (float, 0, "ns", "host cost of a driver allocation (pool miss)"),
    "host_malloc_pool_ns": (float, 0, "ns", "host cost of a caching-pool allocation (hit)"),
    "host_free_ns": (float, 0, "ns", "host cost of a free into the pool"),
    "host_query_ns": (float, 0, "ns", "host cost of an event/stream query"),
    "queue_depth": (int, 1, "tasks", "submission-queue depth per stream: a full one makes submit wait"),
    "max_streams": (int, 1, "", "streams a device can have at once"),
    "max_events": (int, 1, "", "events a device can have at once"),
    "max_notifies": (int, 1, "", "notifies a device can have at once"),
    "default_block_dim": (int, 0, "", "compute units a kernel occupies when it declares no "
                          "block_dim (0: all of them)"),
    "shared_processors": (float, 0, "", "processors that run every task's work, kernels', "
                          "copies' and host functions' (a cpu backend's cores, whose engines "
                          "are threads; fractional where they are not all free): more "
                          "concurrent tasks share them equally (0: each engine is hardware of its own)"),
    "crowded_processors": (float, 0, "", "what the shared processors still deliver in all "
                           "once more tasks run than there are processors (a cpu backend's "
                           "threads are time-sliced then, and wait for the interpreter lock a "
                           "preempted one holds; 0: shared_processors, no loss)"),
    "unified_memory": (int, 0, "", "1: host memory is the device's memory (a cpu backend): a "
                       "host copy moves its bytes through that memory's bandwidth at both ends"),
    "peer_over_host_link": (int, 0, "", "1: there is no link between devices: a peer copy (and a "
                            "kernel's read of another device's memory) leaves its source device "
                            "over that device's host link, sharing its device-to-host direction "
                            "with the device's D2H copies (0: a peer link of its own per pair)"),
}

# Fields a preset file may leave out: (value, why that value keeps the model of older preset
# files). A loaded preset's source says "not in the file: default of VALUE (WHY)".
DEFAULTS: dict[str, tuple[float, str]] = {
    "default_block_dim": (0, "a kernel without block_dim occupies every compute unit"),
    "copy_engine_bandwidth": (0.0, "a D2D copy reads and writes the memory at its full bandwidth"),
    "shared_processors": (0.0, "engines are independent hardware (no sharing)"),
    "crowded_processors": (0.0, "all of shared_processors: no loss when crowded"),
    "unified_memory": (0, "host and device memory are apart"),
    "peer_over_host_link": (0, "each pair of devices has a peer link of its own"),
    "memory_bandwidth_per_unit": (0.0, "any compute unit draws the whole memory bandwidth"),
    "small_copy_bytes": (0, "copies of every size move at the same rate"),
    "small_copy_bandwidth": (0.0, "copies of every size move at the same rate"),
    "executor_handoff_ns": (0.0, "a stream's work moves between executor classes at no cost"),
    "max_notifies": (1 << 30, "notifies were not capped (the no-limit value ascentrt calibrate writes)"),
}


@dataclass(frozen=True)
class Preset:
    """A loaded hardware model: `values` by field, each with its `sources` (kind, text)."""

    name: str
    path: str
    description: str
    values: dict
    sources: dict

    def __post_init__(self) -> None:
        # Each field is a plain attribute too: the simulator reads them per task, and a lookup
        # through __getattr__ (after a failed normal one) costs several times as much.
        for field, value in self.values.items():
            object.__setattr__(self, field, value)

    if TYPE_CHECKING:
        def __getattr__(self, field: str) -> Any: ...  # the fields, set by __post_init__

    def varied(self, changes: dict, where: str = "") -> "Preset":
        """A copy with some fields set to new values, all of them applied before the rules
        between fields are checked (as a file's would be); PresetError naming `where`."""
        where = where or f"variant of {self.name}"
        values = dict(self.values)
        sources = dict(self.sources)
        for field, raw in changes.items():
            values[field] = _check_value(field, raw, where, from_text=True)
            sources[field] = ("varied", f"set for this run (preset value "
                                        f"{shown(self.values[field])})")
        _check_together(values, where)
        return Preset(self.name, self.path, self.description, values, sources)


def identity(preset: Preset) -> str:
    """What tells `preset` from the stock one of its name: "" for a shipped file as it is,
    else its file (one not shipped) and the fields a variant set ("file /x/q4.toml; varied:
    queue_depth=4")."""
    parts = []
    if os.path.dirname(os.path.abspath(preset.path)) != _HERE:
        parts.append(f"file {preset.path}")
    varied = [f"{f}={shown(preset.values[f])}" for f, (kind, _) in preset.sources.items()
              if kind == "varied"]
    if varied:
        parts.append(f"varied: {', '.join(varied)}")
    return "; ".join(parts)


def names() -> list[str]:
    """The presets shipped in the package (and `calibrated`, once ascentrt calibrate wrote it)."""
    found = {f[:-5] for f in os.listdir(_HERE) if f.endswith(".toml")}
    if os.path.exists(calibrated_path()):
        found.add("calibrated")
    return sorted(found)


def calibrated_path() -> str:
    """Where `ascentrt calibrate` writes this machine's preset (ASCENTRT_CACHE_DIR, else
    ~/.cache/ascentrt)."""
    base = os.environ.get("ASCENTRT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                "ascentrt")
    return os.path.join(base, "calibrated.toml")


def parse_value(field: str, text: str, where: str):
    """One field's value from text (a command line's), checked alone: type and bounds, not
    the rules between fields; PresetError naming `where`, the field and the bound."""
    return _check_value(field, text, where, from_text=True)


def shown(value) -> str:
    """A value as people write it: 25000000000 (not 25000000000.0), 0.5, 1e-05."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)


def _nearest(name: str, known) -> str:
    """' (did you mean X?)' for the known name closest to a misspelt one, else ''."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(text: str) -> bool:
    """Whether `text` reads as a number."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_value(field: str, raw, where: str, from_text: bool = False):
    if field not in FIELDS:
        raise PresetError(f"{where}: unknown preset field {field!r}{_nearest(field, FIELDS)} "
                          f"(known: {', '.join(FIELDS)})")
    typ, low, unit, _ = FIELDS[field]
    if isinstance(raw, str):
        if not from_text:  # (a file's "24" is text: quoted by mistake, or not meant as a number)
            hint = f" (write value = {raw.strip():.40}, without quotes)" if _number(raw) else ""
            raise PresetError(f"{where}: field {field!r} must be a number, got the string "
                              f"{raw!r:.40}{hint}")
        try:
            raw = float(raw)
        except ValueError:
            raise PresetError(f"{where}: field {field!r} must be a number, got {raw!r}") from None
    try:  # (an int too large for a float, 1 and 400 zeros, is no finite number either)
        finite = not isinstance(raw, bool) and isinstance(raw, (int, float)) and math.isfinite(raw)
    except OverflowError:
        finite = False
    if not finite:
        raise PresetError(f"{where}: field {field!r} must be a finite number, got {raw!r:.40}")
    if typ is int:
        if raw != int(raw):
            raise PresetError(f"{where}: field {field!r} must be a whole number, got {raw!r}")
        raw = int(raw)
    # A rate's real bound is _RATE_AT_LEAST (or 0 where the field allows 0): say that one,
    # not the field's nominal 1 (a zero bandwidth was told "at least 1", then 1000 said "at least 1000").
    rate = unit.endswith("/s")
    least = max(low, _RATE_AT_LEAST) if rate and (raw or low) else low
    if raw < least:
        raise PresetError(f"{where}: field {field!r} must be at least {least:g}"
                          f"{' (or 0)' if rate and low == 0 else ''}, got {shown(raw)}")
    most = _AT_MOST.get(field, _NS_AT_MOST if unit == "ns" else _AT_MOST_ANY)
    if raw > most:
        raise PresetError(f"{where}: field {field!r} must be at most {most:g}, got {raw!r:.40}")
    return typ(raw)


# Bounds that keep every modelled time a finite int64 of ns (a profile's figures, the virtual
# clock): a host cost or latency of at most 1000 s, rates of at least 1 kB/s (64 MiB then take
# 18 hours), counts and rates below 10**18. Beyond them a model describes no hardware.
_NS_AT_MOST = 1e12
_RATE_AT_LEAST = 1e3
_AT_MOST_ANY = 1e18
_AT_MOST = {"unified_memory": 1, "peer_over_host_link": 1}  # (flags)


def _check_together(values: dict, where: str) -> None:
    """The checks that involve two fields."""
    shared, crowded = values["shared_processors"], values["crowded_processors"]
    if shared and crowded > shared:
        raise PresetError(f"{where}: field 'crowded_processors' ({crowded:g}) must be at most "
                          f"shared_processors ({shared:g}): crowded, processors deliver no more")
    if bool(values["small_copy_bytes"]) != bool(values["small_copy_bandwidth"]):
        raise PresetError(f"{where}: fields 'small_copy_bytes' and 'small_copy_bandwidth' go "
                          f"together: give both or neither (got {values['small_copy_bytes']:g} "
                          f"and {values['small_copy_bandwidth']:g})")
    if values["default_block_dim"] > values["compute_units"]:
        raise PresetError(f"{where}: field 'default_block_dim' ({values['default_block_dim']}) "
                          f"must be at most compute_units ({values['compute_units']})")


def load(name_or_path: str) -> Preset:
    """The preset named (one of names()) or at a path; InvalidArgumentError naming the file
    and field when it is unknown, unreadable, or a field is missing, negative or not a number."""
    text = str(name_or_path).strip()
    # (a name is a name wherever the program runs: a file or folder called h200 in the
    # current directory must not shadow the preset; ./h200 names that file)
    if os.sep in text or text.endswith(".toml") or text.lower() not in (*names(), "calibrated") \
            and os.path.exists(text):
        path = os.path.abspath(text)
    elif (text := text.lower()) == "calibrated":  # (a name in any case, as the backend's is read)
        path = calibrated_path()
        if not os.path.exists(path):
            raise PresetError(f"no calibrated preset yet ({path}): run `ascentrt calibrate` first")
    elif text in names():
        path = os.path.join(_HERE, f"{text}.toml")
    else:
        listed = ", ".join(names()) + ("" if "calibrated" in names() else
                                       "; calibrated once `ascentrt calibrate` has written it")
        raise PresetError(f"unknown simulator preset {text!r} (known: {listed}; "
                          f"or give the path of a .toml preset file)")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # (/dev/zero never ends, a FIFO blocks)
            raise PresetError(f"preset file {path}: not a regular file")
        with open(path, "rb") as f:
            data = f.read(_MOST_BYTES + 1)
        if len(data) > _MOST_BYTES:
            raise PresetError(f"preset file {path}: more than {_MOST_BYTES >> 10} KiB, no preset")
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PresetError(f"preset file {path}: not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start})") from None
    except OSError as exc:
        raise PresetError(f"preset file {path}: cannot be read ({exc.strerror})") from None
    except NameError:  # builtins are gone: the interpreter is shutting down
        raise PresetError(f"preset file {path}: cannot be read while the interpreter shuts "
                          f"down (create the device earlier)") from None
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"preset file {path}: not valid TOML ({exc})") from None
    # Every key is checked before any field: a misspelt one is named with the nearest valid
    # one (a misspelt required field said "missing", a misspelt optional one was ignored).
    known = (*_OTHER_KEYS, *FIELDS)
    for key in doc:
        if key not in known:
            raise PresetError(f"preset file {path}: unknown key {key!r}{_nearest(key, known)}: a "
                              f"preset has name, description and the fields ascentrt info "
                              f"--preset lists")
    values, sources = {}, {}
    for field in FIELDS:
        entry = doc.get(field)
        if entry is None and field in DEFAULTS:
            values[field], why = DEFAULTS[field]
            sources[field] = (DEFAULT_KIND, f"not in the file: default of {shown(values[field])} "
                                            f"({why})")
            continue
        if entry is None:
            raise PresetError(f"preset file {path}: field {field!r} is missing")
        if not isinstance(entry, dict) or "value" not in entry:
            raise PresetError(f"preset file {path}: field {field!r} must be a table "
                                       f"{{ value = ..., kind = ..., source = ... }}")
        for key in entry:
            if key not in _ENTRY_KEYS:
                raise PresetError(f"preset file {path}: field {field!r} has an unknown key "
                                  f"{key!r}{_nearest(key, _ENTRY_KEYS)} (its keys: "
                                  f"{', '.join(_ENTRY_KEYS)})")
        values[field] = _check_value(field, entry["value"], f"preset file {path}")
        kind = entry.get("kind")
        if kind not in FILE_KINDS:
            raise PresetError(f"preset file {path}: field {field!r} needs kind = one of "
                                       f"{', '.join(FILE_KINDS)} (got {kind!r})")
        source = entry.get("source")
        if not isinstance(source, str) or not source.strip():
            raise PresetError(f"preset file {path}: field {field!r} needs a source")
        sources[field] = (kind, source.strip())
    _check_together(values, f"preset file {path}")
    name = doc.get("name", os.path.basename(path)[:-5] if path.endswith(".toml") else path)
    description = doc.get("description", "")
    for key, value in (("name", name), ("description", description)):
        if not isinstance(value, str):  # (a device is named after its preset)
            raise PresetError(f"preset file {path}: {key} must be a string, got {value!r:.40}")
    return Preset(name, path, description, values, sources)


def describe(preset: Preset) -> list[tuple[str, str, str, str, str]]:
    """(field, value, unit, kind, source) rows, for `ascentrt info --preset`."""
    rows = []
    for field, (typ, _, unit, _) in FIELDS.items():
        v = preset.values[field]
        shown = f"{v:,}" if typ is int else f"{v:.4g}"
        rows.append((field, shown, unit, *preset.sources[field]))
    return rows


PROGRAM_PREFIX = "program."  # a variant's knobs for the program itself, not the preset


def variant_doc(text: str) -> dict:
    """A variant (JSON from ASCENTRT_SIM_VARY) as a dict, {} when unset; PresetError if malformed."""
    if not text:
        return {}
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # (RecursionError: nested deeper than Python goes)
        raise PresetError(f"variant {text!r:.80} is not JSON") from None
    if not isinstance(doc, dict):
        raise PresetError(f"variant {text!r} must be a JSON object")
    return doc


def variant_fields(text: str) -> dict:
    """The preset fields a variant (JSON from ASCENTRT_SIM_VARY) sets; PresetError if malformed."""
    return {k: v for k, v in variant_doc(text).items() if not k.startswith(PROGRAM_PREFIX)}
