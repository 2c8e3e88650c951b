"""ascentrt.hccl across processes: the programs in tests/mpi/ under mpiexec with 2 and 4 ranks
(skipped when the [mpi] extra, mpi4py with an MPI, is not installed; `make test` installs it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")
HERE = Path(__file__).resolve().parent / "mpi"
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
pytestmark = [pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec on this machine"),
              pytest.mark.skipif(os.environ.get("ASCENTRT_BACKEND") == "sim",
                                 reason="runs once, in the cpu session")]


def mpirun(ranks: int, program: str, env: dict | None = None, timeout: float = 120) -> str:
    proc = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, str(HERE / program)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "ASCENTRT_LEAK_CHECK": "off", **(env or {})})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_every_collective_dtype_and_op_matches_numpy_over_mpi(ranks):
    out = mpirun(ranks, "collectives.py")
    assert f"ranks {ranks} checks {264 * ranks} ok True" in out, out


def test_a_rank_that_never_calls_times_the_others_out_over_mpi():
    out = mpirun(4, "timeout.py", env={"HCCL_EXEC_TIMEOUT": "1"})  # (three ranks wait for one)
    assert "timeouts True" in out, out


def test_the_mpi_data_parallel_example_runs_under_mpiexec():
    example = Path(__file__).resolve().parent.parent / "examples" / "hccl" / "mpi_data_parallel.py"
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(example)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "ASCENTRT_LEAK_CHECK": "off"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 ranks over MPI" in proc.stdout and "identical after every AllReduce: True" in proc.stdout


def test_a_refused_group_is_withdrawn_whole_and_stale_messages_are_dropped_over_mpi():
    out = mpirun(2, "failures.py", env={"HCCL_EXEC_TIMEOUT": "1"})
    assert "failures True" in out, out


def test_a_group_may_use_two_communicators_in_either_order_and_threads_meet_in_process():
    out = mpirun(2, "groups.py", env={"HCCL_EXEC_TIMEOUT": "5", "ASCENTRT_DEVICES": "2",
                                      "HCCL_CONNECT_TIMEOUT": "10"}, timeout=60)
    assert "groups True" in out, out


def test_only_a_communicators_own_processes_call_comm_init_root_info_over_mpi():
    # (every process of the job had to call it: a sub-group timed out, and the next init of
    # every process then failed with a misleading E_PARA)
    out = mpirun(3, "subgroup.py", env={"HCCL_CONNECT_TIMEOUT": "5"}, timeout=60)
    assert "subgroup True" in out, out


def test_a_rank_that_joins_after_the_others_timed_out_meets_their_retry_over_mpi():
    # (it hung for good in MPI_Comm_split, matched with the round the others had left)
    out = mpirun(2, "late_join.py", env={"HCCL_CONNECT_TIMEOUT": "2"}, timeout=60)
    assert "late join True" in out, out


def test_a_rank_whose_process_exits_without_comm_destroy_fails_the_others_at_once_over_mpi():
    # (the others waited HCCL_EXEC_TIMEOUT, then were told the rank had not reached the call)
    out = mpirun(2, "exit.py", env={"HCCL_EXEC_TIMEOUT": "20"}, timeout=60)
    assert "exit True" in out, out


def test_a_destroyed_rank_fails_the_collectives_it_never_called_at_once_over_mpi():
    # (they held their stream until HCCL_EXEC_TIMEOUT, then failed with E_TIMEOUT)
    out = mpirun(2, "destroy.py", env={"HCCL_EXEC_TIMEOUT": "10"}, timeout=60)
    assert "destroy True" in out, out
