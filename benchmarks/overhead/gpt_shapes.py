"""Compute per training step of candidate GPT shapes, for sizing configs/gpt.yaml.

Run: ``.venv/bin/python -m benchmarks.overhead.gpt_shapes``

One process, 1 thread: forward, cross-entropy, backward and an AdamW step on one rank's
half of the global batch (2 ranks share each batch in configs/gpt.yaml), median of 5 steps
after one warm-up. The ratios between shapes are what carry over to the 2-process run;
communication (an all-reduce of 2-3 MB per step) comes on top.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from neural_arch.apps.gpt.model import GPT, count_parameters

SHAPES = {  # name: (d_model, blocks, heads, context, global batch)
    "d128 x4, ctx 128, batch 32": (128, 4, 4, 128, 32),
    "d128 x4, ctx 64, batch 64": (128, 4, 4, 64, 64),
    "d96 x4, ctx 128, batch 32": (96, 4, 4, 128, 32),
    "d192 x3, ctx 128, batch 32": (192, 3, 6, 128, 32),
    "d128 x6, ctx 128, batch 32": (128, 6, 4, 128, 32),
    "d160 x4, ctx 96, batch 32": (160, 4, 4, 96, 32),
}


def step_ms(d_model: int, blocks: int, heads: int, context: int, batch: int) -> tuple[int, float]:
    torch.manual_seed(0)
    model = GPT(d_model=d_model, n_layers=blocks, n_heads=heads, context=context)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    windows = torch.randint(0, 256, (batch // 2, context + 1))
    times = []
    for _ in range(6):
        start = time.perf_counter()
        opt.zero_grad()
        logits = model(windows[:, :-1])
        F.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1)).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return count_parameters(model), statistics.median(times[1:]) * 1e3


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'shape':30s} {'parameters':>11s} {'ms/step':>8s}")
    for name, shape in SHAPES.items():
        params, ms = step_ms(*shape)
        print(f"{name:30s} {params:11,d} {ms:8.0f}")


if __name__ == "__main__":
    main()
