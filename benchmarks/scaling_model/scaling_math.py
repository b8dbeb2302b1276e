"""The step-time model behind scaling_model.py (not run on its own): ring all-reduce, buckets, overlap.

A data-parallel step on N ranks at a fixed per-rank batch (weak scaling) is
    forward + backward + exposed communication + optimizer,
with the gradients sent in DDP's buckets (1 MiB first, then 25 MiB, filled in the order the
gradients become ready in backward, as torch DDP rebuilds them after step 1). Bucket k can
start when its last gradient is ready and when bucket k-1 is done (one communication
stream); a ring all-reduce of S bytes on N ranks takes 2(N-1) alpha + 2(N-1)/N S / B, where
B is the link's bus bandwidth in the sense of nccl-tests' busbw. With **overlap** only what
runs past the end of backward is exposed (network links: the NIC moves the bytes while the
cores compute); **serial** adds every bucket's time (this machine's loopback gloo, where the
copies and sums run on the same 2 cores as the training).

On more than one rank DDP also scales every gradient into its bucket and copies the bucket
back (torch's default): measured, and added to the compute.

Compression changes what a bucket sends: fp16/bf16 half the bytes plus the measured cast
time; PowerSGD rank r sends (m + n) r values per m x n matrix in two all-reduces, one after
the other: P with every uncompressed tensor of the bucket, then Q; plus the measured compute
of ``low_rank.compress`` (which sends a matrix exactly when (m + n) r' 2 >= m n, r' = min(r, m, n)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FIRST_BUCKET = 1 << 20
BUCKET = 25 << 20


@dataclass(frozen=True)
class Link:
    """A network as the model sees it: per-hop latency (s) and bus bandwidth (bytes/s)."""

    name: str
    alpha: float
    bandwidth: float


GB = 1e9
LINKS = (
    # Ethernet line rates (IEEE 802.3: 10GBASE-*, 25GBASE-*, 100GBASE-*) at 90% as TCP goodput;
    # latencies are typical kernel-TCP figures (an assumption: nothing here measures them).
    Link("10 GbE", 25e-6, 0.9 * 1.25 * GB),
    Link("25 GbE", 20e-6, 0.9 * 3.125 * GB),
    Link("100 GbE", 15e-6, 0.9 * 12.5 * GB),
    # NCCL-class RDMA (InfiniBand EDR 100, HDR 200, NDR 400 Gb/s per port, or RoCE) at 90% of
    # line rate as busbw, 5 us per ring hop.
    Link("NCCL 100 Gb/s", 5e-6, 0.9 * 12.5 * GB),
    Link("NCCL 200 Gb/s", 5e-6, 0.9 * 25 * GB),
    Link("NCCL 400 Gb/s", 5e-6, 0.9 * 50 * GB),
)
COMPRESSIONS = ("none", "fp16", "powersgd4")


def ring(nbytes: float, n: int, link: Link) -> float:
    """Seconds of one ring all-reduce of ``nbytes`` on ``n`` ranks."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) * link.alpha + 2 * (n - 1) / n * nbytes / link.bandwidth


def buckets(prof: dict[str, Any]) -> list[tuple[float, list[int]]]:
    """(ready time after backward starts, parameter indices) per bucket, in ready order."""
    order = sorted(range(len(prof["bytes"])), key=lambda i: prof["ready"][i])
    out: list[tuple[float, list[int]]] = []
    current: list[int] = []
    size = 0
    for i in order:
        current.append(i)
        size += prof["bytes"][i]
        if size >= (FIRST_BUCKET if not out else BUCKET):
            out.append((max(prof["ready"][j] for j in current), current))
            current, size = [], 0
    if current:
        out.append((max(prof["ready"][j] for j in current), current))
    return out


def bucket_seconds(prof: dict[str, Any], members: list[int], n: int, link: Link, compression: str) -> float:
    """Communication (and compression compute) of one bucket on ``n`` ranks."""
    nbytes = sum(prof["bytes"][i] for i in members)
    share = nbytes / sum(prof["bytes"])  # this bucket's part of the whole-gradient compute cost
    if n <= 1:
        return 0.0
    if compression == "none":
        return ring(nbytes, n, link)
    if compression == "fp16":
        return ring(nbytes / 2, n, link) + share * prof["compress"]["fp16"]
    r = int(compression.removeprefix("powersgd"))
    p_bytes, q_bytes, rest = 0, 0, 0
    for i in members:
        shape = prof["shapes"][i]
        m = shape[0]
        k = prof["bytes"][i] // 4 // max(m, 1)  # float32 gradients, viewed as m x k
        rr = min(r, m, k)
        if len(shape) > 1 and (m + k) * rr * 2 < m * k:
            p_bytes, q_bytes = p_bytes + m * rr * 4, q_bytes + k * rr * 4
        else:
            rest += prof["bytes"][i]
    # Q is computed from the all-reduced P, so the two cannot run at once; exact tensors travel with P.
    return ring(p_bytes + rest, n, link) + ring(q_bytes, n, link) + share * prof["compress"][f"powersgd{r}"]


def step_time(prof: dict[str, Any], n: int, link: Link, compression: str = "none", overlap: bool = True) -> float:
    """Predicted seconds per step on ``n`` ranks."""
    compute = prof["forward"] + prof["backward"] + prof["optimizer"]
    if n > 1:  # DDP's copies of the gradient into its buckets and back, on the rank's own core
        compute += prof.get("ddp_copies", 0.0)
    end = 0.0
    total = 0.0
    for ready, members in buckets(prof):
        seconds = bucket_seconds(prof, members, n, link, compression)
        end = max(end, ready) + seconds
        total += seconds
    exposed = max(0.0, end - prof["backward"]) if overlap else total
    return compute + exposed


def efficiency(prof: dict[str, Any], n: int, link: Link, compression: str = "none") -> float:
    """Weak-scaling efficiency: one rank's step time over the step time on ``n`` ranks."""
    return step_time(prof, 1, link) / step_time(prof, n, link, compression)
