"""A race the sanitizer finds: one stream reads what another writes with no event between them.

    python examples/race.py                              # runs; the result may or may not be right
    ascentrt sanitize -- python examples/race.py         # names the race and both call sites
    ascentrt sanitize -- python examples/race.py --fixed # the event between them: no race
"""

import sys

import numpy as np

import ascentrt as art


def main(fixed: bool = False) -> int:
    """Fill a buffer on stream `producer`, copy it on stream `consumer`; with `fixed`, the
    consumer first waits for an event recorded after the fill."""
    dev = art.set_device(0)
    producer, consumer = dev.create_stream(), dev.create_stream()
    data, out = art.malloc(4 << 20), art.malloc(4 << 20)
    art.launch(art.kernels.fill, data.view(np.float32), 1.0, stream=producer)
    if fixed:
        consumer.wait(producer.record())  # what the racy version leaves out
    art.launch(art.kernels.copy, out.view(np.float32), data.view(np.float32), stream=consumer)
    consumer.synchronize()
    producer.synchronize()
    right = bool((out.numpy(np.float32) == 1.0).all())
    if fixed:
        print(f"fixed version: result {'right' if right else 'WRONG'}")
    else:
        print(f"racy version: result {'right' if right else 'wrong'} this time (it depends on "
              f"which stream runs first); `ascentrt sanitize -- python examples/race.py` names "
              f"the race")
    data.free()
    out.free()
    return 0


if __name__ == "__main__":
    sys.exit(main("--fixed" in sys.argv[1:]))
