"""CPU binding of local workers (``--cpu-bind``): the plan, the slices, and real workers' affinity.

Run: ``.venv/bin/python -m pytest tests/distributed/launcher/test_cpu_bind.py``
"""

import os
import subprocess

import pytest

from neural_arch.distributed.launcher.config import LaunchConfig
from neural_arch.distributed.launcher.cpu_bind import bind_worker, by_core, plan_binding, worker_slice
from tests.helpers.cli import LAUNCHER

SHOW = "import os; print('cpus', os.environ['LOCAL_RANK'], sorted(os.sched_getaffinity(0)), flush=True)"


def test_binds_only_when_the_workers_fill_the_cpus():
    cpus = list(range(8))
    assert plan_binding("auto", 2, {"OMP_NUM_THREADS": "4"}, cpus) == cpus
    assert plan_binding("auto", 8, {}, cpus) == cpus  # default threads: 8 // 8 = 1 each
    assert plan_binding("auto", 2, {"OMP_NUM_THREADS": "1"}, cpus) is None  # a quarter of a shared machine
    assert plan_binding("auto", 16, {"OMP_NUM_THREADS": "1"}, cpus) is None  # more workers than CPUs
    assert plan_binding("none", 8, {"OMP_NUM_THREADS": "1"}, cpus) is None
    with pytest.raises(ValueError, match="cpu_bind='cores'"):
        plan_binding("cores", 2, {}, cpus)
    with pytest.raises(ValueError, match="cpu_bind='all'"):
        LaunchConfig(nproc_per_node=2, cpu_bind="all")


def test_a_rank_is_bound_only_to_room_for_its_loader_workers():
    cpus = list(range(8))

    def plan(nproc: int, loader_workers):
        return plan_binding("auto", nproc, {"OMP_NUM_THREADS": str(8 // nproc)}, cpus, loader_workers=loader_workers)

    assert plan(2, 2) == cpus  # 4 CPUs a rank
    assert plan(4, 2) == cpus  # 2 CPUs a rank
    assert plan(4, 3) is None
    assert plan(4, None) == cpus  # unknown (a plain script): a set of 2 will do
    assert plan(8, None) is None  # never one core for a plain script
    assert plan(8, 0) == cpus  # told it starts none
    with pytest.raises(ValueError, match="loader_workers=-1"):
        LaunchConfig(nproc_per_node=2, loader_workers=-1)


def test_slices_are_disjoint_contiguous_and_cover_whole_blocks():
    cpus = [2, 3, 4, 5, 6, 7, 8]  # 7 CPUs of a SLURM allocation, 3 workers: 2 each, one left over
    slices = [worker_slice(cpus, r, 3) for r in range(3)]
    assert slices == [[2, 3], [4, 5], [6, 7]]
    assert worker_slice([0, 1], 1, 2) == [1]


@pytest.mark.multiprocess
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_launched_workers_get_their_own_cores_unless_told_not_to(tmp_path):
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    cpus = sorted(os.sched_getaffinity(0))[:2]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # taskset: the launcher may use exactly 2 CPUs, so 2 one-thread workers fill them
    base = ["taskset", "-c", ",".join(map(str, cpus)), *LAUNCHER, "--nproc_per_node=2"]
    # --loader-workers 0: the script starts no DataLoader workers, so a core each is room enough
    bound = subprocess.run(
        [*base, "--loader-workers", "0", str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert bound.returncode == 0, bound.stderr
    assert f"cpus 0 [{cpus[0]}]" in bound.stdout and f"cpus 1 [{cpus[1]}]" in bound.stdout, bound.stdout
    free = subprocess.run(
        [*base, "--cpu-bind", "none", str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert free.returncode == 0, free.stderr
    assert f"cpus 0 {cpus}" in free.stdout and f"cpus 1 {cpus}" in free.stdout, free.stdout


def test_hyperthreads_of_one_core_land_in_the_same_slice(tmp_path):
    # 2 cores x 2 threads, numbered as Linux does: cpu0/cpu2 are core 0, cpu1/cpu3 core 1
    for cpu, core in ((0, 0), (1, 1), (2, 0), (3, 1)):
        where = tmp_path / f"cpu{cpu}" / "topology"
        where.mkdir(parents=True)
        (where / "physical_package_id").write_text("0\n")
        (where / "core_id").write_text(f"{core}\n")
    order = by_core([0, 1, 2, 3], tmp_path)
    assert order == [0, 2, 1, 3]
    assert [worker_slice(order, r, 2) for r in range(2)] == [[0, 2], [1, 3]]
    assert by_core([7, 0], tmp_path) == [0, 7]  # cpu7 has no sysfs entry: a core of its own


def test_a_refused_binding_is_a_note_not_a_failure(capsys):
    bind_worker([10_000], 0, 1)  # no such CPU
    assert "local rank 0 runs unbound" in capsys.readouterr().err


LOADER = """
import torch
from torch.utils.data import DataLoader, TensorDataset

import neural_arch.distributed as nd

nd.init_process_group()
data = TensorDataset(torch.arange(10.0))
loader = DataLoader(data, batch_sampler=nd.DistributedSampler(data, batch_size=4, shuffle=False), num_workers=2)
print("rows", nd.get_rank(), [(float(x.sum()), size) for (x,), size in nd.with_global_size(loader)], flush=True)
nd.destroy_process_group()
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_a_plain_script_with_loader_workers_gets_no_worker_count_warning(tmp_path):
    script = tmp_path / "loader.py"
    script.write_text(LOADER)
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))[:2]))
    env = dict(os.environ, OMP_NUM_THREADS="1")  # 2 one-thread ranks fill the 2 CPUs: auto would bind
    base = ["taskset", "-c", cpus, *LAUNCHER, "--nproc_per_node=2"]
    plain = subprocess.run([*base, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    # samples 0..9 in global batches of 4, 4, 2: rank 0 sums 0+2, 4+6, 8; rank 1 1+3, 5+7, 9
    assert "rows 0 [(2.0, 4), (10.0, 4), (8.0, 2)]" in plain.stdout, plain.stdout
    assert "rows 1 [(4.0, 4), (12.0, 4), (9.0, 2)]" in plain.stdout, plain.stdout
    assert "suggested max number of worker" not in plain.stdout + plain.stderr
    # the same script, bound to a core a rank as before (told it starts no loader workers): torch warns
    pinned = subprocess.run(
        [*base, "--loader-workers", "0", str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert "suggested max number of worker" in pinned.stdout + pinned.stderr
