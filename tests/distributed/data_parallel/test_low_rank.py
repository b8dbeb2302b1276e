"""PowerSGD's step (``low_rank.compress``) on 2 real gloo ranks against a reference computed here
from every rank's gathered matrices.

Run: ``.venv/bin/python -m pytest tests/distributed/data_parallel/test_low_rank.py``

float64 throughout. Each of 6 steps feeds every rank its own random gradient. Per step and per
compressed matrix the reference is: M_i = G_i + error_i, P = sum_i M_i Q (Q: the memory's Q
before the step), P_hat = the Q factor of P's QR decomposition (an independent orthonormal basis
of span(P); the projection P_hat P_hat^T does not depend on which basis), gradient = P_hat P_hat^T
mean_i(M_i), error_i = M_i - gradient. Tolerance 1e-12 relative to the largest element. The
exactly-sent tensors must equal (G_0 + G_1) / 2 bit for bit, the result must be bitwise the same
on both ranks, and error feedback must lose nothing: the sum of the applied gradients plus the
mean of the final errors equals the sum of the true mean gradients (1e-12 relative).
"""

import pytest
import torch

from neural_arch.distributed import all_gather, init_process_group
from neural_arch.distributed.data_parallel.low_rank import compress, first_memory, plan_bucket
from tests.helpers.multiproc import run_ranks

SHAPES = [(6,), (24, 40), (3, 5), (40, 3, 4)]  # a vector, a matrix, one too small to gain, a 3-d weight
STEPS = 6


def views(flat: torch.Tensor) -> list[torch.Tensor]:
    sizes = [torch.Size(s).numel() for s in SHAPES]
    return [part.view(s) for part, s in zip(flat.split(sizes), SHAPES)]


def reference(ms: list[torch.Tensor], q: torch.Tensor) -> torch.Tensor:
    """The compressed mean of the ranks' matrices ``ms`` (rows x cols), starting from Q^T = ``q``."""
    p = sum(m @ q.t() for m in ms)
    basis = torch.linalg.qr(p).Q
    return basis @ basis.t() @ (sum(ms) / len(ms))


def worker(rank: int, world: int, approximation_rank: int) -> dict:
    init_process_group(backend="gloo")
    flat = torch.zeros(sum(torch.Size(s).numel() for s in SHAPES), dtype=torch.float64)
    grads = views(flat)
    plan = plan_bucket(grads, approximation_rank)
    memory = first_memory(plan, 0, flat)
    worst, applied, true_mean, exact_equal, same_on_ranks = (
        0.0,
        torch.zeros_like(flat),
        torch.zeros_like(flat),
        True,
        True,
    )
    for step in range(STEPS):
        local = torch.randn(flat.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(10 * step + rank))
        flat.copy_(local)
        q_before, error_before = memory.q.clone(), memory.error.clone()
        compress(grads, plan, memory, world, torch.distributed.all_reduce)
        all_local = all_gather(local)
        true_mean += sum(all_local) / world
        applied += flat
        same_on_ranks &= all(torch.equal(x, flat) for x in all_gather(flat.clone()))
        for i in plan.exact:
            expect = views(all_local[0])[i] + views(all_local[1])[i]
            exact_equal &= torch.equal(grads[i], expect / 2)
        offset_e = offset_q = 0
        for m in plan.matrices:
            size_e, size_q = m.rows * m.cols, m.rank * m.cols
            err_before = error_before[offset_e : offset_e + size_e].view(m.rows, m.cols)
            mine = views(local)[m.index].reshape(m.rows, m.cols) + err_before
            ms = all_gather(mine)
            expect = reference(ms, q_before[offset_q : offset_q + size_q].view(m.rank, m.cols))
            scale = float(expect.abs().max())
            got_err = memory.error[offset_e : offset_e + size_e].view(m.rows, m.cols)
            worst = max(
                worst,
                float((grads[m.index].reshape(m.rows, m.cols) - expect).abs().max()) / scale,
                float((got_err - (mine - expect)).abs().max()) / scale,
            )
            offset_e, offset_q = offset_e + size_e, offset_q + size_q
    mean_error = torch.zeros_like(flat)  # the ranks' mean error, placed where its matrices sit in the bucket
    errors = sum(all_gather(memory.error)) / world
    offset_e = 0
    for m in plan.matrices:
        views(mean_error)[m.index].view(-1).copy_(errors[offset_e : offset_e + m.rows * m.cols])
        offset_e += m.rows * m.cols
    lost = float((applied + mean_error - true_mean).abs().max()) / float(true_mean.abs().max())
    return {"plan": plan, "worst": worst, "exact_equal": exact_equal, "same": same_on_ranks, "lost": lost}


@pytest.fixture(scope="module", params=[2, 4], ids=["r2", "r4"])
def run(request) -> dict:
    """Rank 2 and rank 4: ``low_rank.project`` takes a different matrix-product form for r > 2."""
    return {"r": request.param, "ranks": run_ranks(worker, world_size=2, args=(request.param,), timeout=120)}


@pytest.mark.multiprocess
def test_plan_compresses_weights_that_gain_and_sends_the_rest_exactly(run):
    plan, r = run["ranks"][0]["plan"], run["r"]
    assert [m.index for m in plan.matrices] == [1, 3] and plan.exact == (0, 2)
    assert [(m.rows, m.cols, m.rank) for m in plan.matrices] == [(24, 40, r), (40, 12, r)]


@pytest.mark.multiprocess
@pytest.mark.parametrize("rank", [0, 1])
def test_step_matches_the_reference_and_loses_nothing(run, rank):
    got = run["ranks"][rank]
    assert got["worst"] < 1e-12, got
    assert got["exact_equal"] and got["same"], got
    assert got["lost"] < 1e-12, got


def test_a_step_with_zero_gradients_does_not_stop_the_matrix_for_good():
    """One process (world 1, nothing to send). After a step whose gradients were all zero, Q is
    zero; the next step must still pass the new gradient through (before refill_zero_rows it
    sent zero from then on while the error grew). The next step's result is checked against the
    reference, from the restarted Q, and the error against M - gradient."""
    flat = torch.zeros(sum(torch.Size(s).numel() for s in SHAPES), dtype=torch.float64)
    grads = views(flat)
    plan = plan_bucket(grads, 2)
    memory = first_memory(plan, 0, flat)
    compress(grads, plan, memory, 1, lambda t: None)
    assert not memory.q.any() and not memory.error.any() and not flat.any()
    local = torch.randn(flat.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    flat.copy_(local)
    compress(grads, plan, memory, 1, lambda t: None)
    m = plan.matrices[0]
    mine = views(local)[m.index].reshape(m.rows, m.cols)
    got = grads[m.index].reshape(m.rows, m.cols)
    pos = (torch.arange(m.cols, dtype=torch.float64) + 0.5) * torch.pi / m.cols
    restart = torch.stack([torch.cos(k * pos) for k in range(1, m.rank + 1)])
    expect = reference([mine], restart / restart.norm(dim=1, keepdim=True))
    assert float(got.norm()) > 0.1 * float(mine.norm())
    assert float((got - expect).abs().max()) < 1e-12 * float(expect.abs().max())
    error = memory.error[: m.rows * m.cols].view(m.rows, m.cols)
    assert float((error - (mine - got)).abs().max()) < 1e-12 * float(mine.abs().max())
