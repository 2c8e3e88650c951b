"""A SIGINT, SIGTERM or SIGHUP that comes while a profile is written at exit is held until it
is written, then does what it does; a second one of the same kind comes at once."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import ascentrt as art
from ascentrt.profiler.export import OUTPUT_FILES

# The program's profile is written with `signals` sent to it as the writing starts (as a CI
# cancel or a second Ctrl-C would find it); the program installs its own `setup` first.
SENT_AS_WRITTEN = textwrap.dedent("""
    import os, signal, sys
    {setup}
    import ascentrt as art
    from ascentrt.profiler import session
    stop = session.Session.stop
    def sent_as_written(self, *args, **kwargs):
        for name in {signals!r}:
            os.kill(os.getpid(), getattr(signal, name))
        {then}
        return stop(self, *args, **kwargs)
    session.Session.stop = sent_as_written
    art.launch(art.kernels.noop, name="quick"); art.synchronize(timeout=10)
""")


def _env():
    return {k: v for k, v in os.environ.items() if not k.startswith("ASCENTRT_PROFILE")}


def _program(signals, setup="", then="pass"):
    return SENT_AS_WRITTEN.format(signals=list(signals), setup=setup, then=then)


def _run(tmp_path, program):
    out = tmp_path / "out"
    ran = subprocess.run([sys.executable, "-c", program], env=dict(_env(), ASCENTRT_PROFILE=str(out)),
                         capture_output=True, text=True, timeout=60)
    return out, ran


def _whole(folder):
    """Whether `folder` holds every output of a profile, and it reads back."""
    there = sorted(os.listdir(folder))
    assert all(name in there for name in OUTPUT_FILES), there
    return [t.name for t in art.profiler.load(folder).tasks if t.kind == "kernel"] == ["quick"]


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_signal_whose_action_is_the_default_is_held_until_the_profile_is_written(tmp_path, name):
    out, ran = _run(tmp_path, _program([name]))
    assert ran.returncode == -getattr(signal, name), ran.stderr  # (then it ends the program)
    assert f"{name} came while the profile was written" in ran.stderr, ran.stderr
    assert _whole(out)


def test_the_programs_own_handler_runs_after_the_profile_is_written_in_the_order_they_came(tmp_path):
    setup = ("def handled(signum, frame):\n"
             "    print('handled', os.path.exists(os.path.join(os.environ['ASCENTRT_PROFILE'], "
             "'summary.txt')), flush=True)\n"
             "signal.signal(signal.SIGTERM, handled)")
    out, ran = _run(tmp_path, _program(["SIGTERM", "SIGHUP"], setup=setup))
    assert ran.stdout == "handled True\n", ran.stderr  # (its handler, once, with the profile there)
    assert ran.returncode == -signal.SIGHUP, ran.stderr  # (then SIGHUP's default action)
    assert _whole(out)


def test_a_program_that_ignores_sigterm_keeps_ignoring_it_while_the_profile_is_written(tmp_path):
    # (a SIGHUP, whose action is the default one, is held meanwhile: two SIGTERMs are no second
    # one of a kind held, which would come at once)
    program = _program(["SIGTERM", "SIGHUP", "SIGTERM"],
                       setup="signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    out, ran = _run(tmp_path, program)
    assert ran.returncode == -signal.SIGHUP, ran.stderr
    assert "SIGTERM" not in ran.stderr
    assert _whole(out)


def test_a_second_sigterm_ends_a_profile_write_that_is_stuck(tmp_path):
    # (the first is held; the writing then never ends: the second one must end the program)
    program = _program(["SIGTERM"], then="print('stuck', flush=True); import time; time.sleep(60)")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", program], env=dict(_env(), ASCENTRT_PROFILE=str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "stuck\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
