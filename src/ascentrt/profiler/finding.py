"""A diagnosed problem (Finding) and the thresholds the diagnosis compares against."""

from __future__ import annotations

from dataclasses import dataclass, field


# Thresholds of the diagnosis (named so that a finding can say what it compared against).
MIN_WORK_TASKS = 20           # fewer device tasks than this: too little to judge utilization
MIN_WINDOW_NS = 5_000_000     # ... or a busy window shorter than 5 ms, where time is real
MIN_WINDOW_VIRTUAL_NS = 1_000  # ... in virtual time (sim), which has no jitter: one idle
                               # stretch worth a finding (MIN_GAP_VIRTUAL_NS) fits
STARVED_UTILIZATION = 0.5     # device busy less than half the time
MIN_GAP_NS = 20_000           # idle stretches shorter than 20 us are scheduling noise ...
MIN_GAP_VIRTUAL_NS = 1_000    # ... where time is real; in virtual time (sim) none is noise
SMALL_TASK_NS = 50_000        # median device task under 50 us ...
MIN_SMALL_TASKS = 100         # ... over at least this many tasks
STREAMS_PER_EXECUTOR = 2      # more streams than 2 per executor ...
FEW_TASKS_PER_STREAM = 8      # ... each with a handful of tasks: overhead, not concurrency
MIN_STREAM_CHURN = 10         # streams created and destroyed ...
STREAM_CHURN_SHARE = 0.1      # ... costing over 10% of the device work they carried
MIN_STREAM_CHURN_NS = 100_000  # ... and at least 0.1 ms in all (0 >= 10% of 0 once fired on sim,
                               # where making a stream is modelled as free)
MIN_DEVICE_SYNCS = 5          # device-wide synchronizations between submissions
MIN_NEEDLESS_SYNCS = 10       # synchronizations that found the work already done ...
LONG_DONE_NS = 5_000_000      # ... work complete for at least 5 ms before the call
OVERLAP_SHARE = 0.1           # copies and compute overlapping less than 10% of the smaller
MIN_STAGE_SHARE = 0.1         # ... when each takes at least 10% of the device's busy time
COPY_BOUND_SHARE = 0.5        # copies over half the critical path: the run is copy-bound
PEAK_SHARE = 0.9              # peak allocation at 90% of capacity
FRAGMENTED = 0.5              # largest free range under half of the free memory
MIN_FRAGMENT_FREE = 1 << 20   # ... with at least 1 MiB free
CACHED_SHARE = 0.5            # a pool caching free blocks worth half the device (less is
                              # what a caching pool is for)

SUBMIT_APIS = ("launch", "launch_host_func", "memcpy_async", "memcpy2d_async", "memset_async",
               "Graph.launch", "hccl.all_reduce", "hccl.broadcast", "hccl.all_gather",
               "hccl.reduce_scatter", "hccl.all_to_all", "hccl.send", "hccl.recv")


@dataclass
class Finding:
    """One diagnosed problem: what, why (with figures and task ids), and what to try."""

    kind: str          # host_bound, dispatch_bound, host_func_bound, held_by_full_queue,
                       # small_tasks, straggler, too_many_streams, device_sync_in_loop, stream_sync_in_loop,
                       # needless_sync, needless_wait, no_overlap, copy_bound, memory_peak, fragmentation,
                       # pool_cache, never_freed, failed_tasks, never_finished, priority_inversion,
                       # tail_wave
    title: str
    cause: str
    advice: str
    evidence: dict = field(default_factory=dict)
    task_ids: list = field(default_factory=list)   # "device/stream/task" of example tasks
    impact_ns: int = 0  # estimated time it cost (0: not a time cost)

    def __str__(self) -> str:
        ev = "; ".join(f"{k}: {v}" for k, v in self.evidence.items())
        tasks = f"\n  tasks (device/stream/task): {', '.join(self.task_ids[:10])}" if self.task_ids else ""
        return f"{self.title}\n  cause: {self.cause}\n  evidence: {ev}{tasks}\n  try: {self.advice}"

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"kind": self.kind, "title": self.title, "cause": self.cause, "advice": self.advice,
                "evidence": self.evidence, "task_ids": self.task_ids, "impact_ns": self.impact_ns}


def percentile(values, q: float) -> int:
    """The q-quantile of ns figures (0 for none): one rule for every report."""
    if not values:
        return 0
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def format_us(ns: float) -> str:
    """ns as microseconds with one decimal, as findings print times."""
    return f"{ns / 1e3:.1f} us"


def task_ref(t) -> str:
    """A task's reference as printed in findings: device/stream/task."""
    return f"{t.device}/{t.stream}/{t.task_id}"


def min_window_ns(devices) -> int:
    """The shortest stretch of time a finding judges, for a profile of `devices`: where they
    are simulated (virtual time, which no jitter disturbs) MIN_WINDOW_VIRTUAL_NS, else
    MIN_WINDOW_NS."""
    return MIN_WINDOW_VIRTUAL_NS if any(d.backend == "sim" for d in devices) else MIN_WINDOW_NS

# The share of a starved device's idle time during which a task was ready but not started,
# from which on its dispatch, not the host's calls, is what starved it (below it, a modelled
# dispatch latency that comes with every task is part of the host's gap, not the cause).
DISPATCH_BOUND_SHARE = 0.75
# A kernel whose last partial waves leave cores idle for this share of the run (in kernel
# time: what full waves would save) or more is worth a finding.
MIN_TAIL_WAVE_SHARE = 0.05
# The time the other ranks of a collective wait for the last one (each, on average) from
# which on, as a share of the profile, that rank is a straggler worth a finding.
STRAGGLER_SHARE = 0.05
