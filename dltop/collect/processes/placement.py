"""Where a trainer runs in a fleet, read from outside the job.

- torchrun's environment variables: RANK, LOCAL_RANK, WORLD_SIZE, TORCHELASTIC_RUN_ID, and the
  rendezvous MASTER_ADDR:MASTER_PORT that DeepSpeed's and Accelerate's launchers set too; under
  Slurm's ``srun`` (no torch variables) SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS and the job and
  step ids, which every task of one step shares.
- A container: its id from the last component of the process's cgroup path (containerd, CRI-O,
  Docker name it ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``docker-<id>.scope`` or a
  bare ``<id>``). The container's *name* is not visible from outside: only the kubelet knows it.
- A Kubernetes pod (the cgroup path holds ``kubepods``): the pod's name is the process's
  ``HOSTNAME`` (Kubernetes sets it to the pod name; a hostNetwork pod gets the node's name
  instead, and dltop cannot tell), the namespace is the service-account file inside the
  container (absent when the pod sets ``automountServiceAccountToken: false``).

Read once per process (a process's initial environment and its cgroup do not change after it
started) and cached by pid and start time, like the rest of discovery's static facts. What
cannot be read (another user's process, no permission) is None.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional

from dltop.collect import procfs
from dltop.model import Placement

# the only variables dltop reads of a job's environment (besides HOSTNAME in a pod): never a secret
# which rank a process is: a process whose own differ from its parent's is a rank of its own (a
# job may set MASTER_* in os.environ, which spawn workers inherit: those do not tell)
RANK_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")
ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT",
            "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
            "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_STEP_ID")  # fmt: skip
NAMESPACE_FILE = "var/run/secrets/kubernetes.io/serviceaccount/namespace"
CONTAINER_ID_DIGITS = 12  # as `docker ps` and `crictl ps` show an id
_CONTAINER_ID = re.compile(r"(?:^|[-:])([0-9a-f]{64})(?:\.scope)?$")


def _int(value: Optional[str]) -> Optional[int]:
    return int(value) if value is not None and value.isdigit() else None


def from_environment(env: dict) -> Placement:
    """torchrun's variables, else Slurm's (an unset one is None)."""
    master = f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}" if env.get("MASTER_ADDR") else None
    slurm_step = f"slurm-{env['SLURM_JOB_ID']}.{env.get('SLURM_STEP_ID', '0')}" if env.get("SLURM_JOB_ID") else None
    return Placement(
        rank=_int(env.get("RANK", env.get("SLURM_PROCID"))),
        local_rank=_int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID"))),
        world_size=_int(env.get("WORLD_SIZE", env.get("SLURM_NTASKS"))),
        run_id=env.get("TORCHELASTIC_RUN_ID") or (slurm_step if master is None else None),
        master=master,
        restart=_int(env.get("TORCHELASTIC_RESTART_COUNT")),
        max_restarts=_int(env.get("TORCHELASTIC_MAX_RESTARTS")),
    )


def parse_cgroup(text: str) -> tuple:
    """(in a Kubernetes pod, container id or None) from /proc/<pid>/cgroup (v1 or v2).

    Paths seen from another cgroup namespace start with ``/..``: the components still show.
    """
    in_pod, container = False, None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        in_pod = in_pod or "kubepods" in path
        match = _CONTAINER_ID.search(path.rstrip("/").rsplit("/", 1)[-1])
        if match and container is None:
            container = match.group(1)[:CONTAINER_ID_DIGITS]
    return in_pod, container


def _pod_facts(pid: int) -> dict:
    """namespace, pod and container of a process, where its cgroup shows them."""
    try:
        in_pod, container = parse_cgroup((procfs.PROC / str(pid) / "cgroup").read_text())
    except OSError:
        return {}
    if not in_pod:
        return {"container": container}
    facts = {"container": container}
    try:
        facts["pod"] = procfs.read_environ(pid, ("HOSTNAME",)).get("HOSTNAME") or None
    except OSError:
        pass
    try:
        facts["namespace"] = (procfs.PROC / str(pid) / "root" / NAMESPACE_FILE).read_text().strip() or None
    except OSError:
        pass
    return facts


class PlacementReader:
    def __init__(self) -> None:
        self._cache: dict = {}  # (pid, start_ticks) -> Placement

    def read(self, pid: int, start_ticks: int, env: dict) -> Placement:
        key = (pid, start_ticks)
        if key not in self._cache:
            self._cache[key] = dataclasses.replace(from_environment(env), **_pod_facts(pid))
        return self._cache[key]

    def forget_except(self, alive: set) -> None:
        for key in [k for k in self._cache if k not in alive]:
            del self._cache[key]
