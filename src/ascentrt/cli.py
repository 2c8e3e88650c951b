"""The `ascentrt` command: `ascentrt demo`, `info`, `prof`, `report`, `whatif` and `calibrate`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Any


def _info_preset(name: str, as_json: bool = False) -> int:
    from .backends.presets import FIELDS, describe, load
    p = load(name)
    if as_json:  # (the numbers themselves, not the text the table shows)
        fields = {field: {"value": p.values[field], "unit": FIELDS[field][2] or None,
                          "kind": p.sources[field][0], "source": p.sources[field][1]}
                  for field in FIELDS}
        print(json.dumps({"name": p.name, "description": p.description, "file": p.path,
                          "fields": fields}, indent=2))
        return 0
    print(f"preset {p.name}: {p.description}\nfile: {p.path}\n")
    rows = describe(p)
    w = max(len(r[0]) for r in rows)
    print(f"{'field':<{w}}  {'value':>18}  {'unit':<8}{'kind':<12}source")
    for field, value, unit, kind, source in rows:
        print(f"{field:<{w}}  {value:>18}  {unit:<8}{kind:<12}{source}")
    return 0


def _info(args) -> int:
    if args.preset:
        return _info_preset(args.preset, args.json)
    _use_backend(args)
    import os
    import ascentrt
    from .units import format_bytes
    from .usage import can_read, folder as usage_folder, processes
    # Looking is not using: the devices made here publish no file. (The setting is read once,
    # when they are made; it is put back after, for whatever this process starts next.)
    previous = os.environ.get("ASCENTRT_USAGE_PUBLISH")
    os.environ["ASCENTRT_USAGE_PUBLISH"] = "0"
    try:
        count = ascentrt.device_count()
    finally:
        if previous is None:
            del os.environ["ASCENTRT_USAGE_PUBLISH"]
        else:
            os.environ["ASCENTRT_USAGE_PUBLISH"] = previous
    rows: dict[int, dict[str, Any]] = {}
    for i in range(count):
        d = ascentrt.Device(i)
        free, total = d.mem_info()
        p = d.properties
        rows[i] = {"device": i, "name": p.name, "backend": p.backend, "preset": p.preset,
                   "memory_used": total - free,
                   "memory_total": total, "compute_units": p.compute_units,
                   "copy_engines": p.copy_engines, "streams": len(d.streams()), "processes": []}
    for proc in processes():
        for u in proc.devices:
            if u.memory_reserved or u.memory_used or u.streams:  # holds something there
                # (a device this process does not have: the same fields, unknown ones None)
                row = rows.setdefault(u.device, {"device": u.device, "name": None,
                                                 "backend": None, "preset": None,
                                                 "memory_used": None, "memory_total": None,
                                                 "compute_units": None, "copy_engines": None,
                                                 "streams": None, "processes": []})
                row["processes"].append({"pid": proc.pid, "program": proc.program,
                                         "backend": proc.backend,
                                         "memory_used": u.memory_used,
                                         "memory_reserved": u.memory_reserved,
                                         "streams": u.streams})
    if args.json:
        print(json.dumps([rows[i] for i in sorted(rows)], indent=2))
        return 0
    print("This process's devices (each process has devices of its own):")
    header = (f"{'Device':<7}{'Name':<18}{'Backend':<9}{'Memory used / total':<28}"
              f"{'Compute':<9}{'Copy':<6}{'Streams'}")
    print(header)
    print("-" * len(header))
    for r in rows.values():
        if r["name"] is not None:
            mem = f"{format_bytes(r['memory_used'])} / {format_bytes(r['memory_total'])}"
            print(f"{r['device']:<7}{r['name']:<18}{r['backend']:<9}{mem:<28}"
                  f"{r['compute_units']:<9}{r['copy_engines']:<6}{r['streams']}")
    print("\nHot paths: " + ascentrt.accel.describe())
    users = [(i, p) for i in sorted(rows) for p in rows[i]["processes"]]
    if not users:
        print("\nNo other process uses these devices." if can_read() else
              f"\nOther processes' use could not be read: {usage_folder()} is not this user's "
              f"alone (see the warning; chmod 700 it).")
        return 0
    header = (f"{'Device':<7}{'PID':<9}{'Backend':<20}{'Memory used / reserved':<31}"
              f"{'Streams':<9}Program")
    print(f"\nOther processes using ascentrt on this machine, each on its own devices:\n"
          f"{header}\n{'-' * len(header)}")
    for i, p in users:
        mem = f"{format_bytes(p['memory_used'])} / {format_bytes(p['memory_reserved'])}"
        print(f"{i:<7}{p['pid']:<9}{p['backend'] or '?':<20}{mem:<31}{p['streams']:<9}"
              f"{p['program']}")
    return 0


def _use_backend(args) -> None:
    """--backend / --preset: set before any device exists (a process has one backend)."""
    import os
    if getattr(args, "backend", None):
        os.environ["ASCENTRT_BACKEND"] = args.backend
    if getattr(args, "preset", None):
        from .backends.presets import load
        load(args.preset)  # one clear error for a bad name or file, before anything runs
        os.environ["ASCENTRT_SIM_PRESET"] = args.preset


DEMO_OUT = "ascentrt-demo-profile"  # the demo's own folder: each run replaces it


def _demo(args) -> int:
    if args.preset and args.backend == "cpu" and args.no_compare:
        from .errors import InvalidArgumentError
        raise InvalidArgumentError("--preset is the hardware model of the run on the sim backend, "
                                   "which --no-compare leaves out: drop one of them, or use "
                                   "--backend sim")
    _use_backend(args)
    from . import profiler
    from .demo import PIPELINE_RANGE, check_batches, main as demo_main
    from .errors import OutOfMemoryError
    check_batches(args.batches)  # (before the profile starts: no folder for a refused run)
    compare = None if args.backend == "sim" or args.no_compare else (args.preset or "ascend910b")
    # (its own default folder is the demo's each run: a second `ascentrt demo` after `make demo`
    # replaces it; a folder the user names keeps what it holds unless --force)
    overwrite = args.force or args.out is None
    if args.out is None:
        args.out = DEMO_OUT
    made = not os.path.exists(args.out)
    try:
        with profiler.profile(args.out, overwrite=overwrite) as prof:
            code = demo_main(args.batches, compare_preset=compare)
    except OutOfMemoryError:
        # (refused part-way, the memory having shrunk since check_batches: a retry must not
        # find the folder of a run that did not happen)
        if made:
            shutil.rmtree(args.out, ignore_errors=True)
        raise
    # The pipelines' own time: around them the host stages inputs and checks results, which
    # would read as a host-bound device.
    findings = prof.diagnose(PIPELINE_RANGE)
    print(f"profile written to {args.out}/ (report.html, summary.txt, trace.json, CSV summaries: "
          f"the whole run, the demo's set-up and checks included; ascentrt report {args.out} "
          f"--range {PIPELINE_RANGE} repeats the timed pipelines' diagnosis); "
          f"{len(findings)} finding(s) in the timed pipelines{':' if findings else ''}")
    for f in findings:
        print(f"  - {f.title}")
    return code


PROGRESS_EVERY_S = 10.0  # without a terminal, a progress line this often (--progress)
LINGER_WAIT_S = 5.0  # how long `prof` waits for processes of the program that outlive it


def _prof(args) -> int:
    import os
    import signal
    import time

    from .errors import ErrorCode, InvalidArgumentError
    from .profiler.data import RUNNING, part_path
    from .profiler.folders import (PROGRESS_FILE, claim, clear_leftovers, missing, refusals,
                                   still_writing, writing_at_exit)
    from .profiler.export import OUTPUT_FILES, TRACE_FILE
    from .profiler.summary import print_summary
    from .validate import program_command, program_env, read_small_file, start_program, wait_program
    command = program_command(args.command, "ascentrt prof [-o DIR] [--force] [--range NAME] -- python prog.py [args]")
    if args.progress is not None and not 0.01 <= args.progress < float("inf"):  # (NaN too)
        raise InvalidArgumentError(f"--progress takes seconds >= 0.01 between progress lines, "
                                   f"got {args.progress}")
    made = not os.path.exists(args.out)
    out = claim(os.path.abspath(args.out), args.force)  # (before the run, not after it)
    # This process holds the folder: the program and every process it starts that imports
    # ascentrt write a part (child-<pid>/), assembled into one profile when the program exits.
    env = dict(os.environ, ASCENTRT_PROFILE=out, ASCENTRT_PROFILE_PID=str(os.getpid()))
    try:
        child = start_program(command, program_env(env))
    except Exception:
        if made and not os.listdir(out):  # (a program that never started leaves no folder)
            os.rmdir(out)
        raise
    started = time.monotonic()
    tty = sys.stderr.isatty()
    every = args.progress if args.progress is not None else 1.0 if tty else PROGRESS_EVERY_S
    last_line = [started]

    def progress() -> None:
        now = time.monotonic()
        if args.quiet or now - last_line[0] < every:
            return
        last_line[0] = now
        line = f"ascentrt prof: running for {now - started:.0f} s"
        try:
            state = json.loads(read_small_file(os.path.join(part_path(out, child.pid), PROGRESS_FILE),
                                               "the progress file", 1 << 16))
            line += f", {state['tasks']} tasks, {state['api_calls']} API calls recorded"
        except (OSError, InvalidArgumentError, ValueError, KeyError, TypeError):
            pass
        print(f"\r{line}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    code, passed, shared = wait_program(child, min(1.0, every), progress,
                                        lambda: writing_at_exit(out, child.pid))
    if passed is not None:
        print(f"ascentrt prof: interrupted ({signal.Signals(passed).name}): passed on to the "
              f"program, which exited with {code}", file=sys.stderr)
    elif shared is not None:
        print(f"ascentrt prof: interrupted ({signal.Signals(shared).name}, sent to the process "
              f"group: the program got it too, and exited with {code})", file=sys.stderr)
    if tty and not args.quiet and time.monotonic() - started >= 1.0:
        print(file=sys.stderr)
    # Processes the program started that outlive it: their parts are waited for a while, and
    # those still running after it are named (report --rewrite adds them once written).
    waited_until = time.monotonic() + LINGER_WAIT_S
    while still_writing(out) and time.monotonic() < waited_until:
        time.sleep(0.1)
    # (those that have not imported ascentrt yet too: they are found by their environment)
    for m in missing(out, os.getpid(), exclude=(child.pid,)):
        if m.state == RUNNING:
            print(f"ascentrt prof: process {m.pid} of the program ({_command_text(m.command)}) "
                  f"was still running after it exited: its part is not included (once it has "
                  f"written one, ascentrt report --rewrite {args.out} adds it)", file=sys.stderr)
    unreadable: list[str] = []
    started_part = os.path.isdir(part_path(out, child.pid))  # (it imported ascentrt: see below)
    prof = _assemble_held(out, child.pid, command, unreadable)
    if prof is None and unreadable:  # written, but not readable: say what failed (kept to look at)
        error = InvalidArgumentError(f"a profile was written into {out} but cannot be read "
                                     f"(the program exited with {code}): {unreadable[0]}",
                                     code=ErrorCode.INVALID_FILE)
        if not code:
            raise error
        print(f"ascentrt: error: {_in_words(error)}", file=sys.stderr)
        return code
    if prof is None:
        refused = refusals(out)
        clear_leftovers(out)  # (nothing of this run may count as a profile)
        if made and not os.listdir(out):
            os.rmdir(out)
        if refused:
            why = f"ascentrt refused the program's settings at start: {refused[0]}"
        elif started_part:  # (it imported ascentrt and started its part: not the import's fault)
            why = ("the program imported ascentrt and started its profile, but ended before "
                   "writing it" + (f" ({_ended_by(code)})" if code else ""))
        else:
            why = ("it never started a profile: it must import ascentrt" +
                   (f" (it {_ended_by(code)})" if code else ""))
        error = InvalidArgumentError(f"no profile was written (the program exited with {code}): {why}",
                                     code=ErrorCode.INVALID_FILE)
        if not code:
            raise error
        print(f"ascentrt: error: {_in_words(error)}", file=sys.stderr)
        return code  # (the program's own failure is the one to pass on)
    if code:
        print(f"ascentrt prof: the program exited with code {code}", file=sys.stderr)
    try:
        _print_summary(prof, args.range)
    except InvalidArgumentError as exc:  # a mistyped --range: the run and its profile still count
        # (said as the whole run's diagnosis, not the range's: "no problems" must not read as
        # the range's verdict); the command then fails, unless the program failed first
        print_summary(prof, scope=f"the whole run (no range {args.range!r} in it)")
        print(f"ascentrt: error: {_in_words(exc)}", file=sys.stderr)
        code = code or 1
    # (what is there: a program killed while it wrote its profile left some out)
    there = [name for name in OUTPUT_FILES if os.path.isfile(os.path.join(out, name))]
    print(f"\noutputs in {out}: " + ", ".join(
        name + (" (Perfetto / chrome://tracing)" if name == TRACE_FILE else "") for name in there))
    if len(there) < len(OUTPUT_FILES):
        print(f"ascentrt prof: the profile in {out} lacks " +
              ", ".join(name for name in OUTPUT_FILES if name not in there) +
              ": the program was ended while it wrote them", file=sys.stderr)
    return code


def _assemble_held(out: str, pid: int, command: list, unreadable: list[str]):
    """folders.assemble for `ascentrt prof`, which a SIGINT, SIGTERM or SIGHUP does not cut:
    one that comes meanwhile is held until the profile is written, then does what it does
    (ends this command, by default); a second of the same kind comes at once."""
    import signal

    from . import interrupts
    from .profiler.folders import assemble
    def tell(signum: int) -> None:
        print(f"ascentrt prof: {signal.Signals(signum).name} came while the profile was "
              f"assembled in {out}: it was held until the profile was written",
              file=sys.stderr, flush=True)
    held = interrupts.hold_ending()
    try:
        return assemble(out, pid, command, unreadable, owner=os.getpid())
    finally:
        interrupts.release_ending(held, tell)


def _command_text(command: list) -> str:
    """A process's command line in one line (a `-c` program's lines joined), 120 chars at most."""
    text = " ".join(command).replace("\n", "; ") or "command not known"
    return text if len(text) <= 120 else text[:117] + "..."


def _ended_by(code: int) -> str:
    """How a program that exited with shell status `code` (nonzero) ended, in words."""
    import signal
    if code > 128:
        try:
            return f"was ended by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    return f"exited with {code}"


def _print_summary(prof, range_name: str | None) -> None:
    """The summary of `prof`, its diagnosis limited to the user range `range_name` if given."""
    from .profiler.scope import within
    from .profiler.summary import print_summary
    if range_name is None:
        print_summary(prof)
        return
    scope = within(prof, range_name)  # (an unknown name: the error lists the known ones)
    print_summary(prof, scope.diagnose(), scope=scope.label())


def _latest_profile() -> str:
    """The newest profile folder in the current directory (what `prof` and `demo` write)."""
    import glob
    import os

    from .errors import ErrorCode, InvalidArgumentError
    from .profiler.data import DATA_FILE
    found = sorted(glob.glob(os.path.join("*", DATA_FILE)), key=os.path.getmtime)
    if not found:
        raise InvalidArgumentError("no profile folder here: give its path (ascentrt report DIR), "
                                   "or make one with ascentrt prof -- python prog.py",
                                   code=ErrorCode.INVALID_FILE)
    return os.path.dirname(found[-1])


def _report(args) -> int:
    from . import profiler
    if args.folder is None:
        args.folder = _latest_profile()
        print(f"ascentrt report: {args.folder}/", file=sys.stderr)
    prof = profiler.load(args.folder)
    if args.rewrite:  # (with the parts written since: a process that outlived the program's run)
        from .profiler.folders import missing, parts
        from .usage import process_alive
        prof.parts = [p for p in parts(args.folder) if p.pid != prof.pid] or prof.parts
        # (a process named as still running that has started no part since: kept while it runs)
        lacking = {m.pid: m for m in missing(args.folder, exclude=(prof.pid,))}
        written = {p.pid for p in prof.parts}
        lacking.update({m.pid: m for m in prof.missing if m.pid not in lacking
                        and m.pid not in written and process_alive(m.pid)})
        prof.missing = [lacking[pid] for pid in sorted(lacking)]
        prof.save(args.folder)
    _print_summary(prof, args.range)
    return 0


def _version() -> str:
    from . import __version__
    return __version__


RACES_EXIT_CODE = 66  # as ThreadSanitizer: the program ran, and races were found


def _sanitize(args) -> int:
    import os
    import tempfile
    import time

    from .sanitizer import parse_mode, read_reports, unreported
    from .usage import process_alive
    from .validate import program_command, program_env, start_program, wait_program
    command = program_command(args.command, "ascentrt sanitize [--mode M] -- python prog.py")
    mode = parse_mode(args.mode)
    with tempfile.TemporaryDirectory() as tmp:
        # (a folder: each process of the program, those it starts included, writes its own file)
        env = dict(os.environ, ASCENTRT_SANITIZE=mode, ASCENTRT_SANITIZE_REPORT=tmp)
        child = start_program(command, program_env(env))
        code = wait_program(child).code  # (a signal sent to this command alone: passed on)
        # Processes of the program that outlive it: waited for a while, as `prof` does.
        waited_until = time.monotonic() + LINGER_WAIT_S
        while any(process_alive(r["pid"]) for r in unreported(tmp)) and time.monotonic() < waited_until:
            time.sleep(0.1)
        found, silent = read_reports(tmp), unreported(tmp)
    reported = {r["pid"] for r in found}  # (one that reported as it was killed: its report holds all)
    silent = [r for r in silent if r["pid"] not in reported]
    # A process that did not report still counted its races in its progress file as it found
    # them: they are named (lost with its report, not with its count).
    races = [(r, text) for r in found + [r for r in silent if r["races"]] for text in r["races"]]
    unknown = [r for r in silent if r["races"] is None or process_alive(r["pid"])]

    def named(r: dict) -> str:
        # (the script by its name: a long folder path must not cut it off)
        words = " ".join([os.path.basename(a) if i == 0 else a for i, a in enumerate(r["command"])])
        return f"process {r['pid']}: {words[:80]}"

    for r in silent:  # (never "no races" for a process that could not say)
        counted = r["races"]
        if process_alive(r["pid"]):
            why = (f"was still running {LINGER_WAIT_S:.0f} s after the program exited (it prints its "
                   f"races itself as it ends; {len(counted or ())} found so far)")
        elif counted is None:
            said = ("its races are lost (log mode says none as they are found)" if mode == "log" else
                    "races it found were printed as it ran, if any")
            why = f"ended without writing its report (killed by a signal, or os._exit): {said}"
        else:
            why = (f"ended without writing its report (killed by a signal, or os._exit); it counted "
                   f"{len(counted)} race(s) as it ran" + (", named below" if counted else ""))
        print(f"ascentrt sanitize: {named(r)} {why}", file=sys.stderr)
    if not races:
        if unknown:  # (not known race-free: never "no races found", exit 0)
            print(f"ascentrt sanitize: no races found in the processes that reported; "
                  f"{len(unknown)} could not say whether they raced", file=sys.stderr)
            return code or RACES_EXIT_CODE
        print(f"ascentrt sanitize: no races found"
              f"{f' ({len(silent)} process(es) did not report, and counted none)' if silent else ''}",
              file=sys.stderr)
        return code
    where = {r["pid"] for r, _ in races}
    print(f"ascentrt sanitize: {len(races)} race(s) found"
          f"{f' in {len(where)} processes' if len(where) > 1 else ''}:", file=sys.stderr)
    for r, text in races:
        # (a race of another process than the program's: named, with its command line)
        who = "" if r["pid"] == child.pid else f"[{named(r)}] "
        if r["pid"] not in reported:
            who += "(counted as found, its report lost) "
        print(f"  - {who}{text}", file=sys.stderr)
    return code or RACES_EXIT_CODE


def _run(args) -> int:
    """`ascentrt run`: the program on the backend asked for, its `import acl` this facade."""
    import os

    from .validate import program_command, program_env, start_program, wait_program
    command = program_command(args.command, "ascentrt run [--backend cpu|sim] [--preset P] -- "
                                            "python prog.py [args]")
    if args.preset:  # (a preset models the sim backend: it asks for it, and is no cpu's)
        if args.backend == "cpu":
            from .errors import InvalidArgumentError
            raise InvalidArgumentError("--preset is the sim backend's hardware model: use "
                                       "--backend sim, or leave --backend out")
        args.backend = "sim"
    _use_backend(args)  # (in this process's environment, which the program inherits)
    child = start_program(command, program_env(dict(os.environ), always=True))
    return wait_program(child).code  # (a signal sent to this command alone: passed on)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `ascentrt` command; errors print one line unless --debug."""
    parser = argparse.ArgumentParser(prog="ascentrt", description="ascentrt accelerator runtime")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version=f"ascentrt {_version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="subcommand", required=True)
    p_demo = sub.add_parser("demo", parents=[common],
                            help="run the multi-stream pipeline demo and write its profile report",
                            description="Run the host -> device -> compute -> host pipeline on 1 "
                                        "stream, then on 3, and write its profile; on cpu, the "
                                        "same program on the sim backend beside it.")
    p_demo.add_argument("--batches", type=int, default=12,
                        help="batches each pipeline run moves (default: 12)")
    p_demo.add_argument("-o", "--out", default=None,
                        help=f"folder for the profile (default: {DEMO_OUT}, replaced at each run)")
    p_demo.add_argument("--backend", choices=("cpu", "sim"), default="cpu",
                        help="cpu (this machine, then the same program on sim beside it) or sim")
    p_demo.add_argument("--preset", help="the sim backend's hardware model (name or .toml path)")
    p_demo.add_argument("--no-compare", action="store_true",
                        help="on cpu, skip the side-by-side run on the sim backend")
    p_demo.add_argument("--force", action="store_true",
                        help="replace a profile already in a folder given with -o")
    p_demo.set_defaults(fn=_demo)
    p_info = sub.add_parser("info", parents=[common], help="devices, memory, executors and streams",
                            description="Devices, memory, executors and streams, this process's "
                                        "and those of other live ascentrt processes; with "
                                        "--preset, a sim preset's numbers and their sources.")
    p_info.add_argument("--json", action="store_true", help="machine-readable output")
    p_info.add_argument("--backend", choices=("cpu", "sim"), help="the devices' backend")
    p_info.add_argument("--preset", help="print a sim preset's numbers and their sources")
    p_info.set_defaults(fn=_info)
    p_prof = sub.add_parser(
        "prof", parents=[common],
        help="run a program with profiling on: ascentrt prof -- python x.py",
        description="Run a program with ASCENTRT_PROFILE set, then print the summary and the "
                    "diagnosis. 'python' / 'python3' as the command means this interpreter.")
    p_prof.add_argument("-o", "--out", default="ascentrt-profile",
                        help="output folder (default: ascentrt-profile); one that holds a "
                             "profile is refused without --force")
    p_prof.add_argument("--force", action="store_true",
                        help="replace a profile already in the output folder")
    p_prof.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p_prof.add_argument("--progress", type=float, metavar="SECONDS",
                        help="seconds between progress lines (default: 1 on a terminal, else 10)")
    p_prof.add_argument("--range", metavar="NAME",
                        help="limit the diagnosis to the user range NAME (ascentrt.profiler.range)")
    p_prof.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- the program and its arguments")
    p_prof.set_defaults(fn=_prof)
    p_run = sub.add_parser(
        "run", parents=[common],
        help="run a program on ascentrt, `import acl` giving the pyACL facade: ascentrt run -- "
             "python x.py",
        description="Run a program (a pyACL one unchanged: its `import acl` loads ascentrt's "
                    "facade) on the backend asked for. Exits with the program's code. "
                    "'python' / 'python3' as the command means this interpreter.")
    p_run.add_argument("--backend", choices=("cpu", "sim"), help="the devices' backend")
    p_run.add_argument("--preset", help="the sim backend's hardware model (name or .toml path; "
                                        "implies --backend sim)")
    p_run.add_argument("command", nargs=argparse.REMAINDER, help="-- the program and its arguments")
    p_run.set_defaults(fn=_run)
    p_san = sub.add_parser(
        "sanitize", parents=[common],
        help="run a program with the race sanitizer on: ascentrt sanitize -- python x.py",
        description="Run a program with ASCENTRT_SANITIZE set, then list the races it found. "
                    f"Exits with the program's code, or {RACES_EXIT_CODE} when it exited 0 but "
                    "races were found.")
    # (no argparse choices: a bad mode gets the setting's own one-line error and code)
    p_san.add_argument("--mode", default="warn",
                       help="warn (default): a RaceWarning per new race; raise: the launch "
                            "completing a race raises RaceError; log: only the list at exit")
    p_san.add_argument("command", nargs=argparse.REMAINDER, help="-- the program and its arguments")
    p_san.set_defaults(fn=_sanitize)
    p_whatif = sub.add_parser(
        "whatif", parents=[common],
        help="run a program on the simulated NPU once per variant: ascentrt whatif --vary "
             "copy_engines_h2d=1,2 -- python x.py",
        description="Run a program on the sim backend once per combination of the --vary values "
                    "and compare total virtual time, busy shares and the critical path. A name is "
                    "a preset field (see ascentrt info --preset NAME) or program.NAME, a knob the "
                    "program reads with ascentrt.sim.variant(). Each variant's output is in "
                    "variant-N/stdout.txt and stderr.txt; Ctrl-C keeps the finished ones.")
    p_whatif.add_argument("--preset", help="preset name or .toml path (default: "
                                           "ASCENTRT_SIM_PRESET, else ascend910b)")
    p_whatif.add_argument("--timeout", metavar="SECONDS",
                          help="real seconds a variant may run; past them it is killed with its "
                               "process group and reported as timed out (default: no limit)")
    p_whatif.add_argument("--vary", action="append", default=[], metavar="NAME=V1,V2",
                          help="a field and its values (repeat for a grid)")
    p_whatif.add_argument("-o", "--out", default="ascentrt-whatif",
                          help="output folder: whatif.csv, whatif.html, a profile per variant "
                               "(default: ascentrt-whatif)")
    p_whatif.add_argument("command", nargs=argparse.REMAINDER, help="-- the program and its arguments")
    p_whatif.set_defaults(fn=lambda args: __import__("ascentrt.whatif", fromlist=["main"]).main(args))
    p_cal = sub.add_parser("calibrate", parents=[common],
                           help="measure this machine's cpu backend and write the 'calibrated' preset",
                           description="Measure this machine's cpu backend (copy bandwidths, "
                                       "kernel rates, launch, sync and hand-over costs) and write "
                                       "a preset with which the sim backend predicts it.")
    p_cal.add_argument("-o", "--out", help="preset file to write (default: the one the preset "
                                           "name 'calibrated' reads; another is used by its path)")
    p_cal.set_defaults(fn=lambda args: __import__("ascentrt.calibrate", fromlist=["main"]).main(args))
    p_report = sub.add_parser("report", parents=[common],
                              help="print the summary and diagnosis of a profile folder",
                              description="Print the summary and the diagnosis of a profile "
                                          "folder (ascentrt prof's, or ASCENTRT_PROFILE's).")
    p_report.add_argument("folder", nargs="?",
                          help="profile folder (default: the newest one in this directory)")
    p_report.add_argument("--rewrite", action="store_true",
                          help="also write the folder's trace, CSVs and HTML report again")
    p_report.add_argument("--range", metavar="NAME",
                          help="limit the diagnosis to the user range NAME (ascentrt.profiler.range)")
    p_report.set_defaults(fn=_report)
    args, extra = parser.parse_known_args(argv)
    if extra:  # (said with the subcommand's usage, not the top-level one)
        sub.choices[args.subcommand].error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.fn(args)
    except BrokenPipeError:  # (`ascentrt info | head`: the reader had enough; say nothing more)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # (as a program killed by SIGPIPE)
    except Exception as exc:  # one clear line for users; --debug for the traceback
        if args.debug:
            raise
        print(f"ascentrt: error: {_in_words(exc)}", file=sys.stderr)
        return 1


def _in_words(exc: Exception) -> str:
    """An error as a user reads it: the cause first, a runtime code after it."""
    from .backends.presets import PresetError
    from .errors import AscentError, ErrorCode, os_cause
    if isinstance(exc, AscentError):
        return exc.in_words()
    if isinstance(exc, PresetError):  # (the backends know no runtime codes: a bad argument's)
        return f"{exc} ({int(ErrorCode.INVALID_PARAM)} INVALID_PARAM)"
    if isinstance(exc, OSError):  # (a file the command was given: INVALID_FILE's code)
        if exc.filename:
            return f"{exc.filename}: {os_cause(exc)} ({int(ErrorCode.INVALID_FILE)} INVALID_FILE)"
        return os_cause(exc)
    return str(exc) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
