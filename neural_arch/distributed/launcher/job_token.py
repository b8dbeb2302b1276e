"""A node joins a multi-node job only after proving it holds that job's token.

Use (the launcher does; ``gate.py`` runs the two sides on every connection to a job's store)::

    token = resolve_job_token(config.job_token, config.job_token_file, config.run_id, cluster)
    why_not = challenge(sock, token)      # on the host: None when the peer proved the token
    respond(sock, token, "node0:29400")   # on a joining node: ForeignJobError when refused

Where the token comes from, first found wins: ``--job-token``, ``--job-token-file PATH``, the
environment variable ``NEURAL_ARCH_JOB_TOKEN``, ``--rdzv-id``, the scheduler's job id
(SLURM_JOB_ID, LSB_JOBID: read by ``neural_arch.distributed.env``). Every node of one job has
the same one. A file or the environment keeps a secret out of ``/proc/PID/cmdline``, which
every user of the machine can read.

How it is checked (the host's duty, on every connection, before the peer reaches a store):
the host sends a fresh random nonce; the peer answers HMAC-SHA256(token, "node" + both
nonces) and its own nonce; the host checks it and answers HMAC-SHA256(token, "host" + both
nonces), which the peer checks in turn. The token never crosses the network and is stored
nowhere (no store key holds it or a digest of it); a recorded answer is worthless for the
next connection, whose nonce differs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from neural_arch.distributed.env import ClusterEnv

TOKEN_ENV = "NEURAL_ARCH_JOB_TOKEN"
HELLO = b"neural_arch job token v1\n"
"""What the host sends before its nonce: a peer that gets anything else is not talking to a gate."""
NONCE_BYTES = 32
PROOF_BYTES = 32
HANDSHAKE_SECONDS = 10.0
"""How long either side waits for the other's half of the handshake."""


class ForeignJobError(RuntimeError):
    """This node and the host disagree on the job token: the launcher prints it as one line and exits 2."""


@dataclass(frozen=True)
class JobToken:
    """What a node proves it holds to join a job."""

    value: str
    """The token itself (kept in memory only)."""
    source: str
    """Where it came from, for messages (``--job-token``, ``--rdzv-id``, ``the slurm job id``)."""


def resolve_job_token(
    explicit: Optional[str],
    token_file: Optional[str],
    run_id: Optional[str],
    cluster: Optional[ClusterEnv],
    environ: Mapping[str, str] = os.environ,
) -> Optional[JobToken]:
    """The token this node proves (None: nothing tells this job from another); ``ValueError``
    in one line for a token file that cannot be read or is empty."""
    if explicit:
        return JobToken(explicit, "--job-token")
    if token_file:
        return JobToken(read_token_file(token_file), f"--job-token-file {token_file}")
    if environ.get(TOKEN_ENV):
        return JobToken(environ[TOKEN_ENV], TOKEN_ENV)
    if run_id:
        return JobToken(run_id, "--rdzv-id")
    if cluster is not None and cluster.job_id and cluster.source != "torchrun":
        return JobToken(cluster.job_id, f"the {cluster.source} job id")
    return None


def read_token_file(path: str) -> str:
    """The token in ``path`` (its first line, without the newline)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(
            f"--job-token-file {path}: cannot read it ({reason}); give a readable file holding the token."
        ) from None
    token = text.splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise ValueError(f"--job-token-file {path} is empty; write the job's token on its first line.")
    return token


def _mac(token: JobToken, role: bytes, host_nonce: bytes, node_nonce: bytes) -> bytes:
    return hmac.new(token.value.encode(), role + host_nonce + node_nonce, hashlib.sha256).digest()


def _receive(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes, or fewer if the peer closed or went quiet (socket timeout)."""
    data = b""
    try:
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:  # timeout or reset: what arrived is all there is
        pass
    return data


def challenge(sock: socket.socket, token: JobToken) -> Optional[str]:
    """The host's half on a fresh connection: None when the peer proved ``token``, else why not
    (for the host's one-line refusal). ``sock`` should have a timeout (``HANDSHAKE_SECONDS``)."""
    host_nonce = secrets.token_bytes(NONCE_BYTES)
    try:
        sock.sendall(HELLO + host_nonce)
    except OSError:
        return "it closed the connection before the handshake"
    reply = _receive(sock, PROOF_BYTES + NONCE_BYTES)
    if len(reply) < PROOF_BYTES + NONCE_BYTES:
        return "it sent no proof of the job token (started without one, or not a neural-arch launcher)"
    proof, node_nonce = reply[:PROOF_BYTES], reply[PROOF_BYTES:]
    if not hmac.compare_digest(proof, _mac(token, b"node", host_nonce, node_nonce)):
        return "its proof of the job token is wrong (another job's token)"
    try:
        sock.sendall(_mac(token, b"host", host_nonce, node_nonce))
    except OSError:
        return "it closed the connection during the handshake"
    return None


def respond(sock: socket.socket, token: JobToken, where: str) -> None:
    """The joining node's half: prove ``token`` to the host at ``where`` (HOST:PORT) and check
    the host's proof; ``ForeignJobError`` when the host refuses or is not of this job."""
    hello = _receive(sock, len(HELLO) + NONCE_BYTES)
    if not hello.startswith(HELLO) or len(hello) < len(HELLO) + NONCE_BYTES:
        raise ForeignJobError(
            f"refusing to join the rendezvous at {where}: it belongs to another job (it asks for no job token, "
            f"while this node's comes from {token.source}); start every node of one job with the same --job-token, "
            "--job-token-file or --rdzv-id, or use another --master-port for this job."
        )
    host_nonce, node_nonce = hello[len(HELLO) :], secrets.token_bytes(NONCE_BYTES)
    sock.sendall(_mac(token, b"node", host_nonce, node_nonce) + node_nonce)
    answer = _receive(sock, PROOF_BYTES)
    if not hmac.compare_digest(answer.ljust(PROOF_BYTES, b"\0"), _mac(token, b"host", host_nonce, node_nonce)):
        raise ForeignJobError(
            f"refusing to join the rendezvous at {where}: it belongs to another job (its job token differs from this "
            f"node's, which comes from {token.source}); give every node of one job the same --job-token, "
            "--job-token-file or --rdzv-id, or use another --master-port for this job."
        )
