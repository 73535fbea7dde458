"""Sharded runs through real schedulers, as a cluster user runs them: a single-node SLURM cluster
(submitit_slurm) and a two-node Ray cluster (the Ray launcher pointed at its address), both started
here (`tests/clusters.py`). Each test starts its cluster once and walks what a user meets:

- launched from a folder with the default relative stores (`sqlite:///mmlu_track.db`, MLflow's
  `mlflow.db`) while each job runs elsewhere (its own folder with `hydra.job.chdir=true`; a raylet's
  folder under Ray): one store, one finished run equal to the unsharded one, one MLflow run, one
  results.json, all under the launch folder;
- SLURM: shards stopped midway (one killed as by a node crash, no chance to mark anything; one by a
  plain `scancel`, which must stop it at once, not at SLURM's SIGKILL 30 s later), then resumed from
  another host name (a UTS namespace) at once: squeue says the killed one's job is gone;
- Ray: a job whose input is unusable ends the sweep with exit 2 and one line, and is not retried.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from mmlu_track.pipeline.evaluate import QUIET, RunOutput, run
from mmlu_track.store.liveness import Owner
from mmlu_track.store.sql import SqlStore

from .. import processes
from ..clusters import SLURM_TOOLS, RayCluster, SlurmCluster, require, wait_for
from ..conftest import tiny_run_cfg
from ..pipeline.test_session_shards import _same_as

ARGS = ["k=0", "subjects=[anatomy,virology]", "limit=20"]
COMMON = ["experiment=smoke", "device=cpu", "shards=2", "tracking.experiment=launched"]
SWEEP = ["-m", "mmlu_track", "-m", *COMMON, "shard=range(2)"]

pytestmark = pytest.mark.clusters


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> RunOutput:
    where = tmp_path_factory.mktemp("ref")
    return run(tiny_run_cfg(f"sqlite:///{where / 'ref.db'}", *ARGS, model="tiny"), where, display=QUIET)


def _one_run_in(launch: Path, reference: RunOutput, scheduler: str) -> None:
    """The launch folder holds the one store, the one finished run (each shard's claim naming its
    scheduler task), its one MLflow run with its artifacts, and its one results.json."""
    assert sorted(p.name for p in launch.rglob("*.db")) == ["mlflow.db", "mmlu_track.db"]
    store = SqlStore(f"sqlite:///{launch / 'mmlu_track.db'}")
    (stored,) = store.runs()
    assert stored.status == "finished"
    _same_as(reference, store.question_results(stored.id))
    assert [c.scheduler.split(":")[0] for c in store.shards(stored.id) if c.scheduler] == [scheduler] * 2
    store.close()
    client = MlflowClient(tracking_uri=f"sqlite:///{launch / 'mlflow.db'}")
    (logged,) = client.search_runs([client.get_experiment_by_name("launched").experiment_id])
    assert logged.info.status == "FINISHED"
    assert logged.info.artifact_uri.startswith((launch / "mlruns").as_uri())
    (results,) = (launch / "multirun").rglob("results.json")  # in the sweep's folder, not a job's
    assert (results.parent / "multirun.yaml").is_file()
    record = json.loads(results.read_text())
    timing = record["timing"]  # both shards' work, not the finalizer's alone
    assert timing["tokens_forwarded"] == reference.record.timing.tokens_forwarded  # type: ignore[union-attr]
    argv = record["host"]["argv"]  # the job's own command, not submitit's `_submit.py` or Ray's worker
    assert argv[:3] == ["python", "-m", "mmlu_track"]
    assert {"shards=2", "experiment=smoke"} <= set(argv)


def _on_node2(args: list[str], cwd: Path, env: dict[str, str]) -> processes.Popen:
    """`python ARGS` as if on another machine: its own UTS namespace, host name `node2`."""
    code = (
        "import ctypes, runpy, socket, sys\n"
        "assert ctypes.CDLL(None, use_errno=True).unshare(0x04000000) == 0, 'unshare --uts'\n"  # CLONE_NEWUTS
        "socket.sethostname('node2')\n"
        "sys.argv = ['mmlu_track', *sys.argv[1:]]\n"
        "runpy.run_module('mmlu_track', run_name='__main__', alter_sys=True)\n"
    )
    return processes.Popen(["-c", code, *args], cwd=cwd, env=env)


def test_a_slurm_cluster_runs_cancels_and_resumes_the_shards_of_one_run(
    tmp_path: Path, reference: RunOutput, request: pytest.FixtureRequest
) -> None:
    require(*SLURM_TOOLS)
    launch = tmp_path / "launch"
    launch.mkdir()
    slurm_args = ["hydra/launcher=submitit_slurm", "hydra.launcher.partition=debug",
                  "hydra.launcher.timeout_min=10", "hydra.launcher.cpus_per_task=1"]  # fmt: skip
    with SlurmCluster(tmp_path / "slurm") as slurm:
        env = {**slurm.env, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": ""}
        # Relative stores, each job in its own folder: before, one store per job folder, nothing finalized.
        done = processes.run([*SWEEP, *ARGS, *slurm_args, "hydra.job.chdir=true"], cwd=launch, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        _one_run_in(launch, reference, "slurm")
        assert "micro average" in done.stdout  # the driver prints what only submitit's logs held

        # Cancelled midway: shard 0 by SIGKILL (its claim stays `running`), shard 1 by a plain scancel.
        # Work enough that both shards are caught mid-run, and little for the resumes to redo.
        big = [f"tracking.db_url=sqlite:///{tmp_path / 'big.db'}", "subjects=all", "limit=6", "k=5",
               "batch_size=1", "tracking=sql_only"]  # fmt: skip
        sweep = processes.Popen([*SWEEP, *slurm_args, *big], cwd=launch, env=env)
        request.addfinalizer(lambda: (sweep.kill(), sweep.communicate()))  # nothing left behind
        store = SqlStore(f"sqlite:///{tmp_path / 'big.db'}")

        def both_at_work() -> bool:
            runs = store.runs() if (tmp_path / "big.db").exists() else []
            claims = store.shards(runs[0].id) if runs else []
            return len(claims) == 2 and store.n_committed(runs[0].id) > 0

        wait_for("both shards claimed and a unit committed", both_at_work, timeout_s=180)
        (big_run,) = store.runs()
        claims = {c.shard: c for c in store.shards(big_run.id)}
        # Shard 0's process dies as on a node that crashes (SLURM's own `scancel --signal=KILL` reaches
        # srun, which stops its task with a SIGTERM first); SLURM then ends the job.
        # Shard 1 is held mid-work (SIGSTOP) until its scancel's SIGTERM is on its way.
        pid1 = Owner.parse(claims[1].owner or "").pid  # type: ignore[union-attr]
        os.kill(pid1, signal.SIGSTOP)
        os.kill(Owner.parse(claims[0].owner or "").pid, signal.SIGKILL)  # type: ignore[union-attr]
        cancelled = time.time()
        job1 = (claims[1].scheduler or "").removeprefix("slurm:").rpartition(".")[0]
        subprocess.run(["scancel", job1], env=slurm.env, check=True)
        time.sleep(0.5)
        os.kill(pid1, signal.SIGCONT)
        wait_for("the cancelled shards leave the queue", lambda: not slurm.squeue(), timeout_s=60)
        assert time.time() - cancelled < 20  # SLURM's SIGKILL follows a SIGTERM after KillWait=30 s
        # Without accounting (no slurmdbd here) submitit cannot learn that a job was cancelled and
        # waits for its result: the user stops it.
        sweep.terminate()
        sweep.communicate(timeout=60)
        claims = {c.shard: c for c in store.shards(big_run.id)}
        assert claims[0].status == "running"  # SIGKILL: nothing marked
        assert claims[1].status == "failed"  # SIGTERM unwound it: marked, resumable
        assert store.get(big_run.id).status == "running"  # type: ignore[union-attr]

        # From another host at once: its heartbeat is recent, but squeue says the job is gone.
        single = [*COMMON, *(a for a in big if a != "batch_size=1")]  # batching: no part of the identity
        rerun = _on_node2([*single, "shard=0", f"hydra.run.dir={tmp_path / 'r0'}"], launch, env)
        out, err = rerun.communicate(timeout=300)
        assert rerun.returncode == 0, err[-3000:]
        assert f"resuming run {big_run.id} (shard 0 of 2)" in out
        last = processes.run(
            ["-m", "mmlu_track", *single, "shard=1", f"hydra.run.dir={tmp_path / 'r1'}"], cwd=launch, env=env
        )
        assert last.returncode == 0, last.stderr[-3000:]
        finished = store.get(big_run.id)
        assert finished is not None
        assert finished.status == "finished"
        results = store.question_results(big_run.id)
        assert len(results) == len({(r.subject, r.index) for r in results}) == 57 * 6


def test_a_two_node_ray_cluster_runs_the_shards_of_one_run_and_never_retries_a_bad_job(
    tmp_path: Path, reference: RunOutput
) -> None:
    require("ray")
    launch = tmp_path / "launch"
    launch.mkdir()
    with RayCluster(tmp_path / "ray") as ray:
        # README's line for a cluster: the plugin's object-store setting is refused with an address.
        ray_args = ["hydra/launcher=ray", f"+hydra.launcher.ray.init.address={ray.address}",
                    "+hydra.launcher.ray.init.object_store_memory=null"]  # fmt: skip
        env = {**ray.env, "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": ""}
        done = processes.run([*SWEEP, *ARGS, *ray_args], cwd=launch, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        _one_run_in(launch, reference, "ray")
        assert not list((tmp_path / "ray").rglob("*.db"))  # nothing in the raylets' folders

        bad = processes.run(
            [*SWEEP[:3], "experiment=smoke", "device=cpu", "model=hf_hub",
             f"model.name_or_path={tmp_path / 'none'}", *ray_args, "tracking=sql_only"],
            cwd=launch, env=env,
        )  # fmt: skip
    assert bad.returncode == 2, bad.stderr[-3000:]
    said = [line for line in bad.stderr.splitlines() if line.startswith("mmlu_track: error: sweep job 0: ")]
    assert len(said) == 1, bad.stderr[-3000:]
    for retried in ("UnexpectedSystemExit", "WorkerCrashedError", "Traceback"):
        assert retried not in bad.stdout + bad.stderr
    attempts = {
        line.split(")")[0] for line in (bad.stdout + bad.stderr).splitlines() if "_run_job pid=" in line
    }
    assert len(attempts) <= 1, attempts  # one worker process ran it: no retry
