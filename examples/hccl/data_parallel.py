"""Data-parallel training on 4 in-process devices: compute on one stream per device, the
gradients' AllReduce on a separate communication stream, overlapped with events.

Each step runs the backward pass layer by layer on the compute stream; as soon as a layer's
gradient is ready (an event), the communication stream all-reduces it while the compute
stream goes on with the layer below. The update waits for the last AllReduce (an event the
other way). Every replica ends with the same weights, and the loss falls.

    python examples/hccl/data_parallel.py
    ASCENTRT_BACKEND=sim python examples/hccl/data_parallel.py    # in virtual time
"""

import os

os.environ.setdefault("ASCENTRT_DEVICES", "4")  # before ascentrt makes its devices

import numpy as np  # noqa: E402

import ascentrt as art  # noqa: E402
from ascentrt import hccl  # noqa: E402

RANKS, SAMPLES, IN, HIDDEN, STEPS, LR = 4, 256, 64, 32, 20, 0.05
FP32, SUM = hccl.HcclDataType.FP32, hccl.HcclReduceOp.SUM
rng = np.random.default_rng(0)
true_w = rng.standard_normal(IN).astype(np.float32)


def forward_backward(x, y, w1, w2, g1, g2, h, loss):
    """One shard's forward pass and the gradient of the last layer (g2)."""
    np.maximum(x @ w1, 0, out=h)
    err = h @ w2 - y
    loss[0] = float(err @ err) / len(y)
    g2[:] = 2 * h.T @ err / len(y)


def backward_first_layer(x, y, w1, w2, h, g1):
    """The gradient of the first layer (g1), after the last layer's."""
    err = h @ w2 - y
    g1[:] = 2 * x.T @ (np.outer(err, w2) * (h > 0)) / len(y)


def update(w, g):
    """w -= LR * mean of the ranks' gradients (g holds their sum)."""
    w -= LR * g / RANKS


comms = hccl.comm_init_all(list(range(RANKS)))
ranks, buffers = [], []
w1_init = (rng.standard_normal((IN, HIDDEN)) * 0.1).astype(np.float32)
w2_init = (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32)
for r in range(RANKS):
    dev = art.Device(r)
    x = rng.standard_normal((SAMPLES, IN)).astype(np.float32)
    y = (x @ true_w).astype(np.float32)

    def put(a, r=r):
        buf = art.malloc(a.nbytes, device=r)
        art.memcpy(buf, a)
        buffers.append(buf)
        return buf.view(a.dtype, a.shape)

    ranks.append(dict(
        compute=dev.create_stream(), comm=dev.create_stream(), x=put(x), y=put(y),
        w1=put(w1_init), w2=put(w2_init), g1=put(np.zeros_like(w1_init)),
        g2=put(np.zeros_like(w2_init)), h=put(np.zeros((SAMPLES, HIDDEN), np.float32)),
        loss=put(np.zeros(1, np.float32)), dev=dev))

losses = []
for step in range(STEPS):
    for r, k in enumerate(ranks):
        c, m = k["compute"], k["comm"]
        art.launch(forward_backward, k["x"], k["y"], k["w1"], k["w2"], k["g1"], k["g2"], k["h"],
                   k["loss"], stream=c)
        m.wait(c.record())                                    # g2 is ready: reduce it ...
        hccl.all_reduce(k["g2"].buffer, k["g2"].buffer, HIDDEN, FP32, SUM, comms[r], m)
        art.launch(backward_first_layer, k["x"], k["y"], k["w1"], k["w2"], k["h"], k["g1"],
                   stream=c)                                  # ... while this runs
        m.wait(c.record())
        hccl.all_reduce(k["g1"].buffer, k["g1"].buffer, IN * HIDDEN, FP32, SUM, comms[r], m)
        c.wait(m.record())                                    # the update needs both sums
        art.launch(update, k["w1"], k["g1"], stream=c)
        art.launch(update, k["w2"], k["g2"], stream=c)
    for k in ranks:
        k["compute"].synchronize()
    losses.append(float(np.mean([k["loss"].numpy()[0] for k in ranks])))

same = all(np.array_equal(k["w1"].numpy(), ranks[0]["w1"].numpy()) and
           np.array_equal(k["w2"].numpy(), ranks[0]["w2"].numpy()) for k in ranks)
print(f"{RANKS} ranks, {STEPS} steps: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
print(f"replicas identical after every AllReduce: {same}")
record = hccl.flight_record(comms[0])
print(f"communicator {comms[0].group.id}: {len(record)} collectives, last: {record[-1].line()}")
for b in buffers:
    b.free()
for c in comms:
    hccl.comm_destroy(c)
