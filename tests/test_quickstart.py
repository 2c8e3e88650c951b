"""The README's first program works as written."""

import pathlib
import re
import subprocess
import sys

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


def test_every_python_block_of_the_readme_runs_as_pasted(tmp_path):
    """A newcomer pastes each ```python block into a file: it must run alone, leak nothing."""
    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", readme, flags=re.S | re.M)
    assert len(blocks) >= 3
    for i, block in enumerate(blocks):
        path = tmp_path / f"block{i}.py"
        path.write_text(block)
        run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
        assert run.returncode == 0, f"README python block {i}:\n{block}\n{run.stderr[-2000:]}"
        assert "Warning" not in run.stderr, f"README python block {i}: {run.stderr[-2000:]}"
