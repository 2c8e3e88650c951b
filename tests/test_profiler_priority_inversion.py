"""Priority inversion on the copy engines is diagnosed from the profile's task records."""

_INVERSION = """
    import ascentrt as art
    dev = art.set_device(0)
    low = [dev.create_stream(priority={low}) for _ in range(4)]
    high = dev.create_stream(priority=0)
    big = [art.malloc(32 << 20) for _ in range(4)]
    big_host = [art.malloc_host(32 << 20) for _ in range(4)]
    res, res_host = art.malloc(1 << 20), art.malloc_host(1 << 20)
    with art.profile(None) as prof:
        for s, d, h in zip(low, big, big_host):
            art.memcpy_async(h, d, stream=s)
        for _ in range(4):
            art.launch(art.kernels.noop, stream=high, cost=1e-4)
            art.memcpy_async(res_host, res, stream=high)
            high.synchronize(30)
        dev.synchronize()
    found = [f for f in prof.diagnose() if f.kind == "priority_inversion"]
    print(len(found))
    for f in found:
        print(f.title)
        print(f.evidence["high-priority copies that waited"], f.evidence["held by"])
        print(f.advice)
    # (a profile 100x as long as the device's work, as one that began long before it: the
    # waits are judged against the device's work window, not diluted by the host's preamble)
    data = prof.profile
    data.duration_ns *= 100
    print(sum(f.kind == "priority_inversion" for f in data.diagnose()))
"""


def test_high_priority_copies_waiting_for_engines_held_by_low_priority_copies_are_diagnosed():
    from subprocess_util import run_program
    out = run_program(_INVERSION.format(low=7),
                      env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend910b"},
                      timeout=60)
    count, title, evidence, advice, long_count = out.splitlines()[:5]
    assert count == "1" and long_count == "1", out
    assert "device to host copy engines busy with lower-priority copies" in title
    assert evidence.startswith("4 ") and "(priority 7): 1 copy of 32.0 MiB" in evidence
    assert "split the long low-priority copies into chunks" in advice
    # (the same copies on streams of one priority only share the engines: no inversion)
    out = run_program(_INVERSION.format(low=0),
                      env={"ASCENTRT_BACKEND": "sim", "ASCENTRT_SIM_PRESET": "ascend910b"},
                      timeout=60)
    assert out.splitlines()[0] == "0", out
