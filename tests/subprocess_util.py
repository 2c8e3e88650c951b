"""Run a small ascentrt program in a fresh interpreter, for settings read once per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def run_program(code: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> str:
    """Run `code` with extra environment variables; return its stdout, fail on a non-zero exit."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout
