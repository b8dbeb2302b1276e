"""Worker for benchmarks/recovery/recovery.py: ``recovery_worker.py OUT_DIR ours|plain``.

Steps of a tiny all-reduce "training" loop; on the first attempt rank 1 records the time
and SIGKILLs itself at step 5. After the restart rank 0 records when its first step
completes. ``plain`` joins with torch.distributed.init_process_group as a torchrun user
would; ``ours`` with neural_arch's.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

out, flavour = sys.argv[1], sys.argv[2]
if flavour == "ours":
    from neural_arch.distributed import init_process_group

    init_process_group(backend="gloo")
else:
    dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
model = torch.nn.Linear(64, 64)
for step in range(10):
    if attempt == 0 and rank == 1 and step == 5:
        with open(os.path.join(out, "killed_at"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    loss = model(torch.randn(32, 64)).square().mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    if attempt > 0 and rank == 0 and step == 0:
        with open(os.path.join(out, "first_step_after"), "w") as f:
            f.write(repr(time.time()))
dist.barrier()
dist.destroy_process_group()
