"""Every environment variable ascentrt reads, with its default, in one table."""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import Callable

from .errors import InvalidArgumentError

_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


# The largest byte count a setting takes: what a signed 64-bit size holds (8 EiB); 1e30 or
# inf once got through as a Python int, or as an OverflowError with no variable named.
MAX_SIZE = (1 << 63) - 1


def parse_size(text: str | int, allow_zero: bool = False) -> int:
    """Parse a byte count such as 4096, '512M' or '2G'; raises InvalidArgumentError."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        raw = str(text).strip().upper().removesuffix("B").removesuffix("I")
        unit = raw[-1:] if raw[-1:] in _SUFFIXES else ""
        number = raw[: len(raw) - len(unit)]
        try:
            amount = float(number) * _SUFFIXES[unit]
        except ValueError:
            raise InvalidArgumentError(f"not a size: {text!r} (use bytes or a K/M/G suffix)") from None
        if not math.isfinite(amount):
            raise InvalidArgumentError(f"not a size: {text!r} (a finite number of bytes, at most {MAX_SIZE})")
        if amount > 0 and amount != int(amount):  # (0.5 bytes is no size, nor zero; nor is 1.5)
            raise InvalidArgumentError(f"size must be a whole number of bytes, got {text!r} "
                                       f"({amount:.12g} bytes)")
        value = int(amount) if amount >= 0 else -1  # (-0.5 is below zero, not zero)
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidArgumentError(f"size must be {'0 or more' if allow_zero else 'positive'}, got {text!r}")
    if value > MAX_SIZE:
        raise InvalidArgumentError(f"size must be at most {MAX_SIZE} bytes (8E), got {text!r}")
    return value


def _number(text: str, cast, what: str, ok, rule: str):
    """`cast(text)` when it parses and satisfies `ok`; raises InvalidArgumentError naming `rule`."""
    try:
        value = cast(text)
    except ValueError:
        raise InvalidArgumentError(f"not {what}: {text!r}") from None
    if not ok(value):
        raise InvalidArgumentError(f"must be {rule}, got {text!r}")
    return value


def _count(limit: int) -> Callable[[str], int]:
    """A parser of a positive integer at most `limit` (a count of devices or threads made eagerly)."""
    return lambda text: _number(text, int, "an integer", lambda v: 0 < v <= limit, f"in 1..{limit}")


def _seconds(text: str) -> float:
    """Seconds: positive and finite, at most what a thread can wait for (threading.TIMEOUT_MAX,
    ~292 years); inf or 1e300 once reached a deadline's arithmetic as an OverflowError."""
    return _number(text, float, "a number of seconds", lambda v: 0 < v <= threading.TIMEOUT_MAX,
                   f"positive and at most {threading.TIMEOUT_MAX:.0f}")


def _exec_timeout(text: str) -> float | None:
    """HCCL_EXEC_TIMEOUT: seconds in [0, 2147483647], CANN's range on Atlas A2/A3; 0 (None
    here): never time out."""
    value = _number(text, float, "a number of seconds", lambda v: 0 <= v <= _HCCL_MAX_S,
                    f"in [0, {_HCCL_MAX_S}] (0: never time out)")
    return value or None


_HCCL_MAX_S = 2147483647  # CANN's largest HCCL_EXEC_TIMEOUT


def _pid(text: str) -> str:
    """A process id (digits), or empty."""
    value = str(text).strip()
    if value and not (value.isascii() and value.isdigit() and 0 < int(value) < 1 << 31):
        raise InvalidArgumentError(f"not a process id: {text!r} (set by ascentrt; unset it)")
    return value


def _switch(text: str) -> bool:
    """1/0, true/false, yes/no, on/off."""
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise InvalidArgumentError(f"not a switch: {text!r} (use 1/0, on/off)")


def _size_or_none(text: str) -> int | None:
    """A byte count, 0 allowed; 'none' (or empty) means no limit."""
    if str(text).strip().lower() in ("", "none", "unlimited"):
        return None
    return parse_size(text, allow_zero=True)


def _split_limit(text: str) -> int | None:
    """A positive byte count; 'none' (or empty) means no limit (0 would split nothing: refused)."""
    value = _size_or_none(text)
    if value == 0:
        raise InvalidArgumentError("must be a positive size or none (0 would never split a block)")
    return value


def _log_level(text: str) -> int:
    """0 (debug) .. 4 (off), as CANN's ASCEND_GLOBAL_LOG_LEVEL."""
    return _number(text, int, "a log level", lambda v: 0 <= v <= 4, "0..4")


def _leak_mode(text: str) -> str:
    """warn, sites or off."""
    value = str(text).strip().lower()
    if value not in ("warn", "sites", "off"):
        raise InvalidArgumentError(f"not a leak check mode: {text!r} (use warn, sites or off)")
    return value


def sanitize_mode(text: str) -> str:
    """off (also 0 or empty), warn (also 1 or on), raise or log."""
    value = str(text).strip().lower()
    if value in ("", "0", "off", "false", "no"):
        return "off"
    value = {"1": "warn", "on": "warn", "true": "warn", "yes": "warn"}.get(value, value)
    if value not in ("warn", "raise", "log"):
        raise InvalidArgumentError(f"not a sanitizer mode: {text!r} (use off, warn, raise or log)")
    return value


def _fraction(text: str) -> float:
    """A number in [0, 1]."""
    return _number(text, float, "a fraction", lambda v: 0 <= v <= 1, "in [0, 1]") + 0.0  # (-0.0 -> 0.0)


# backends.KINDS (name -> backend class), handed over by the package as it loads: this module
# may not import the backends itself, since accel reads settings before it decides which build
# of the compiled modules loads, and the simulator is one of them.
BACKEND_KINDS: dict = {}


def _backend_kind(text: str) -> str:
    """A backend name from backends.KINDS."""
    value = str(text).strip().lower()
    if value not in BACKEND_KINDS:
        raise InvalidArgumentError(f"unknown backend {text!r} (known: {', '.join(sorted(BACKEND_KINDS))})")
    return value


def _transport(text: str) -> str:
    """auto, process or mpi."""
    value = str(text).strip().lower()
    if value not in ("auto", "process", "mpi"):
        raise InvalidArgumentError(f"not a transport: {text!r} (use auto, process or mpi)")
    return value


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default, parser and meaning."""

    env: str
    default: str
    parse: Callable[[str], object]
    meaning: str


# On sim the preset gives the executors (a device is the model it names); memory is the exception.
_CPU_ONLY = (" (cpu backend only: sim devices take it from the preset and warn once that this is "
             "ignored; vary the preset with ascentrt whatif / ASCENTRT_SIM_VARY)")
# The settings that _CPU_ONLY marks, checked against the environment when a sim device is made.
CPU_ONLY_SETTINGS = ("ASCENTRT_COMPUTE_UNITS", "ASCENTRT_COPY_ENGINES", "ASCENTRT_HOST_FUNC_THREADS")

SETTINGS: dict[str, Setting] = {s.env: s for s in [
    Setting("ASCENTRT_DEVICES", "1", _count(1024),
            "number of devices, each of the kind ASCENTRT_BACKEND names (cpu or sim)"),
    Setting("ASCENTRT_BACKEND", "cpu", _backend_kind,
            "what each device is: cpu (this machine's cores, threads + numpy) or sim (a simulated "
            "NPU in virtual time, following ASCENTRT_SIM_PRESET)"),
    Setting("ASCENTRT_SIM_PRESET", "ascend910b", str.strip,
            "the hardware model of sim devices: a preset name (ascend910b, ascend310p, h200, or "
            "calibrated once ascentrt calibrate has written it) or the path of a preset .toml file"),
    Setting("ASCENTRT_CACHE_DIR", "", str.strip,
            "where ascentrt calibrate writes the calibrated preset (empty: ~/.cache/ascentrt)"),
    Setting("ASCENTRT_SIM_VARY", "", str.strip,
            "set by ascentrt whatif: the variant this run is, as JSON (preset fields change the "
            "preset; program.NAME knobs are read by ascentrt.sim.variant())"),
    Setting("ASCENTRT_SIM_VARY_READS", "", str.strip,
            "set by ascentrt whatif: a file where the run notes the program knobs it read, so "
            "that a knob nobody reads is reported"),
    Setting("ASCENTRT_DEVICE_MEMORY", "2G", parse_size,
            "memory capacity of each device (bytes, or with a K/M/G suffix; on sim the preset's "
            "memory_bytes unless this is set, and a what-if variant's memory_bytes wins)"),
    Setting("ASCENTRT_COMPUTE_UNITS", str(os.cpu_count() or 1), _count(65536),
            "compute executors per device (kernels, memsets); default: CPU cores" + _CPU_ONLY),
    Setting("ASCENTRT_COPY_ENGINES", "2", _count(65536),
            "copy executors per device (host-to-device, device-to-host, device-to-device)" + _CPU_ONLY),
    Setting("ASCENTRT_HOST_FUNC_THREADS", "1", _count(65536),
            "threads per device that run host functions and callbacks" + _CPU_ONLY),
    Setting("ASCENTRT_DEADLOCK_CHECK_S", "0.25", _seconds,
            "how long a synchronizing call waits without device progress before it checks for a deadlock "
            "(real time: on sim the check comes where the device went idle, at no virtual time)"),
    Setting("ASCENTRT_STALL_WARN_S", "10", _seconds,
            "after this long with no progress and no provable cycle, a waiting call warns what it waits on"),
    Setting("ASCENTRT_MEM_POOL_ENABLE", "1", _switch,
            "caching memory pool behind malloc and malloc_host (0: plain allocator, for debugging)"),
    Setting("ASCENTRT_MEM_POOL_SIZE", "0", lambda t: _size_or_none(t) or 0,
            "device bytes the pool reserves up front (more than the device has is refused, with its capacity)"),
    Setting("ASCENTRT_MEM_POOL_RELEASE_THRESHOLD", "none", _size_or_none,
            "reserved bytes above which wholly free chunks go back to the device at once (none: keep)"),
    Setting("ASCENTRT_MEM_POOL_SPLIT_LIMIT", "none", _split_limit,
            "free blocks larger than this are never split (keeps large blocks whole; none: no limit)"),
    Setting("ASCENTRT_MEM_POOL_GC_THRESHOLD", "0", _fraction,
            "fraction of capacity past which cached free chunks are released before reserving more (0: off)"),
    Setting("ASCENTRT_STRICT_MEMCPY_KIND", "0", _switch,
            "refuse a copy whose explicit kind disagrees with its addresses (0: warn once per call "
            "site and copy in the direction the addresses make, as CANN does)"),
    Setting("ASCEND_GLOBAL_LOG_LEVEL", "3", _log_level,
            "CANN's log threshold for acl.app_log: 0 debug, 1 info, 2 warning, 3 error, 4 off"),
    Setting("ASCEND_SLOG_PRINT_TO_STDOUT", "0", _switch,
            "CANN's switch: acl.app_log lines go to stdout (0: to ASCEND_PROCESS_LOG_PATH, else stderr)"),
    Setting("ASCEND_PROCESS_LOG_PATH", "", str.strip,
            "CANN's log folder: acl.app_log appends to plog-<pid>.log in it (empty: stderr)"),
    Setting("ASCENTRT_LEAK_CHECK", "warn", _leak_mode,
            "memory never freed but reclaimed at a device reset, acl.finalize or exit: warn (a LeakWarning "
            "with sizes), sites (also where each was allocated; costs ~1 us per malloc) or off"),
    Setting("ASCENTRT_CALL_SITES", "0", _switch,
            "note the program line that queued each task, for deadlock, timeout and stuck-stream "
            "reports to name (1; costs ~0.3 us per submitted task)"),
    Setting("ASCENTRT_SANITIZE", "off", sanitize_mode,
            "the stream race sanitizer for the whole program: off, warn (1: a RaceWarning per new "
            "race), raise (the launch completing a race raises RaceError) or log (collect only)"),
    Setting("ASCENTRT_SANITIZE_REPORT", "", str.strip,
            "set by `ascentrt sanitize`: the folder each process of the program writes its race "
            "reports to at exit, as races-<pid>.json (empty: none)"),
    Setting("HCCL_EXEC_TIMEOUT", "1836", _exec_timeout,
            "HCCL's setting: seconds a rank's collective waits for the other ranks before it fails "
            "with E_TIMEOUT (virtual seconds on sim), in [0, 2147483647] as CANN's on Atlas A2/A3; "
            "0: never time out"),
    Setting("HCCL_CONNECT_TIMEOUT", "120", _seconds,
            "HCCL's setting: seconds comm_init_root_info waits for every rank to join (positive: "
            "CANN's range is [120, 7200], shorter ones are allowed here)"),
    Setting("ASCENTRT_HCCL_TRANSPORT", "auto", _transport,
            "how hccl.comm_init_root_info's ranks meet: process (threads of this process), mpi "
            "(processes, through mpi4py) or auto (mpi when an MPI launcher started several "
            "processes or the root info comes from another process)"),
    Setting("ASCENTRT_PURE_PYTHON", "0", _switch,
            "run the Python source of the modules `make accel` compiles, even where their "
            "compiled build exists (1: the reference path; read once, at import: a bad value "
            "runs the source, and the runtime's first use refuses it)"),
    Setting("ASCENTRT_USAGE_PUBLISH", "1", _switch,
            "publish this process's device usage (memory, streams) for `ascentrt info` in other "
            "processes: a small file rewritten at most once a second (0: off)"),
    Setting("ASCENTRT_USAGE_DIR", "", str.strip,
            "the folder of those usage files, one per process (empty: ascentrt-usage-<uid> in "
            "the temp dir); it must be private to the user (mode 0700), else nothing is published "
            "or read there and a warning says so"),
    Setting("ASCENTRT_PROFILE", "", str.strip,
            "profile the whole program into this folder (trace, CSV, HTML report; empty: off); "
            "one that holds an earlier profile is refused"),
    Setting("ASCENTRT_PROFILE_PID", "", _pid,
            "set by ascentrt: the process writing ASCENTRT_PROFILE (processes it starts or forks "
            "write to child-<pid>/ inside it, and its profile merges them)"),
]}


# The settings only hccl's calls read: a bad value fails the call that reads it (E_PARA),
# not every program's start (check_all skips them).
HCCL_SETTINGS = ("HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT", "ASCENTRT_HCCL_TRANSPORT")


# Names the project's own tools read outside the package (the benchmarks' quick mode).
TOOL_SETTINGS = ("ASCENTRT_BENCH_QUICK",)


def unknown_settings() -> list[tuple[str, str | None]]:
    """(name, the known setting it is nearest to, or None) for each ASCENTRT_* variable in the
    environment that no setting reads (a typo is otherwise ignored without a word)."""
    import difflib
    known = [*SETTINGS, *TOOL_SETTINGS]
    found: list[tuple[str, str | None]] = []
    for name in sorted(os.environ):
        if name.upper().startswith("ASCENTRT_") and name not in known:
            near = difflib.get_close_matches(name.upper(), known, n=1, cutoff=0.8)
            found.append((name, near[0] if near else None))
    return found


def is_set(env: str) -> bool:
    """Whether setting `env` was given in the environment (not only defaulted)."""
    return env in os.environ


def get(env: str):
    """Return the parsed value of setting `env` from the environment or its default."""
    setting = SETTINGS[env]
    raw = os.environ.get(env, setting.default)
    try:
        return setting.parse(raw)
    except InvalidArgumentError as exc:
        if not raw.strip():  # (set but empty, where empty means nothing of its own: the default,
            return setting.parse(setting.default)  # as for most settings that take empty)
        raise InvalidArgumentError(f"{env}={raw!r}: {exc.message}") from None


def check_all() -> None:
    """Parse every setting but HCCL_SETTINGS (InvalidArgumentError naming the first bad one):
    the runtime does so as its devices are made, before any work is queued, where a setting
    read later would otherwise fail first in the middle of a program (a synchronize's
    ASCENTRT_STALL_WARN_S). HCCL's are read by the hccl calls, which refuse a bad one."""
    for env in SETTINGS:
        if env not in HCCL_SETTINGS:
            get(env)


def table() -> list[tuple[str, str, str]]:
    """The settings as (variable, default, meaning) rows (the README's table is checked against it)."""
    return [(s.env, s.default, s.meaning) for s in SETTINGS.values()]
