"""A torchx component that runs ``neural-arch train`` on N nodes x M processes through our launcher.

Run (``pip install 'neural_arch[torchx]'``; docs/torchx.md goes from install to a running job)::

    torchx run --scheduler local_cwd neural_arch.integrations.torchx:trainer \\
        --config tiny -j 1x2 training.steps=40 optim.lr=0.1
    torchx run --scheduler slurm neural_arch.integrations.torchx:trainer --config tiny -j 2x4

or from Python::

    from torchx.runner import get_runner
    from neural_arch.integrations.torchx import trainer

    with get_runner() as runner:
        handle = runner.run(trainer("training.steps=40", config="tiny", j="1x2"), scheduler="local_cwd")
        print(runner.wait(handle).state)  # SUCCEEDED

Positional arguments are ``--set`` overrides (``section.key=value``). ``neural-arch`` must be on
the ``PATH`` of every node (the environment neural_arch is installed in, activated).

Why our launcher and not torchx's ``dist.ddp`` (``torchrun``) with our trainer as the script.
Both give the same numbers: exactness (same samples per step, gradients weighted by sample
count) is the trainer's and holds under any launcher. They differ when something fails:
``dist.ddp`` passes torchrun no ``--max_restarts`` (0 restarts) and torch 2.13's torchrun can
deadlock restarting a group; our launcher restarts the group ``max_restarts`` times on a fresh
store and port, the trainer resumes from the newest checkpoint (``checkpoint.resume: auto``)
and ends with the same weights as an uninterrupted run, and a run that gives up ends with one
line naming the rank and its error, which torchx shows in the job's log. Between nodes our
launcher also checks a job token (the torchx app id) before a node gets a rank. torchx's own
``max_retries`` (the scheduler resubmits the whole app) stacks on top: a resubmitted app
resumes from the same checkpoint too.

One node (``-j 1xM``) runs ``neural-arch train --nproc-per-node M`` exactly as by hand: the config
is checked once before any worker starts (a mistake is one line and exit 2) and restarts come
from ``training.max_restarts`` unless ``max_restarts`` is given. Several nodes (``-j NxM``) run
``neural-arch launch`` on each node, meeting over c10d at the first node's host on
``rdzv_port``, with ``python -m neural_arch.cli train`` as every worker. The run directory
(``run.dir``) must be on storage every node sees, as for any multi-node run.

This module imports torchx; nothing else in neural_arch imports this module, so the package
imports without torchx installed.
"""

import shlex
from typing import Optional

try:
    import torchx
    import torchx.specs as specs
except ImportError as missing:  # the optional extra
    raise ImportError(
        f"neural_arch.integrations.torchx needs torchx ({missing}): pip install 'neural_arch[torchx]'"
    ) from None

# No `from __future__ import annotations`: torchx reads the parameter types off the signature to
# parse `torchx run` arguments, and needs real types there, not strings.


def trainer(
    *overrides: str,
    config: Optional[str] = None,
    j: str = "1x2",
    max_restarts: Optional[int] = None,
    resume: str = "auto",
    create_data: bool = False,
    name: str = "neural-arch",
    image: str = torchx.IMAGE,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    h: Optional[str] = None,
    env: Optional[dict[str, str]] = None,
    max_retries: int = 0,
    rdzv_port: int = 29500,
) -> specs.AppDef:
    """Train with neural-arch's trainer on NNODES x NPROC processes, restarted by our launcher.

    Args:
        overrides: config overrides, ``section.key=value`` as after ``neural-arch train --set``
        config: a recipe's name (``neural-arch recipes``) or a YAML file (default: the built-in defaults)
        j: ``NNODESxNPROC``: nodes, and processes on each node (``neural-arch train --nproc-per-node``)
        max_restarts: group restarts after a failure (default: ``training.max_restarts`` on one node, 3 on several)
        resume: ``auto`` (newest good checkpoint), ``none``, or a checkpoint path
        create_data: first create the task's data if it does not exist
        name: the app's name in the scheduler
        image: the image (``local_cwd`` and ``slurm``: the current directory; containers: an image with neural_arch)
        cpu: CPUs per node
        gpu: GPUs per node
        memMB: memory per node in MB
        h: a torchx named resource (takes precedence over cpu, gpu, memMB)
        env: environment variables for every process
        max_retries: times the scheduler resubmits the whole app after a failure (on top of our restarts)
        rdzv_port: several nodes: the port on the first node where nodes meet
    """
    nnodes, nproc = _topology(j)
    train = ["--config", config] if config else []
    train += (["--resume", resume] if resume != "auto" else []) + (["--create-data"] if create_data else [])
    train += ["--set", *overrides] if overrides else []
    if nnodes == 1:
        restarts = [] if max_restarts is None else ["--set", f"training.max_restarts={max_restarts}"]
        entrypoint, args = "neural-arch", ["train", "--nproc-per-node", str(nproc), *train, *restarts]
    else:
        entrypoint, args = "bash", ["-c", _launch_command(nnodes, nproc, max_restarts, rdzv_port, train)]
    role = specs.Role(
        name="trainer",
        image=image,
        entrypoint=entrypoint,
        args=args,
        num_replicas=nnodes,
        resource=specs.resource(cpu=cpu, gpu=gpu, memMB=memMB, h=h),
        env=dict(env or {}),
        port_map={"c10d": rdzv_port},
        max_retries=max_retries,
    )
    return specs.AppDef(name=name, roles=[role])


def _topology(j: str) -> tuple[int, int]:
    """``NNODESxNPROC`` -> (nodes, processes per node); anything else is one line naming the fix."""
    parts = j.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(f"j={j!r} must be NNODESxNPROC with positive integers, e.g. -j 1x2 or -j 2x4")
    return int(parts[0]), int(parts[1])


def _launch_command(nnodes: int, nproc: int, max_restarts: Optional[int], port: int, train: list[str]) -> str:
    """Our launcher on one node of several, as one ``bash -c`` line: the first node's host is a
    variable the scheduler sets on each node (torchx's ``rank0_env`` macro names it), read by bash."""
    launch = ["neural-arch", "launch", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc)]
    launch += ["--rdzv-backend", "c10d", "--rdzv-id", specs.macros.app_id]
    launch += [] if max_restarts is None else ["--max-restarts", str(max_restarts)]
    worker = ["-m", "neural_arch.cli", "train", *train]
    # $$ is torchx's escape for a literal $: bash expands ${VAR:=localhost}, torchx fills rank0_env.
    endpoint = f"--rdzv-endpoint=$${{{specs.macros.rank0_env}:=localhost}}:{port}"
    return " ".join([*map(shlex.quote, launch), endpoint, *map(shlex.quote, worker)])
