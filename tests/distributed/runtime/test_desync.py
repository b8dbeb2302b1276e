"""Ranks that enter different collectives are named, with both call sites, long before the
collective's timeout; a healthy DDP/FSDP run is left alone; the dumps read with torch's analyzer.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_desync.py -q``

The jobs run under the launcher with ``--timeout=300`` and a hard limit of 120 s for the whole
job: a verdict printed at all came before the collective timeout. The verdict states how long
after the divergence it was made, which is compared with the configured 300 s, never with a
wall-clock threshold a loaded machine could cross.
"""

import os
import re
import subprocess
import sys
import time

import pytest
import torch

from neural_arch.distributed.runtime import desync
from neural_arch.distributed.runtime.desync import Entry, Mismatch, explain, find_mismatch, recorder

PG_TIMEOUT = 300  # the process group's timeout the jobs run with
HARD_LIMIT = 120  # the test's own limit for a whole job


def _e(seq: int, op: str = "all_reduce", size: tuple = (4,), site: str = "") -> Entry:
    """An entry as the flight recorder has it; ``size=None``: no tensor (a barrier)."""
    sizes, dtypes = ((size,), ("Float",)) if size is not None else ((), ())
    return Entry("0", "default_pg", seq, op, sizes, dtypes, seq, 300_000, site)


# -- comparing fingerprints (no processes) ----------------------------------------------------


def test_equal_sequences_are_not_a_mismatch():
    ranks = {r: [_e(1), _e(2, "broadcast", (3,)), _e(3, "barrier", None)] for r in range(3)}
    assert find_mismatch(ranks) is None
    ranks[1] = ranks[1][:2]  # a rank that is behind (slow, or stopped) is not a desync
    assert find_mismatch(ranks) is None


def test_scatter_inputs_may_differ_all_reduce_shapes_may_not():
    scatter = {0: [_e(1, "scatter", (8,))], 1: [Entry("0", "", 1, "scatter", (), (), 1)]}
    assert find_mismatch(scatter) is None
    found = find_mismatch({0: [_e(1), _e(2, size=(2,))], 1: [_e(1), _e(2, size=(3,))]})
    assert found is not None and found.seq == 2


def test_a_skipped_call_is_named_as_a_skip_with_both_call_sites():
    # rank 0: A B C; rank 1 skipped A: B C, then destroy's barrier
    rank0 = [_e(1, site="s.py:9"), _e(2, site="s.py:10"), _e(3, site="s.py:11")]
    rank1 = [_e(1, site="s.py:10"), _e(2, site="s.py:11"), _e(3, "barrier", None, site="s.py:12")]
    found = find_mismatch({0: rank0, 1: rank1})
    assert found is not None and found.seq == 3
    line, named = explain(found, {0: rank0, 1: rank1}, 3 * 10**9, "/tmp/d")
    assert named == [1]
    assert "rank 1 skipped all_reduce((4,) float32) at s.py:9 (rank 0's collective #1); " in line, line
    assert "rank 1's #1 is all_reduce((4,) float32) at s.py:10, rank 0's #2" in line, line


def test_a_rank_dependent_branch_is_not_taken_for_a_skip():
    # rank 0 broadcasts from line 5, the others from line 7 (if rank == 0: ... else: ...), then the
    # same call; a later op mismatch is reported as such, not blamed on the branch.
    rank0 = [_e(1, "broadcast", site="b.py:5"), _e(2, site="b.py:9"), _e(3, site="b.py:10")]
    rank1 = [_e(1, "broadcast", site="b.py:7"), _e(2, site="b.py:9"), _e(3, size=(5,), site="b.py:10")]
    found = find_mismatch({0: rank0, 1: rank1})
    line, named = explain(found, {0: rank0, 1: rank1}, 0, "/tmp/d")
    assert "at collective #3 rank 1 entered all_reduce((5,) float32) at b.py:10 while rank 0 entered " in line, line
    assert "skipped" not in line and named == [1]


def test_the_odd_rank_out_of_three_is_named():
    rows = {r: [_e(1, site="t.py:3"), _e(2, site="t.py:4")] for r in (0, 1, 2)}
    rows[2] = [_e(1, site="t.py:3"), _e(2, "broadcast", site="t.py:6")]
    line, named = explain(find_mismatch(rows), rows, 0, "/tmp/d")
    assert named == [2] and "rank 2 entered broadcast((4,) float32) at t.py:6 while ranks 0, 1 entered" in line, line


def test_of_three_ranks_the_one_that_skipped_is_named():
    full = [_e(1, site="k.py:2"), _e(2, size=(8,), site="k.py:3"), _e(3, site="k.py:4")]
    skipped = [_e(1, size=(8,), site="k.py:3"), _e(2, site="k.py:4")]
    rows = {0: full, 1: full, 2: skipped}
    line, named = explain(find_mismatch(rows), rows, 0, "/tmp/d")
    assert named == [2], line
    assert "rank 2 skipped all_reduce((4,) float32) at k.py:2 (ranks 0, 1's collective #1); " in line, line


def test_call_site_skips_torch_this_runtime_and_the_standard_library():
    torch_dir = os.path.dirname(torch.__file__)
    frames = [
        {"filename": f"{torch_dir}/distributed/distributed_c10d.py", "line": 3245},
        {"filename": desync.fingerprints.__file__, "line": 1},
        {"filename": os.path.join(os.path.dirname(os.__file__), "contextlib.py"), "line": 81},
        {"filename": os.path.abspath("train.py"), "line": 42},
    ]
    assert desync.call_site(frames) == "train.py:42"


def test_symbolizing_does_not_import_the_compiler():
    if "torch._inductor" in sys.modules:
        pytest.skip("this process already imported torch's compiler")
    with recorder.compiler_not_imported():
        assert hasattr(torch, "_inductor")
    assert "_inductor" not in vars(torch) and "torch._inductor" not in sys.modules


def test_verdict_timing_is_measured_from_the_divergence():
    found = Mismatch("0", 2, {0: _e(2), 1: _e(2, size=(3,))})
    found.at[1] = Entry("0", "default_pg", 2, "all_reduce", ((3,),), ("Float",), 2 * 10**9, 300_000, "x.py:1")
    line, _ = explain(found, {0: [found.at[0]], 1: [found.at[1]]}, 3_500_000_000, "/tmp/d")
    assert "Named 1.5 s after the ranks' collectives #2 diverged, of the 300 s the process group would wait" in line


# -- real jobs (two gloo ranks under the launcher) --------------------------------------------

SKIP = """
import torch
import torch.distributed as dist
import neural_arch.distributed as nd

nd.init_process_group()
x = torch.ones(4)
if dist.get_rank() != 1:
    dist.all_reduce(x)  # A: rank 1 skips this one
dist.all_reduce(torch.ones(4))  # B
dist.all_reduce(torch.ones(4))  # C
nd.destroy_process_group()
"""

SHAPE = """
import torch
import torch.distributed as dist
import neural_arch.distributed as nd

nd.init_process_group()
dist.all_reduce(torch.ones(2))
dist.all_reduce(torch.ones(2 if dist.get_rank() == 0 else 3))  # S: another shape on rank 1
for _ in range(3):
    dist.all_reduce(torch.ones(2))
nd.destroy_process_group()
"""

DDP_LOOP = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import neural_arch.distributed as nd

nd.init_process_group()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    loss = model(torch.randn(4, 8)).pow(2).mean()  # F: DDP broadcasts the buffers here
    opt.zero_grad()
    loss.backward()
    opt.step()
    logged = loss.detach().clone()
    if not (dist.get_rank() == 1 and step == 3):
        dist.all_reduce(logged)  # L: rank 1 skips it at step 3
nd.destroy_process_group()
"""


def _line(script: str, marker: str) -> int:
    return next(i for i, text in enumerate(script.splitlines(), 1) if f"# {marker}" in text)


def _run_job(tmp_path, name: str, script: str) -> str:
    path = tmp_path / name
    path.write_text(script)
    dumps = tmp_path / "tmp"
    dumps.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "neural_arch.distributed.launcher", "--nproc_per_node=2", "--max_restarts=0"]
        + [f"--timeout={PG_TIMEOUT}", name],
        capture_output=True,
        text=True,
        timeout=HARD_LIMIT,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=str(dumps)),  # the dumps go to tmp_path
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    return out


def _verdict(out: str) -> str:
    found = re.search(r"\[rank 0\] neural_arch: (collective desync in .*)", out)
    assert found, out
    line = found.group(1)
    named_after = float(re.search(r"Named ([0-9.]+) s after", line).group(1))
    assert named_after < PG_TIMEOUT and f"of the {PG_TIMEOUT} s the process group would wait" in line, line
    assert "timed out" not in out, out
    return line


@pytest.mark.multiprocess
def test_a_skipped_all_reduce_is_named_with_both_call_sites(tmp_path):
    out = _run_job(tmp_path, "skip.py", SKIP)
    line = _verdict(out)
    a, b = _line(SKIP, "A"), _line(SKIP, "B")
    assert f"rank 1 skipped all_reduce((4,) float32) at skip.py:{a} (rank 0's collective #1); " in line, line
    assert f"rank 1's #1 is all_reduce((4,) float32) at skip.py:{b}, rank 0's #2" in line, line
    # The dump is what torch's flight-recorder analyzer reads; it finds the same rank.
    directory = re.search(r"Flight-recorder dumps: (\S+)", line).group(1)
    assert sorted(os.listdir(directory)) == ["rank_0", "rank_1"]
    analyzer = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", directory],
        capture_output=True,
        text=True,
        timeout=HARD_LIMIT,
    )
    report = analyzer.stdout + analyzer.stderr
    assert analyzer.returncode == 0, report
    assert "Culprit rank 1; Error type: COLLECTIVE_TYPE_MISMATCH" in report, report


@pytest.mark.multiprocess
def test_an_all_reduce_of_another_shape_is_named(tmp_path):
    out = _run_job(tmp_path, "shape.py", SHAPE)
    line = _verdict(out)
    s = _line(SHAPE, "S")
    assert (
        f"at collective #2 rank 1 entered all_reduce((3,) float32) at shape.py:{s} "
        f"while rank 0 entered all_reduce((2,) float32) at shape.py:{s}"
    ) in line, line


@pytest.mark.multiprocess
def test_a_skip_inside_a_ddp_loop_is_named_with_both_call_sites(tmp_path):
    out = _run_job(tmp_path, "ddp_loop.py", DDP_LOOP)
    line = _verdict(out)
    f, lg = _line(DDP_LOOP, "F"), _line(DDP_LOOP, "L")
    # rank 1 went on to the next step's forward, where DDP broadcasts the BatchNorm buffers
    assert f"rank 1 entered broadcast((32,) float32) at ddp_loop.py:{f} " in line, line
    assert f"rank 0 entered all_reduce(() float32) at ddp_loop.py:{lg}" in line, line
    assert "CollectiveDesync" in out  # rank 0's main thread raised it, with a traceback


# -- a healthy run is left alone --------------------------------------------------------------


def _healthy(rank: int, world_size: int) -> tuple:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    import neural_arch.distributed as nd
    from neural_arch.distributed.runtime import heartbeat

    nd.init_process_group()
    torch.manual_seed(0)
    ddp = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 1)))
    fsdp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))
    for layer in fsdp:
        fully_shard(layer)
    fully_shard(fsdp)
    x = torch.ones(3)
    end = time.monotonic() + 4 * heartbeat.INTERVAL  # several beats: rank 0 compares on each
    go = torch.ones(1)
    while go.item():
        ddp(torch.randn(4, 8)).sum().backward()
        fsdp(torch.randn(4, 8)).sum().backward()
        if rank == 0:  # the same collective from rank-dependent lines is no desync
            dist.broadcast(x, 0)
        else:
            dist.broadcast(x, 0)
        nd.all_reduce(torch.ones(2))
        dist.barrier()
        time.sleep(0.05)
        go = torch.tensor([float(time.monotonic() < end)])
        dist.broadcast(go, 0)  # rank 0's clock decides for all: the ranks run the same iterations
    checker = heartbeat._running[0].checker
    return checker.comparisons, desync.verdict()


@pytest.mark.multiprocess
def test_a_healthy_ddp_and_fsdp_run_is_silent():
    from tests.helpers.multiproc import run_ranks

    (compared, verdict0), (_, verdict1) = run_ranks(_healthy, 2, timeout=HARD_LIMIT)
    assert compared >= 2, compared  # the check was on and compared the ranks' collectives
    assert verdict0 is None and verdict1 is None
