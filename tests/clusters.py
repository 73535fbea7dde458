"""Real schedulers for the launcher tests, started and stopped by the caller, everything in one
folder (no /etc, no system service): a single-node SLURM cluster from Debian's packages (munged,
slurmctld, slurmd; `apt-get install slurm-wlm munge`) and a two-node Ray cluster on 127.0.0.1 whose
raylets run in folders of their own (as on two machines: a job's working directory is not the
launch's).

    with SlurmCluster(folder) as slurm:   # slurm.env: SLURM_CONF for sbatch/squeue/scancel
    with RayCluster(folder) as ray:       # ray.address, ray.env: the token the cluster wants
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from .conftest import unavailable
from .serve import free_port
from .shared_service import gone

SLURM_TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel")


def require(*tools: str) -> None:
    """`unavailable` when a tool is missing."""
    missing = [t for t in tools if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)")


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 60, log: Path | None = None) -> None:
    """Poll `check` until it holds; past `timeout_s`, fail naming `what` (and the end of `log`)."""
    deadline = time.time() + timeout_s
    while not check():
        if time.time() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise AssertionError(f"{what}: not within {timeout_s:g} s {tail}")
        time.sleep(0.05)


def _sbin(tool: str) -> str:
    return shutil.which(tool) or f"/usr/sbin/{tool}"


class SlurmCluster:
    """munged + slurmctld + slurmd for this host, as root (what the CI machine runs tests as)."""

    def __init__(self, folder: Path) -> None:
        # The node as it is (slurmd drains a node configured with more CPUs or memory than it has).
        self.dir, self.cpus = folder, os.cpu_count() or 1
        self.host = socket.gethostname().split(".")[0]
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _config(self) -> str:
        template = (Path(__file__).parent / "data" / "slurm.conf").read_text()
        return template.format(dir=self.dir, host=self.host, cpus=self.cpus, ctld_port=free_port(),
                               slurmd_port=free_port())  # fmt: skip

    def __enter__(self) -> SlurmCluster:
        d = self.dir
        for sub in ("state", "spool"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o755)  # munged checks that its socket's folder is reachable
        key = d / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self.conf.write_text(self._config())
        subprocess.run(
            [_sbin("munged"), "--force", f"--socket={d}/munge.sock", f"--key-file={key}",
             f"--log-file={d}/munged.log", f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed"],
            check=True, timeout=30,
        )  # fmt: skip
        subprocess.run([_sbin("slurmctld"), "-f", str(self.conf)], check=True, timeout=30, env=self.env)
        subprocess.run([_sbin("slurmd"), "-f", str(self.conf)], check=True, timeout=30, env=self.env)
        wait_for("the SLURM node is up", self._idle, log=d / "slurmctld.log")
        return self

    def _idle(self) -> bool:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=self.env, check=False
        )
        return out.stdout.strip() in ("idle", "mix", "alloc")

    def squeue(self) -> list[tuple[str, str]]:
        """(job id, state) of every job the controller still lists."""
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, env=self.env, check=True
        )
        return [tuple(line.split()) for line in out.stdout.splitlines() if line.strip()]  # type: ignore[misc]

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, check=False, timeout=30)
        for pidfile in ("slurmd.pid", "slurmctld.pid", "munged.pid"):
            with contextlib.suppress(OSError, ValueError):
                os.kill(int((self.dir / pidfile).read_text().strip()), 15)
        time.sleep(0.5)


class RayCluster:
    """A head and a worker node on 127.0.0.1 (Ray picks another address by default), each raylet
    started in its own folder, with token authentication (Ray 2.59+ turns it on for local clusters)."""

    def __init__(self, folder: Path, cpus_per_node: int = 1) -> None:
        self.dir, self.cpus = folder, cpus_per_node
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_DEDUP_LOGS": "0",
            # Ray starts its workers at nice 15 (its raylet and driver first, on a node of its own);
            # beside the test run's other busy workers they got almost no CPU: the sweep's two jobs
            # took 100 s instead of 12 (a Ray job submitted through its dashboard gets 0 too).
            "RAY_worker_niceness": "0",
        }

    def _ray(self, *args: str, cwd: Path) -> None:
        cwd.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["ray", *args], cwd=cwd, env=self.env, check=True, timeout=120, capture_output=True, text=True
        )

    def __enter__(self) -> RayCluster:
        common = ["--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}"]
        self._ray(
            "start", "--head", f"--port={self.port}", "--include-dashboard=false",
            f"--ray-client-server-port={free_port()}", f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}", "--min-worker-port=0", "--max-worker-port=0", *common,
            cwd=self.dir / "head",
        )  # fmt: skip
        self._ray(
            "start", f"--address={self.address}", f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}", "--min-worker-port=0", "--max-worker-port=0", *common,
            cwd=self.dir / "node2",
        )  # fmt: skip
        return self

    def _processes(self) -> list[int]:
        """This cluster's processes: those started with its token (GCS, raylets, workers) and
        the agents a raylet starts without it (they name their raylet)."""
        environs: dict[int, list[bytes]] = {}
        for proc in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if proc.name.isdigit():
                    environs[int(proc.name)] = (proc / "environ").read_bytes().split(b"\0")
        token = f"RAY_AUTH_TOKEN={self.env['RAY_AUTH_TOKEN']}".encode()
        ours = {pid for pid, env in environs.items() if token in env}
        parents = {f"RAY_RAYLET_PID={pid}".encode() for pid in ours}
        return sorted(ours | {pid for pid, env in environs.items() if parents.intersection(env)})

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        # SIGKILL this cluster's processes, not every Ray process on the host as `ray stop` does;
        # and done once they are dead: `ray stop` waits for its victims to be reaped, and here
        # PID 1 may never reap them (5 s of polling zombies).
        for pid in self._processes():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        wait_for("the Ray cluster's processes are dead", lambda: all(map(gone, self._processes())), 30)
