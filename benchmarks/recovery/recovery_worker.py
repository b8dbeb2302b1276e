"""Worker for benchmarks/recovery/recovery.py: ``recovery_worker.py OUT_DIR ours|plain [WAIT]``.

Steps of a tiny all-reduce "training" loop; on the first attempt rank 1 records the time
and SIGKILLs itself at step 5 (after WAIT seconds, default 0: time for the launcher's warm
spares to start). After the restart rank 0 records when its first step
completes, with the marks its phases are cut at (process start, script start, torch imported,
process group joined). ``plain`` joins with torch.distributed.init_process_group as a torchrun user
would; ``ours`` with neural_arch's.
"""

import time

SCRIPT = time.time()  # before anything heavy: the interpreter has started, nothing imported yet

import json  # noqa: E402 - after the clock
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

IMPORTED = time.time()
out, flavour = sys.argv[1], sys.argv[2]
wait = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
if flavour == "ours":
    from neural_arch.distributed import init_process_group

    init_process_group(backend="gloo")
else:
    dist.init_process_group("gloo")
JOINED = time.time()
rank, attempt = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])


def process_start() -> float:
    """When the kernel started this process (epoch seconds, 10 ms ticks): its age, /proc/uptime
    minus /proc/self/stat's start time after boot, before now (not /proc/stat's boot time: whole
    seconds), so the interpreter's own start-up is counted."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


model = torch.nn.Linear(64, 64)
if attempt == 0:
    time.sleep(wait)
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
        stepped = time.time()
        with open(os.path.join(out, "first_step_after"), "w") as f:
            f.write(repr(stepped))
        with open(os.path.join(out, "phases.json"), "w") as f:  # the restarted rank 0's clock marks
            json.dump({"spawned": process_start(), "script": SCRIPT, "imported": IMPORTED, "joined": JOINED}, f)
dist.barrier()
dist.destroy_process_group()
