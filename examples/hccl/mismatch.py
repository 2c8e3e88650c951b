"""A deliberately mismatched AllReduce: one rank passes another count. NCCL would hang or
corrupt data; ascentrt fails every rank's collective with E_PARA and a report that names the
communicator, the sequence number, and each rank's call and call site, so the culprit shows.

    python examples/hccl/mismatch.py
"""

import os

os.environ.setdefault("ASCENTRT_DEVICES", "4")  # before ascentrt makes its devices

import logging  # noqa: E402

import numpy as np  # noqa: E402

import ascentrt as art  # noqa: E402
from ascentrt import hccl  # noqa: E402

logging.getLogger("ascentrt.hccl").setLevel(logging.CRITICAL)  # (this example prints it itself)
RANKS = 4
comms = hccl.comm_init_all(list(range(RANKS)))
streams = [art.Device(r).create_stream() for r in range(RANKS)]
grads = [art.malloc(4096, device=r) for r in range(RANKS)]
for r in range(RANKS):
    art.memcpy(grads[r], np.ones(1024, np.float32))
    # The bug: rank 2 sizes its gradient from a shard that is one element short.
    count = 1024 if r != 2 else 1023
    hccl.all_reduce(grads[r], grads[r], count, hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM,
                    comms[r], streams[r])

for r, s in enumerate(streams):
    try:
        s.synchronize()
    except art.TaskError as exc:
        cause = exc.__cause__
        print(f"rank {r}: HCCL error {int(cause.code)} ({cause.code.name})")
        if r == 0:
            print(f"report: {cause.text}")
record = hccl.flight_record(comms[0])[-1]
print(f"flight record of communicator {comms[0].group.id}: #{record.seq} {record.op} {record.state}")
for g in grads:
    g.free()
