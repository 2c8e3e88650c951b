"""Pipeline: the demo's host -> device -> compute -> host pipeline on 3 streams vs on 1 stream.

Runs ascentrt.demo.run_pipeline alternately with 1 and 3 streams (after a warm-up) and
reports batches per second, medians over the runs. The batch size is chosen so that every
stage takes at least 2 ms (checked: the figure's note gives the measured stage times).
"""

from __future__ import annotations

from _common import QUICK, emit, median, pick

from ascentrt.demo import run_pipeline

ELEMENTS = pick(9 << 18, 1 << 16)   # float64 per batch: 18 MiB, so each stage is >= 2 ms
BATCHES = pick(12, 4)
RUNS = pick(5, 1)
MIN_STAGE_MS = 2.0


def main() -> None:
    """Measure and print the pipeline figure as a JSON line."""
    run_pipeline(1, 3, ELEMENTS, warm_up=True)  # warm-up: executor threads, first-touch pages
    seconds = {1: [], 3: []}
    stages = {1: [], 3: []}
    for _ in range(RUNS):
        for n in (1, 3):
            result = run_pipeline(n, BATCHES, ELEMENTS)
            if not result.correct:
                raise SystemExit(f"pipeline on {n} stream(s) computed wrong results")
            seconds[n].append(result.seconds)
            stages[n].append(result.stage_ms)
    rate = {n: BATCHES / median(s) for n, s in seconds.items()}
    one_stream_stages = {k: median([r[k] for r in stages[1]]) for k in stages[1][0]}
    shortest = min(one_stream_stages.values())
    stage_text = ", ".join(f"{k} {v:.2f} ms" for k, v in one_stream_stages.items())
    note = f"stage times on 1 stream: {stage_text}"
    if shortest < MIN_STAGE_MS and not QUICK:
        note += f" (WARNING: a stage is shorter than {MIN_STAGE_MS} ms)"
    emit("pipeline_3_streams", rate[3], "batches/s", "the same pipeline on 1 stream", rate[1],
         ">=", 1.5, f"at least 1.5x; {BATCHES} batches of {ELEMENTS * 8 >> 20} MiB, median of {RUNS}",
         note=note)


if __name__ == "__main__":
    main()
