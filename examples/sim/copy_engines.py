"""A what-if sweep: the demo pipeline's copies, with 1 or 2 engines per direction.

    ascentrt whatif --vary copy_engines_h2d=1,2 --vary program.streams=1,3 -- python examples/sim/copy_engines.py

The program reads its own knob (how many streams) from ascentrt.sim.variant(); the copy engine
count comes from the preset the sweep changes. Run alone, it uses 3 streams on the backend
ASCENTRT_BACKEND says (cpu by default: this machine's times); `ASCENTRT_BACKEND=sim python
examples/sim/copy_engines.py` gives the virtual time the sweep compares.
"""

import numpy as np

import ascentrt as art
from ascentrt import sim

streams_wanted = int(sim.variant().get("streams", 3))
n = 4 << 20
batches = 12
streams = [art.Stream() for _ in range(streams_wanted)]
host_in = [art.malloc_host(n) for _ in range(batches)]
host_out = [art.malloc_host(n) for _ in range(batches)]
dev = [art.malloc(n) for _ in range(batches)]
start = sim.now_s()  # (the device clock: virtual on sim, this machine's on cpu)
for i in range(batches):
    s = streams[i % len(streams)]
    art.memcpy_async(dev[i], host_in[i], stream=s)
    art.launch("scale", dev[i].view(np.float32), dev[i].view(np.float32), 2.0, stream=s)
    art.memcpy_async(host_out[i], dev[i], stream=s)
for s in streams:
    s.synchronize()
print(f"{streams_wanted} streams: {(sim.now_s() - start) * 1e3:.3f} ms of device time")
for b in host_in + host_out + dev:
    b.free()
