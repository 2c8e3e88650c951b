"""A notify cycle: two streams each wait for a signal the other sends only later; the runtime says so."""

import sys

import ascentrt as art


def main() -> int:
    """Build the cycle, synchronize, and print the DeadlockError the runtime raises instead of hanging."""
    dev = art.set_device(0)
    a, b = dev.create_stream(), dev.create_stream()
    a_to_b, b_to_a = dev.create_notify(), dev.create_notify()
    b_to_a.wait_and_reset(a)        # a waits for b's signal ...
    a_to_b.record(a)                # ... before sending its own
    a_to_b.wait_and_reset(b)        # b waits for a's signal ...
    b_to_a.record(b)                # ... before sending its own: a cycle
    try:
        dev.synchronize(timeout=30)
    except art.DeadlockError as exc:
        print(f"deadlock detected (error {int(exc.code)}):")
        print(f"  {exc}")
        found = True
    else:
        print("no deadlock reported")
        found = False
    for s in (a, b):
        s.destroy(force=True)
    # The device is usable again: a healthy handoff through the same notify works.
    c, d = dev.create_stream(), dev.create_stream()
    a_to_b.record(c)
    a_to_b.wait_and_reset(d)
    d.synchronize(timeout=10)
    print("after destroying the stuck streams, a healthy notify handoff completes")
    c.destroy(), d.destroy()
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
