"""One PowerSGD step on one DDP bucket: rank-r compression with error feedback and warm start.

Use: ``PowerSGDCompressor`` (powersgd.py) calls ``plan_bucket`` once per bucket layout and
``compress(grads, plan, memory, world, all_reduce)`` on every compressed step; the gradients (views
of the bucket's flat buffer) then hold the compressed average, the same on every rank.

For each gradient matrix of the bucket (a weight viewed as rows x cols), with M_i = rank i's
gradient + its error feedback, Q the previous step's Q (warm start) and W ranks:
    Q <- orthonormal columns   (its columns lean towards one direction after the last step; an
                                all-zero column, left by a step whose M was zero, restarts)
    P = sum_i M_i Q            one all-reduce, together with the bucket's exact tensors
    P <- orthonormal columns   (Gram-Schmidt, each projection removed twice)
    Q = sum_i M_i^T P / W      one all-reduce
    gradient = P Q^T           the mean of the M_i projected onto span(P): one power iteration
    error_i  = M_i - P Q^T     what rank i's gradient lost this step; added back next step
Vectors (biases, norms) and matrices too thin to gain ((rows + cols) * r * 2 >= rows * cols)
are all-reduced exactly. P and Q are kept in their transposed (r x n) forms: on CPU a matrix
product with r output rows reads M once at memory speed for small r, about twice as fast as
one with r output columns; ``project`` picks the faster form for P per rank.

This replaces torch's ``powerSGD_hook``, which does more memory work per step (it divides,
clones and subtracts the whole bucket, and keeps error feedback for the exact tensors too;
benchmarks/compression/ compares the two). Per compressed matrix this step adds the gradient
to the error (M), reads M twice for the two products, writes the gradient and updates M in
place to the new error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch


@dataclass(frozen=True)
class Matrix:
    """A gradient compressed as a rows x cols matrix at ``rank``; ``index`` in the bucket's gradient list."""

    index: int
    rows: int
    cols: int
    rank: int


@dataclass(frozen=True)
class Plan:
    """Which of a bucket's gradients are compressed and which are sent exactly."""

    matrices: tuple[Matrix, ...]
    exact: tuple[int, ...]

    @property
    def error_size(self) -> int:
        return sum(m.rows * m.cols for m in self.matrices)

    @property
    def q_size(self) -> int:
        return sum(m.rank * m.cols for m in self.matrices)


@dataclass
class Memory:
    """What one bucket carries from step to step on one rank."""

    error: torch.Tensor
    """This rank's error feedback: every compressed matrix, flat, in plan order."""
    q: torch.Tensor
    """The last Q^T of every compressed matrix, flat (the same on every rank): the next step's start."""


def plan_bucket(grads: Sequence[torch.Tensor], rank: int) -> Plan:
    """Compress a gradient with >= 2 dimensions when its rank-``rank`` factors are under half its size."""
    matrices, exact = [], []
    for i, g in enumerate(grads):
        rows = g.shape[0] if g.dim() > 1 else 0
        cols = g.numel() // rows if rows else 0
        r = min(rank, rows, cols)
        if rows and (rows + cols) * r * 2 < rows * cols:
            matrices.append(Matrix(i, rows, cols, r))
        else:
            exact.append(i)
    return Plan(tuple(matrices), tuple(exact))


def first_memory(plan: Plan, bucket_index: int, like: torch.Tensor) -> Memory:
    """Zero error and a Gaussian Q drawn from a seed fixed by the bucket and matrix: equal on every
    rank without a broadcast, and the same in a rerun."""
    parts = []
    for k, m in enumerate(plan.matrices):
        gen = torch.Generator().manual_seed(1_000_003 * (bucket_index + 1) + k)
        parts.append(torch.randn(m.rank * m.cols, generator=gen, dtype=like.dtype).to(like.device))
    q = torch.cat(parts) if parts else like.new_zeros(0)
    return Memory(error=like.new_zeros(plan.error_size), q=q)


def _split(flat: torch.Tensor, shapes: Sequence[tuple[int, int]]) -> list[torch.Tensor]:
    return [part.view(shape) for part, shape in zip(flat.split([a * b for a, b in shapes]), shapes)]


def orthonormalize_rows(rows: torch.Tensor) -> None:
    """Gram-Schmidt on the rows of an r x n matrix, in place; a zero row stays zero.

    Each row loses its projection onto the rows before it twice over ("twice is enough": as
    accurate as modified Gram-Schmidt) in two matrix-vector products a pass, instead of one dot
    product per earlier row: fewer, larger operations for the same result."""
    tiny = torch.finfo(rows.dtype).tiny
    for i in range(rows.shape[0]):
        row, done = rows[i], rows[:i]
        for _ in range(2 if i else 0):
            row.sub_(torch.mv(done.t(), torch.mv(done, row)))
        row.div_(row.norm().clamp_min(tiny))


def refill_zero_rows(qt: torch.Tensor) -> None:
    """Give every all-zero row of Q^T (r x n) a fixed start, the same on every rank: row i becomes
    cos(pi (i + 1) (j + 1/2) / n), j = 0..n-1 (the rows are orthogonal to each other).

    Why: a matrix whose gradient is exactly zero on every rank for one step (a branch or an
    embedding row not used, a layer frozen for a while) gets P = M Q = 0 and then Q = P^T M = 0.
    From a zero Q no later gradient can get through: the matrix would be sent as zero for the
    rest of the run while its error feedback grows. Without a host sync (``.item()``), so that
    a GPU does not stall: computed for every row, kept only where the row is zero (cheap next
    to the products, which read the whole gradient)."""
    r, n = qt.shape
    freq = torch.arange(1, r + 1, dtype=qt.dtype, device=qt.device)
    pos = torch.arange(n, dtype=qt.dtype, device=qt.device).add_(0.5).mul_(torch.pi / n)
    zero = qt.abs().amax(dim=1, keepdim=True) == 0
    qt.copy_(torch.where(zero, torch.cos(torch.outer(freq, pos)), qt))


def project(qt: torch.Tensor, mat: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (r x rows) = Q^T M^T. On a CPU thread (MKL) Q^T M^T with r output rows reads M at
    memory speed for r <= 2 but not beyond, where M Q with r output columns, transposed
    afterwards, is faster."""
    if qt.shape[0] <= 2:
        torch.mm(qt, mat.t(), out=out)
    else:
        out.copy_(torch.mm(mat, qt.t()).t())


def compress(
    grads: Sequence[torch.Tensor], plan: Plan, memory: Memory, world: int, all_reduce: Callable[[torch.Tensor], object]
) -> None:
    """One step on one bucket, in place: ``grads`` end as the compressed average, ``memory`` as the next step's.
    ``all_reduce(t)`` sums ``t`` in place over the ``world`` ranks before returning (``dist.all_reduce``;
    a benchmark can pass one that sends nothing, to time the compute alone)."""
    mats = [grads[m.index].view(m.rows, m.cols) for m in plan.matrices]
    errors = _split(memory.error, [(m.rows, m.cols) for m in plan.matrices])
    q_old = _split(memory.q, [(m.rank, m.cols) for m in plan.matrices])
    exact = [grads[i] for i in plan.exact]
    n_exact = sum(g.numel() for g in exact)
    like = grads[0]  # every gradient of a bucket has the same dtype and device
    send = like.new_empty(n_exact + sum(m.rank * m.rows for m in plan.matrices))
    if exact:
        torch.cat([g.reshape(-1) for g in exact], out=send[:n_exact])
    p = _split(send[n_exact:], [(m.rank, m.rows) for m in plan.matrices])
    # M_i is built in the error buffer, not in the gradient: the new error is then an in-place
    # addmm_ on it, where writing it from M into another buffer would copy M first (a second
    # pass over the whole matrix).
    for mat, err, qt, pt in zip(mats, errors, q_old, p):
        err.add_(mat)
        # Q's columns are orthonormalised first, as in subspace iteration: M^T P's columns all lean
        # towards M's top singular vector, and P = M Q from them would lose the second direction.
        refill_zero_rows(qt)
        orthonormalize_rows(qt)
        project(qt, err, out=pt)  # P^T = Q^T M^T
    all_reduce(send)
    if exact:
        send[:n_exact].div_(world)
        for g, part in zip(exact, send[:n_exact].split([g.numel() for g in exact])):
            g.copy_(part.view_as(g))
    q_new = like.new_empty(plan.q_size)
    qs = _split(q_new, [(m.rank, m.cols) for m in plan.matrices])
    for err, pt, qt in zip(errors, p, qs):
        orthonormalize_rows(pt)
        torch.mm(pt, err, out=qt)  # Q^T = P^T M
    all_reduce(q_new)
    q_new.div_(world)
    for mat, err, pt, qt in zip(mats, errors, p, qs):
        torch.mm(pt.t(), qt, out=mat)  # the gradient: P Q^T
        err.addmm_(pt.t(), qt, alpha=-1)  # error = M - P Q^T
    memory.q = q_new
