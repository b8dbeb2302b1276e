"""A node joins a multi-node job only when it presents that job's token.

Use (the launcher does, right after connecting to the rendezvous store)::

    token = resolve_job_token(config.job_token, config.run_id, detect_cluster_env())
    claim_job(store, token, "node0:29400")  # ForeignJobError when the store serves another job

Where the token comes from, first found wins: ``--job-token``, ``--rdzv-id``, the scheduler's
job id (SLURM_JOB_ID, LSB_JOBID: read by ``neural_arch.distributed.env``). Every node of one
job has the same one; two jobs pointed at one host and port by mistake have different ones.

How it is checked: the first agent to reach the store writes the token's SHA-256 under
``neural_arch/job_token`` with an atomic compare-and-set; every later agent's compare-and-set
returns the digest already there, and a different digest means another job: the agent stops
with one line before it touches a rendezvous key. This keeps stray and foreign jobs apart;
it is not authentication against someone who can reach the port (the store has none, and
anyone who can read the key can present its digest): see docs/security.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist

from neural_arch.distributed.env import ClusterEnv

TOKEN_KEY = "neural_arch/job_token"


class ForeignJobError(RuntimeError):
    """The rendezvous store belongs to another job: the launcher prints it as one line and exits 2."""


@dataclass(frozen=True)
class JobToken:
    """What a node presents to join a job."""

    value: str
    """The token itself (never stored: only its digest is)."""
    source: str
    """Where it came from, for messages (``--job-token``, ``--rdzv-id``, ``the slurm job id``)."""

    def digest(self) -> str:
        """What the store holds: SHA-256 of the token, so the store does not reveal a secret one."""
        return hashlib.sha256(self.value.encode()).hexdigest()


def resolve_job_token(
    explicit: Optional[str], run_id: Optional[str], cluster: Optional[ClusterEnv]
) -> Optional[JobToken]:
    """The token this node presents (None: nothing tells this job from another)."""
    if explicit:
        return JobToken(explicit, "--job-token")
    if run_id:
        return JobToken(run_id, "--rdzv-id")
    if cluster is not None and cluster.job_id and cluster.source != "torchrun":
        return JobToken(cluster.job_id, f"the {cluster.source} job id")
    return None


def claim_job(store: dist.Store, token: JobToken, where: str) -> None:
    """Join the job at ``where`` (HOST:PORT) if it is ours; ``ForeignJobError`` if it is not."""
    mine = token.digest()
    held = store.compare_set(TOKEN_KEY, "", mine).decode()
    if held != mine:
        raise ForeignJobError(
            f"refusing to join the rendezvous at {where}: it belongs to another job (its job token differs from this "
            f"node's, which comes from {token.source}); give every node of one job the same --job-token or --rdzv-id, "
            "or use another --master-port for this job."
        )
