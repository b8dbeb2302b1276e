"""neural_arch against raw DDP, Lightning Fabric and Accelerate: same model, data, batch, optimizer, 2 ranks.

Run: ``.venv/bin/pip install -e '.[bench]'`` once, then
     ``.venv/bin/python -m benchmarks.peers.peers [--rounds 3 --mlp-steps 20 --gpt-steps 12]``

Five commands train the same workload on 2 processes (gloo on 127.0.0.1, 1 thread each),
each started the way its users start it: a hand-written torchrun + torch DDP script, Lightning
Fabric (DDP strategy, CPU; ``fabric.launch()`` starts rank 1), Accelerate (``accelerate
launch``, ``Accelerator(cpu=True)``: MULTI_CPU on gloo), our bare ``DistributedDataParallel``
under our launcher (peers_workers.py has the four scripts) and ``neural-arch train``. Two
workloads (peers_setup.py): the comm-bound MLP (8.55 M parameters, global batch 128, SGD)
and configs/gpt.yaml's model, optimizer, clipping and schedule (global batch 32 windows),
each for a fixed number of steps. Rounds are interleaved (the order rotates per round).

Per command: median step time of rank 0 (stamps after each step, the first 2 intervals
left out), samples/s from it, the time from starting the command to the end of the first
step (interpreter, imports, rendezvous, data, model), peak RSS per rank (peers_run.py) and
the exact global loss of the last step's batch, which must agree across frameworks (the
differences are printed). Ratios are per-round medians against raw DDP. Writes peers.png.
The trainer logs a metrics row every step here (logging.every_steps=1: its log times are
its step stamps), one 16-byte all-reduce and one file append per step more than it does
by default; checkpoints, progress bar and TensorBoard are off, as the peers have none.
Before the rounds, neural_arch and benchmarks/ are byte-compiled (``precompile``): pip does
that for the installed torch, Lightning and Accelerate, and Python does it for our editable
install on a user's first run, but not where PYTHONDONTWRITEBYTECODE is set (as in this
project's sandbox), where each of our processes would compile ~100 modules (~0.2 s) per start.
"""

from __future__ import annotations

import argparse
import compileall
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from benchmarks.common.two_ranks import load_average
from benchmarks.peers.peers_report import chart, report
from benchmarks.peers.peers_run import Record, clean_env, run_command
from benchmarks.peers.peers_setup import GPT_CONFIG, GPT_VAL_FRACTION, WORLD, config
from neural_arch.utils.ports import free_port

PEERS = ["raw DDP (torchrun)", "Lightning Fabric", "Accelerate", "ours: bare DDP", "ours: neural-arch train"]
TRAINER_SETS = [
    "logging.every_steps=1",
    "logging.progress=false",
    "logging.tensorboard=false",
    "checkpoint.every_steps=0",
    "checkpoint.resume=none",
    "training.val_every=0",
]


def command(peer: str, workload: str, steps: int, data: Path, out: Path) -> list[str]:
    """The command line a user of ``peer`` would type for this workload."""
    py, module = sys.executable, "benchmarks.peers.peers_workers"
    args = ["--workload", workload, "--steps", str(steps), "--data", str(data), "--out", str(out)]
    if peer == "raw DDP (torchrun)":
        return [
            py,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={WORLD}",
            "-m",
            module,
            "raw",
            *args,
        ]
    if peer == "Lightning Fabric":
        return [py, "-m", module, "fabric", *args]
    if peer == "Accelerate":  # its default port, 29500, is every torch job's default: take a free one
        return [
            py,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(WORLD),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--main_process_port",
            str(free_port()),
            "--module",
            module,
            "accelerate",
            *args,
        ]
    if peer == "ours: bare DDP":
        return [py, "-m", "neural_arch.distributed.launcher", f"--nproc_per_node={WORLD}", "-m", module, "ours", *args]
    path, _, sets = config(workload, steps, str(data))
    cmd = [py, "-m", "neural_arch.cli", "train", "--nproc-per-node", str(WORLD)] + (["--config", path] if path else [])
    for item in sets + TRAINER_SETS + [f"run.dir={out / 'run'}"]:
        cmd += ["--set", item]
    return cmd


def ensure_corpus(data: Path) -> None:
    """Create the GPT corpus (the standard library's sources) once; later runs reuse it."""
    if (data / "gpt_corpus" / "manifest.json").exists():
        return
    print(f"creating the GPT corpus under {data} (once) ...", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "neural_arch.cli",
            "create-data",
            "--config",
            GPT_CONFIG,
            "--set",
            f"data.path={data / 'gpt_corpus'}",
            "--set",
            f"data.val_fraction={GPT_VAL_FRACTION}",
        ],
        check=True,
    )


def precompile() -> None:
    """Write the .pyc files of our package and of the benchmark scripts every command imports."""
    benchmarks = Path(__file__).resolve().parents[1]
    for folder in (benchmarks.parent / "neural_arch", benchmarks):
        if not compileall.compile_dir(str(folder), quiet=1):
            raise RuntimeError(f"byte-compiling {folder} failed")


def one_run(peer: str, workload: str, steps: int, data: Path, out: Path) -> Record:
    out.mkdir(parents=True)
    trainer_dir = out / "run" if peer.startswith("ours: neural-arch") else None
    return run_command(command(peer, workload, steps, data, out), out, clean_env(), trainer_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mlp-steps", type=int, default=20)
    parser.add_argument("--gpt-steps", type=int, default=12)
    parser.add_argument("--data", default="runs/bench_peers", help="folder for the GPT corpus (created once)")
    parser.add_argument("--chart", default=str(Path(__file__).with_name("peers.png")))
    parser.add_argument("--only", choices=["mlp", "gpt"], default=None, help="run one workload")
    args = parser.parse_args()
    data = Path(args.data).resolve()
    ensure_corpus(data)
    precompile()
    steps = {"mlp": args.mlp_steps, "gpt": args.gpt_steps}
    workloads = [args.only] if args.only else list(steps)
    print(f"start: {load_average()}", flush=True)
    records: dict[str, dict[str, list[Optional[Record]]]] = {w: {p: [] for p in PEERS} for w in workloads}
    tmp = Path(tempfile.mkdtemp(prefix="peers-"))
    try:
        for r in range(args.rounds):
            for workload in workloads:
                for peer in PEERS[r % len(PEERS) :] + PEERS[: r % len(PEERS)]:
                    out = tmp / f"r{r}-{workload}-{PEERS.index(peer)}"
                    try:
                        rec: Optional[Record] = one_run(peer, workload, steps[workload], data, out)
                    except RuntimeError as exc:  # one failed run is reported and left out, not the end
                        rec = None
                        print(f"round {r + 1} {workload} {peer:<24} FAILED: {str(exc)[:2000]}", flush=True)
                    records[workload][peer].append(rec)
                    if rec is not None:
                        print(
                            f"round {r + 1} {workload} {peer:<24} first step {rec.stamps[0] - rec.started:6.2f} s, "
                            f"wall {rec.wall_s:6.1f} s",
                            flush=True,
                        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"end: {load_average()}")
    for workload in workloads:
        batch = config(workload, steps[workload], str(data))[1].training.global_batch_size
        report(workload, steps[workload], records[workload], "raw DDP (torchrun)", batch)
    chart(records, "raw DDP (torchrun)", args.chart)
    print(f"chart: {args.chart}")


if __name__ == "__main__":
    main()
