"""The README's first program works as written."""

import numpy as np

import ascentrt as art


def test_readme_first_program_computes_on_device(stream):
    x = np.arange(1 << 16, dtype=np.float32)
    buf_in, buf_out = art.malloc(x.nbytes), art.malloc(x.nbytes)
    host = art.malloc_host(x.nbytes)
    host.numpy(np.float32)[:] = x
    art.memcpy_async(buf_in, host, stream=stream)
    art.launch(art.kernels.scale, buf_out.view(np.float32), buf_in.view(np.float32), 2.0, stream=stream)
    art.memcpy_async(host, buf_out, stream=stream)
    stream.synchronize(timeout=5.0)
    assert np.array_equal(host.numpy(np.float32), 2 * x)
    for b in (buf_in, buf_out, host):
        b.free()
