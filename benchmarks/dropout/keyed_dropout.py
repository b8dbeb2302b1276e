"""What keying dropout per sample costs: a GPT training step with keyed draws against plain dropout.

Run: ``.venv/bin/python -m benchmarks.dropout.keyed_dropout``  [--rounds 7 --steps 10 --d-model 256]

One process, float32, the built-in GPT (rotary, dropout 0.1 in the embedding, attention,
residual and MLP paths), AdamW; per round, interleaved: ``plain`` (torch's dropout: each draw
from the process's stream, not exact across world sizes), ``keyed`` (the same step inside
``KeyedRandomness.forward``, as the trainer runs it: every draw a hash of seed, step, sample
and call) and ``none`` (dropout 0, the floor). Prints the median step time of each and the
ratio keyed / plain. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Callable, ContextManager

import torch
import torch.nn.functional as F

from neural_arch.apps.gpt.model import GPT, VOCAB
from neural_arch.distributed.data_parallel.keyed_random import KeyedRandomness


def _step_fn(d_model: int, layers: int, context: int, batch: int, dropout: float) -> Callable[[Callable], None]:
    torch.manual_seed(0)
    model = GPT(d_model=d_model, n_layers=layers, n_heads=4, dropout=dropout, context=context)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, VOCAB, (batch, context + 1))

    def step(around: Callable[[], ContextManager]) -> None:
        optimizer.zero_grad(set_to_none=True)
        with around():
            logits = model(x[:, :-1])
        F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1)).backward()
        optimizer.step()

    return step


def _time(step: Callable[[Callable], None], around: Callable[[], ContextManager], steps: int) -> float:
    step(around)  # warm-up
    started = time.perf_counter()
    for _ in range(steps):
        step(around)
    return (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    shape = (args.d_model, args.layers, args.context, args.batch)
    session, counter = KeyedRandomness(seed=0, announce=False), iter(range(10**9))
    keyed = lambda: session.forward(next(counter), range(args.batch))  # noqa: E731 - a fresh step each call
    cases = {
        "plain": (_step_fn(*shape, dropout=0.1), contextlib.nullcontext),
        "keyed": (_step_fn(*shape, dropout=0.1), keyed),
        "none": (_step_fn(*shape, dropout=0.0), contextlib.nullcontext),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, (step, around) in cases.items():
            times[name].append(_time(step, around, args.steps))
    median = {name: statistics.median(t) for name, t in times.items()}
    print(
        f"GPT d_model {args.d_model}, {args.layers} blocks, context {args.context}, batch {args.batch}, float32, "
        f"{torch.get_num_threads()} threads; median of {args.rounds} rounds x {args.steps} steps"
    )
    for name, t in median.items():
        print(f"  {name:6s} {t * 1e3:8.1f} ms/step")
    print(
        f"keyed / plain = {median['keyed'] / median['plain']:.3f}; keyed draws per step: "
        f"{session.keyed_ops // max(1, args.rounds * (args.steps + 1))}"
    )


if __name__ == "__main__":
    main()
