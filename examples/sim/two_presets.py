"""The demo pipeline under two hardware models: Ascend 910B and NVIDIA H200.

    python examples/sim/two_presets.py

Each run is in its own process (a process has one backend) and gives the same figures every
time: the 1- and 3-stream pipeline in virtual time and the speedup bound of its stage times.
"""

import json
import os
import subprocess
import sys

if __name__ == "__main__":
    runs = {}
    for preset in ("ascend910b", "h200"):  # both at once: virtual time does not mind the load
        env = dict(os.environ, ASCENTRT_BACKEND="sim", ASCENTRT_SIM_PRESET=preset)
        runs[preset] = subprocess.Popen([sys.executable, "-m", "ascentrt.demo", "--json", "12"],
                                        env=env, stdout=subprocess.PIPE, text=True)
    for preset, proc in runs.items():
        out, _ = proc.communicate()
        if proc.returncode:
            sys.exit(f"the {preset} run failed (exit code {proc.returncode})")
        r = json.loads(out)
        print(f"{preset:<11} 1 stream {r['ms'][0]:.3f} ms, 3 streams {r['ms'][1]:.3f} ms, "
              f"speedup {r['speedup']:.2f}x (bound {r['bound']:.2f}x)")
