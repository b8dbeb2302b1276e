"""Process group lifecycle: world size 1 without a launcher, idempotence, clear errors, teardown.

Run: ``.venv/bin/python -m pytest tests/distributed/runtime/test_process_group.py``
"""

import gc
import os
import subprocess
import sys
import weakref

import pytest
import torch

import neural_arch.distributed as nd
from tests.helpers.multiproc import free_port, run_ranks
from tests.helpers.paths import SCRIPTS

pytestmark = pytest.mark.multiprocess  # every test here spawns ranks or runs a launcher/scheduler


def test_world_size_one_needs_no_launcher():
    assert not nd.is_initialized()
    assert (nd.get_rank(), nd.get_world_size(), nd.get_local_rank()) == (0, 1, 0)
    nd.init_process_group()
    nd.init_process_group()  # idempotent
    nd.init_process_group(backend="gloo", world_size=1, rank=0)  # compatible: still fine
    info = nd.get_distributed_info()
    for key in ("available", "initialized", "world_size", "rank", "local_rank", "backend", "cluster"):
        assert key in info
    assert info["initialized"] and info["world_size"] == 1 and info["backend"] == "gloo"
    assert info["cluster"] == "local"
    nd.barrier()
    nd.destroy_process_group()
    nd.destroy_process_group()  # twice is fine
    assert not nd.is_initialized()


def test_incompatible_reinit_is_an_error():
    nd.init_process_group(backend="gloo")
    with pytest.raises(ValueError, match="world size 1, not 2"):
        nd.init_process_group(world_size=2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(backend="mpi"), "backend='mpi' is not supported"),
        (dict(world_size=2, rank=2), "rank=2 with world_size=2 is invalid"),
        (dict(world_size=2, rank=0), "MASTER_ADDR and MASTER_PORT are not set"),
        (dict(timeout=-1), "must be positive"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        nd.init_process_group(**kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_nccl_without_gpu_says_how_to_fix():
    with pytest.raises(ValueError, match="use backend='gloo'"):
        nd.init_process_group(backend="nccl")


def test_bad_launcher_variables_name_the_variable():
    os.environ.update(RANK="one", WORLD_SIZE="2")
    with pytest.raises(ValueError, match="RANK='one' is not an integer"):
        nd.init_process_group()
    os.environ.update(RANK="3", WORLD_SIZE="2")
    with pytest.raises(ValueError, match="rank 3 is outside 0..1"):
        nd.init_process_group()


def info_worker(rank, world_size):
    nd.init_process_group()
    nd.barrier()
    return nd.get_distributed_info()


def test_info_in_a_real_world():
    infos = run_ranks(info_worker, 2)
    assert [i["rank"] for i in infos] == [0, 1]
    assert all(i["world_size"] == 2 and i["backend"] == "gloo" and i["initialized"] for i in infos)
    assert [i["local_rank"] for i in infos] == [0, 1]


@pytest.mark.parametrize("mode", ["explicit", "atexit"])
def test_teardown_while_rank0_is_busy_never_aborts(mode):
    for _attempt in range(2):
        port = free_port()
        procs = []
        for rank in range(3):
            env = dict(
                os.environ,
                RANK=str(rank),
                WORLD_SIZE="3",
                LOCAL_RANK=str(rank),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                OMP_NUM_THREADS="1",
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(SCRIPTS / "teardown_busy.py"), mode],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outputs = [p.communicate(timeout=90)[0] for p in procs]
        for rank, (p, out) in enumerate(zip(procs, outputs)):
            assert p.returncode == 0, f"rank {rank} exited {p.returncode}:\n{out}"
            assert f"rank {rank} done" in out
            assert "terminate called" not in out


def _ddp_in_a_cycle(rank: int, world_size: int) -> bool:
    gc.disable()  # so that only destroy_process_group can collect the cycle below
    try:
        nd.init_process_group(backend="gloo")
        model = nd.DistributedDataParallel(torch.nn.Linear(3, 2))
        model(torch.ones(4, 3)).sum().backward()
        holder: dict = {"model": model}
        holder["self"] = holder  # garbage once dropped, but only a collection frees it
        alive = weakref.ref(model)
        del model, holder
        nd.destroy_process_group()
        return alive() is None
    finally:
        gc.enable()


def test_destroy_releases_a_ddp_model_left_in_a_garbage_cycle():
    # Such a model holds the gloo group; if it survived until process exit the rank could
    # abort there (seen under mpirun after `neural-arch train`).
    assert run_ranks(_ddp_in_a_cycle, world_size=2, timeout=60) == [True, True]
