"""The pipeline demo: host -> device copy, compute, device -> host copy, on one stream and on three.

Smaller than `ascentrt demo` (8 batches of 16 MiB, one timed run each after an untimed warm-up).
Each timed run is an instance of the profiler range `pipeline` (the warm-up is not):
`ascentrt prof --range pipeline -- python examples/pipeline.py` diagnoses those 2 instances alone
(the whole run includes the warm-up, staging the inputs and checking the results on the host).
"""

import sys

from ascentrt.demo import run_pipeline


def main(batches: int = 8, elements: int = 1 << 21) -> int:
    """Run the pipeline once on one stream and once on three; print times, stages and the speedup."""
    run_pipeline(1, 2, elements, warm_up=True)  # warm-up (outside the range): first-touch page faults would skew the first run
    results = {n: run_pipeline(n, batches, elements) for n in (1, 3)}
    for r in results.values():
        stages = ", ".join(f"{k} {v:.2f} ms" for k, v in r.stage_ms.items())
        print(f"{r.streams} stream(s): {r.seconds * 1e3:.1f} ms for {batches} batches; "
              f"per stage: {stages}; results {'correct' if r.correct else 'WRONG'}")
    speedup = results[1].seconds / results[3].seconds
    print(f"speedup with 3 streams: {speedup:.2f}x")
    return 0 if all(r.correct for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
