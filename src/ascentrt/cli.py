"""The `ascentrt` command: `ascentrt demo`, `ascentrt info`."""

from __future__ import annotations

import argparse
import json
import sys


def _info(args) -> int:
    import ascentrt
    rows = []
    for i in range(ascentrt.device_count()):
        d = ascentrt.Device(i)
        free, total = d.mem_info()
        p = d.properties
        rows.append({"device": i, "name": p.name, "backend": p.backend, "memory_used": total - free,
                     "memory_total": total, "compute_units": p.compute_units,
                     "copy_engines": p.copy_engines, "streams": len(d.streams())})
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = f"{'Device':<7}{'Name':<16}{'Backend':<9}{'Memory used / total (MiB)':<28}{'Compute':<9}{'Copy':<6}{'Streams'}"
    print(header)
    print("-" * len(header))
    for r in rows:
        mem = f"{r['memory_used'] >> 20} / {r['memory_total'] >> 20}"
        print(f"{r['device']:<7}{r['name']:<16}{r['backend']:<9}{mem:<28}{r['compute_units']:<9}"
              f"{r['copy_engines']:<6}{r['streams']}")
    return 0


def _demo(args) -> int:
    from .demo import main as demo_main
    return demo_main(args.batches)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `ascentrt` command; errors print one line unless --debug."""
    parser = argparse.ArgumentParser(prog="ascentrt", description="ascentrt accelerator runtime")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="run the multi-stream pipeline demo")
    p_demo.add_argument("--batches", type=int, default=12)
    p_demo.set_defaults(fn=_demo)
    p_info = sub.add_parser("info", help="devices, memory, executors and streams")
    p_info.add_argument("--json", action="store_true", help="machine-readable output")
    p_info.set_defaults(fn=_info)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except Exception as exc:  # one clear line for users; --debug for the traceback
        if args.debug:
            raise
        print(f"ascentrt: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
