"""Findings of work that failed or never finished, and of ranks that keep a collective waiting."""

from __future__ import annotations

from collections import Counter, defaultdict

from ..errors import ErrorCode
from ..units import format_ms
from .data import EXIT_MARK, WORK_KINDS, ProfileData, submitting_calls
from .finding import Finding, MIN_GAP_NS, MIN_GAP_VIRTUAL_NS, STRAGGLER_SHARE, format_us, task_ref
from .metrics import DURATION


def stragglers(profile: ProfileData) -> list[Finding]:
    """A rank that reaches its collectives last while the others wait in them, idle: the time
    they waited, and the work its stream did before it arrived."""
    tasks = {t.key: t for t in profile.tasks}
    shared = {k for k, n in Counter(t.key for t in profile.tasks).items() if n > 1}  # (graph replays)
    waited: defaultdict[tuple, int] = defaultdict(int)   # (comm, late rank) -> ns the others waited
    late: defaultdict[tuple, list] = defaultdict(list)   # (comm, late rank) -> [(collective, its part)]
    ranks: dict[int, int] = {}                           # comm -> how many ranks
    submitted_late: defaultdict[tuple, int] = defaultdict(int)  # ... of the waits: the host's
    for coll in profile.collectives:
        keys = [tuple(p[1:]) for p in coll.parts]
        if any(k in shared for k in keys):
            continue  # (a replayed graph's parts share their task's id: which replay is whose?)
        parts = [(p[0], tasks[k]) for p, k in zip(coll.parts, keys) if k in tasks]
        if len(parts) < 2 or coll.state != "done":
            continue
        rank, last = max(parts, key=lambda rp: rp[1].start_ns)
        key = (coll.comm, rank)
        waited[key] += sum(last.start_ns - t.start_ns for _, t in parts)
        # (of that, what the late part would have waited for however fast its stream's work
        # before it: it was not even enqueued before the others had started theirs)
        arrived = min(last.enqueue_ns, last.start_ns)
        submitted_late[key] += sum(max(0, arrived - t.start_ns) for _, t in parts)
        late[key].append((coll, last))
        ranks[coll.comm] = len(parts)
    sim = any(d.backend == "sim" for d in profile.devices)
    part_keys = {tuple(p[1:]) for c in profile.collectives for p in c.parts}
    out = []
    for (comm, rank), ns in waited.items():
        others = ranks[comm] - 1
        each = ns / others  # what each other rank waited, on average
        if each < max(MIN_GAP_VIRTUAL_NS if sim else MIN_GAP_NS, STRAGGLER_SHARE * profile.duration_ns):
            continue
        colls = late[(comm, rank)]
        coll, part = colls[0]
        # (the work before every late part, per collective on average: set against the wait
        # per collective, not the first one's work against the total wait)
        by_stream: defaultdict[tuple, list] = defaultdict(list)  # (a rank may use several streams)
        for _, p in colls:
            by_stream[(p.device, p.stream)].append(p)
        before = [t for ps in by_stream.values() for ts in _work_before_each(profile, ps, part_keys)
                  for t in ts]
        names: Counter[str] = Counter()
        for t in before:
            names[t.name] += t.duration_ns
        top = ", ".join(f"{n} {format_ms(d / len(colls))}" for n, d in names.most_common(3) if d) \
            or "none recorded"
        per_coll = (f" ({format_ms(each / len(colls))} per collective)" if len(colls) > 1 else "")
        ran = "before each, on average," if len(colls) > 1 else "before it,"
        host_ns = submitted_late[(comm, rank)]
        evidence = {"collectives": len(colls), "ranks": others + 1,
                    "waited per other rank": format_ms(each), "late rank's device": part.device,
                    "late rank's stream": part.stream}
        if 2 * host_ns >= ns:  # the host, not the rank's stream, held it back
            evidence["of it, before the late part was submitted"] = format_ms(host_ns / others)
            out.append(Finding(
                "straggler", f"Rank {rank} (device {part.device}) of communicator {comm} arrives last "
                             f"at its collectives: the host submits its work late",
                f"in {len(colls)} collective(s) ({coll.op} #{coll.seq} first) rank {rank} reached the "
                f"collective last; the other {others} rank(s) waited {format_ms(each)} each on average "
                f"in all{per_coll}, their devices idle in it, {format_ms(host_ns / others)} of it "
                f"before the host had even submitted rank {rank}'s part ({ran} its stream ran "
                f"{top}): the host was still in the other ranks' calls",
                "submit every rank's work before any rank's collective, or each rank from a thread "
                "of its own, so that no rank's collective waits for the host to reach the others",
                evidence, [task_ref(t) for t in sorted(before, key=DURATION, reverse=True)[:5]], int(ns)))
            continue
        out.append(Finding(
            "straggler", f"Rank {rank} (device {part.device}) of communicator {comm} arrives last "
                         f"at its collectives: the other ranks wait for it",
            f"in {len(colls)} collective(s) ({coll.op} #{coll.seq} first) rank {rank} reached the "
            f"collective last; the other {others} rank(s) waited {format_ms(each)} each on average "
            f"in all{per_coll}, their devices idle in it; {ran} rank {rank}'s stream ran {top}",
            f"balance the work between the ranks (rank {rank}'s stream has more, or slower, work "
            f"before the collective), or overlap it: queue the collective's inputs first and the "
            f"rest after it",
            evidence, [task_ref(t) for t in sorted(before, key=DURATION, reverse=True)[:5]], int(ns)))
    return out


def _work_before_each(profile: ProfileData, parts: list, part_keys: set) -> list[list]:
    """Per part of `parts` (one stream's), the work tasks of its stream between its previous
    collective part (`part_keys`: every collective's parts), or the start, and it."""
    if not parts:
        return []
    device, stream = parts[0].device, parts[0].stream
    same = sorted((t for t in profile.tasks if t.device == device and t.stream == stream),
                  key=lambda t: (t.task_id, t.start_ns))
    wanted = {id(p): i for i, p in enumerate(parts)}
    out: list[list] = [[] for _ in parts]
    run: list = []
    for t in same:
        i = wanted.get(id(t))
        if i is not None:
            out[i] = run
        if t.key in part_keys:
            run = []
        elif t.kind in WORK_KINDS:
            run.append(t)
    return out


_WAITS = ("event_wait", "notify_wait", "value_wait")
# (not 107019, RT_WAIT_TIMEOUT: a device-side wait's own failure, which a host call only passes
# on; the failed wait is a failed task of the profile)
_GAVE_UP = {ErrorCode.RT_STREAM_SYNC_TIMEOUT: "timed out", ErrorCode.RT_EVENT_SYNC_TIMEOUT: "timed out",
            ErrorCode.RT_DEADLOCK: "found a deadlock"}


def never_finished(profile: ProfileData) -> list[Finding]:
    """Work that never finished: streams stopped at a task that never ended (still blocked or
    running when profiling ended, or a wait cut short when its stream was dropped), and the
    host calls that gave up waiting for it (a timeout, a deadlock)."""
    stuck = [t for t in profile.tasks if t.fate == "unfinished"
             or (t.fate == "dropped" and t.kind in _WAITS)]
    # Each stream stopped at its first unfinished task; the ones queued behind it never started.
    first: dict[tuple, object] = {}
    for t in sorted((t for t in stuck if t.fate == "unfinished"), key=lambda t: t.task_id):
        first.setdefault((t.device, t.stream), t)
    behind = Counter((t.device, t.stream) for t in stuck
                     if t.fate == "unfinished" and first[(t.device, t.stream)] is not t)
    stuck = [t for t in stuck if t.fate != "unfinished" or first[(t.device, t.stream)] is t]
    # (a failed task's error that a synchronization passed on is no wait that gave up: that
    # call waited for all the work; its task's failure is a finding of its own)
    gave_up = [c for c in profile.api_calls if c.error in _GAVE_UP and not c.task_error]
    if not stuck and not gave_up:
        return []
    # (the program's end: an uncaught exception cuts queued work off; it is not stuck)
    ended = next((m for m in profile.marks if m.name.startswith(EXIT_MARK)), None)
    where = []
    for t in stuck:
        if t.fate == "dropped":
            how = f"blocked from {format_us(t.start_ns)} until its stream was dropped at {format_us(t.end_ns)}"
        elif t.kind in _WAITS:
            how = f"blocked from {format_us(t.start_ns)} to the end of the profile"
        else:
            how = f"had not finished (running or waiting for an executor) since {format_us(t.start_ns)}"
        queued = behind.get((t.device, t.stream)) if t.fate == "unfinished" else None
        if queued:
            how += f", and {queued} task(s) queued behind it never started"
        where.append(f"device {t.device} stream {t.stream}: {t.name} (task {t.task_id}) {how}")
    calls = [f"{c.name}{f' of {c.target}' if c.target else ''} {_GAVE_UP[c.error]} ({c.error}) "
             f"at {format_us(c.end_ns)}" for c in gave_up]
    waits = sum(t.kind in _WAITS for t in stuck)
    # An event wait's record was made (a wait refers to the record submitted before it): it
    # waits for the work before that record. A notify or value wait may wait for a record or
    # a write nothing makes.
    recorded = [t for t in stuck if t.kind == "event_wait"]
    unmade = waits - len(recorded)
    cycle = any(c.error == ErrorCode.RT_DEADLOCK for c in gave_up)
    cause = "; ".join(where + calls)
    advice = []
    if unmade or (gave_up and not recorded and not cycle):
        advice.append("a wait that never ends may wait for a record nothing makes: check that the "
                      "notify (or the word, for a value wait) each blocked stream waits on is "
                      "recorded (written), and not another one")
    if cycle or (waits and waits == len(stuck)):
        advice.append("check that no two streams wait for each other (a DeadlockError's message "
                      "names the cycle)")
    if len(stuck) > waits:
        advice.append("work still queued or running when the profile ended was cut off by the "
                      "program's end, not stuck, unless a kernel or host function never returns: "
                      "synchronize before the program ends" + (" and fix the exception that "
                                                               "ended it" if ended else ""))
    if recorded:
        advice.append("an event wait's record was made: it waits for the work queued before that "
                      "record on the recording stream, and ends when that stream gets there; look "
                      "at what held that stream up")
    title = (f"Work never finished: {len(stuck)} stream(s) stopped at a task that did not end"
             if stuck else f"{len(gave_up)} wait(s) for the device gave up")
    evidence: dict[str, object] = {"streams stopped": len(stuck), "of them at a wait": waits,
                                   "tasks queued behind them": sum(behind.values()),
                                   "host waits that gave up": len(gave_up)}
    if ended is not None:
        exception = ended.name[len(EXIT_MARK):]
        evidence["the program ended with"] = exception
        if stuck:  # (a wait among them may only have waited for work the end cut off too)
            title = (f"Work cut off: the program ended with an uncaught exception while "
                     f"{len(stuck)} stream(s) still had work")
            cause = f"{exception} at {format_us(ended.ts_ns)} ended the program; {cause}"
            advice.reverse()  # (the end first: a wait's advice only if one had truly stuck)
    return [Finding("never_finished", title, cause, "; ".join(advice), evidence,
                    [task_ref(t) for t in stuck])]


def failed_tasks(profile: ProfileData) -> list[Finding]:
    """Tasks that raised: the root failure first (the earliest task that failed of itself, not
    a wait failed by another's), with what its stream then dropped and which waits it failed."""
    failed = [t for t in profile.tasks if t.failed]
    if not failed:
        return []
    by_key = {t.key: t for t in profile.tasks}
    dropped = {t.key for t in profile.tasks if t.fate == "dropped"}
    # A wait that failed because its record was dropped (a stream stopped in failure mode
    # STOP) failed of another task's failure: the root is the one that stopped that stream.
    hurt = [t for t in failed if t.released_by is not None and tuple(t.released_by) in dropped]
    roots = sorted((t for t in failed if t not in hurt), key=lambda t: (t.end_ns, t.task_id)) \
        or sorted(failed, key=lambda t: (t.end_ns, t.task_id))
    first = roots[0]
    cause = f"{_task_text(first, profile)} raised {first.error or 'an error'}"
    # (what its stream dropped after it, and the waits those drops failed)
    lost = sorted((by_key[k] for k in dropped if k[:2] == first.key[:2] and k[2] > first.task_id),
                  key=lambda t: t.task_id)
    if lost:
        cause += (f"; its stream stopped (failure mode STOP) and dropped {len(lost)} task(s) after "
                  f"it: " + ", ".join(_task_text(t, profile) for t in lost[:3]))
        lost_keys = {t.key for t in lost}
        victims = [t for t in hurt if tuple(t.released_by) in lost_keys]
        if victims:
            cause += ("; so " + ", ".join(_task_text(t, profile) for t in victims[:3])
                      + " failed (its record never ran) and the work after it ran without it")
    kinds = Counter(t.error.split(":", 1)[0] or "error" for t in failed)
    evidence: dict[str, object] = {"failed tasks": len(failed), "errors": dict(kinds),
                                   "root failure": f"{task_ref(first)}: {first.error or 'an error'}"}
    if hurt:
        evidence["failed because of another task's failure"] = len(hurt)
    ordered = [first] + [t for t in roots[1:]] + hurt
    return [Finding(
        "failed_tasks", f"{len(failed)} task(s) failed", cause,
        "fix the root failure first (the others follow from it); the error was raised at the "
        "next synchronize of its stream (or event, or device) and is in get_last_error(); in "
        "failure mode STOP the stream refused later work",
        evidence, [task_ref(t) for t in ordered])]


def _task_text(t, profile: ProfileData) -> str:
    """'task 2 (decode, a kernel submitted at prog.py:19) on device 0 stream 2'."""
    what = t.name if t.name == t.kind else f"{t.name}, {_article(t.kind)} {t.kind}"
    site = _submitted_at(t, profile)
    return (f"task {t.task_id} ({what}{f' submitted at {site}' if site else ''}) on device "
            f"{t.device} stream {t.stream}")


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _submitted_at(t, profile: ProfileData) -> str:
    """The program line of the call that submitted task `t` ('' where not recorded)."""
    return next((c.site for c in submitting_calls([t], profile)[0] if c.site), "")
