"""A 120 s network partition of 2-node training jobs (hosts in network namespaces, tests/helpers/netns.py).

Run (as root): ``.venv/bin/python -m pytest tests/distributed/launcher/test_netns_partition.py -q``

Four jobs run at once, each on a pair of namespace hosts of its own (its own addresses,
host names and rendezvous port), so that the suite pays for one partition, not four
(``VARIANTS``): the static and the c10d rendezvous, each cut once by link down and once by
iptables DROP, two of them with a job token (gated stores) and two without. Each job: two
launchers, one rank each, one restart allowed, training the tiny float64 MLP, held after
step 6 (checkpoint at 4). While they are held, every listening socket in each job's
namespaces is listed (``ss -ltnp``) and checked against docs/security.md
(``check_listeners``). Then the link of the host of rank 1 is cut and the ranks are let go
into step 7's collectives. Each job must:

- name the silent rank and its host within ``training.timeout + 5`` s, by the job's own
  clock: the line says how long ago the rank was last heard (``silent for N s``, the
  age of its last heartbeat when the line was written). The last heartbeat that reached the
  store was written before the cut, so N bounds the time from the cut to the line from above
  whatever the test's own process was doing (a loaded machine delays the test's polling,
  not the job's timestamps);
- wait for the link instead of wedging or giving up (the agents' store reads wait up to
  ``--start_timeout``, c10d's up to ``--rdzv_conf read_timeout``, whose default is the same
  600 s: torchrun's 60 s ended the job during the cut; at every static restart node 0's agent waits for node 1's:
  agent.py's ``_await_every_node``), restart once it is back, resume from step 4 and end
  with the weights of an uninterrupted 1-process run (atol 1e-10: only the summation
  order differs). How long after the link's return the job resumes is TCP's: a request
  sent during the cut is retransmitted with exponential backoff, up to
  ``net.ipv4.tcp_rto_max_ms`` apart. Its default, 120 s, cost the test up to 2 more minutes
  after the link's return, so the namespace hosts cap it at ``RTO_MAX`` (a setting a cluster
  may choose too): the job still has to ride out the whole cut, the connections outlive it
  (TCP gives up on one after tcp_retries2 = 15 retransmissions: 290 s or more at this cap) and the
  bound allows the cap in effect. Runtime: 198-247 s on 2 shared cores (load 4-11), the jobs
  done 22-52 s (static) and 44-67 s (c10d) after the link's return, against 68-73 s and 135 s
  uncapped (284-318 s in all).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.cli import LAUNCHER, cli
from tests.helpers.multiproc import free_port
from tests.helpers.netns import Host, gate_asks_for_token, hosts, listening_in, netns_unavailable, node_flags
from tests.helpers.paths import SCRIPTS
from tests.helpers.run_outputs import assert_params, final_params
from tests.helpers.trainer_runs import BASE

pytestmark = [
    pytest.mark.machine,  # network namespaces: one multi-host test at a time
    pytest.mark.multiprocess,
    pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable())),
]

PACED = str(SCRIPTS / "train_paced.py")
PARTITION = 120.0
"""Seconds the link stays cut."""
TIMEOUT = 30
"""training.timeout: the collective timeout after which the ranks fail and are diagnosed."""
NAMED_WITHIN = TIMEOUT + 5
"""Seconds from the last heartbeat before the cut to the line naming the silent rank."""
HELD = 6
"""The step after which both ranks wait for the test (the newest checkpoint is step 4's)."""
RTO_MAX = 30
"""Seconds: the namespace hosts' largest TCP retransmission interval (tcp_rto_max_ms; 120 s by default)."""
SLACK = 10.0
"""Seconds beyond the largest retransmission interval in effect for TCP to get a request sent
during the cut through once the link is back."""
ARGS = [
    *BASE,
    "--set",
    "training.steps=10",
    "--set",
    f"training.timeout={TIMEOUT}",
    "--set",
    "schedule.decay=constant",
    "--set",
    "logging.every_steps=1",
]
VARIANTS = {
    "static-link-down": ([], "link", None),
    "static-iptables-drop": ([], "drop", "s3cret-token"),
    "c10d-link-down": (["--rdzv_backend=c10d"], "link", "s3cret-token"),
    "c10d-iptables-drop": (["--rdzv_backend=c10d"], "drop", None),
}
"""Job name -> (its rendezvous flags, how its link is cut, its job token)."""
WILDCARD = ("0.0.0.0", "*", "::", "[::]")


@dataclass
class Job:
    name: str
    rdzv: list[str]
    cut: str
    token: str | None
    hosts: tuple[Host, Host]
    root: Path
    port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen] = field(default_factory=list)
    cut_host: Host | None = None
    cut_at: float = 0.0

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def gate(self) -> Path:
        return self.root / "gate"

    def start(self) -> None:
        self.gate.mkdir(parents=True)
        (self.gate / f"hold_{HELD}").touch()
        master = self.hosts[0]
        for rank, host in enumerate(self.hosts):
            # c10d with its default read_timeout: the store's reads wait as long as --start_timeout does for static.
            host_flag = ["--rdzv_conf=is_host=1"] if self.rdzv and rank == 0 else []
            cmd = [
                *LAUNCHER,
                *node_flags(host, master, self.port, rank),
                *self.rdzv,
                *host_flag,
                # The agents' store reads wait for the other node this long: longer than the cut
                # plus TCP's retransmission backoff, so that the job waits for the link, not fails.
                "--start_timeout=600",
                "--max_restarts=1",
                PACED,
                str(self.gate),
                *ARGS,
                "--set",
                f"run.dir={self.run}",
            ]
            log = self.root / f"{host.hostname}.log"
            with open(log, "w") as out:
                env = {"NEURAL_ARCH_JOB_TOKEN": self.token} if self.token else {}
                proc = host.popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
            proc.log_path = log  # type: ignore[attr-defined]
            self.procs.append(proc)

    def output(self) -> str:
        return "\n".join(f"--- {p.log_path.name}:\n{p.log_path.read_text()}" for p in self.procs)  # type: ignore[attr-defined]

    def fail(self, what: str) -> None:
        pytest.fail(f"{self.name}: {what}\n{self.output()}")

    def rank_host(self, rank: int) -> Host:
        """The host that runs rank ``rank``: the one whose launcher prints its ``[rank N]`` lines."""
        found = [h for h, p in zip(self.hosts, self.procs) if f"[rank {rank}] " in p.log_path.read_text()]  # type: ignore[attr-defined]
        if len(found) != 1:
            self.fail(f"rank {rank} runs on {[h.hostname for h in found]}")
        return found[0]

    def cut_link(self, on: bool) -> None:
        host = self.cut_host
        assert host is not None
        if self.cut == "link":
            host.link_down() if on else host.link_up()
        else:
            host.drop(on)


def wait_until(check, what: str, timeout: float, job: Job) -> None:
    """Poll ``check(job)`` every 0.1 s; fails on timeout or on a launcher of ``job`` that ended first."""
    deadline = time.monotonic() + timeout
    while not check(job):
        ended = [p.returncode for p in job.procs if p.poll() is not None]
        if ended or time.monotonic() > deadline:
            job.fail(f"no {what} within {timeout:.0f} s (ended: {ended})")
        time.sleep(0.1)


def starts(run: Path) -> list[str]:
    """Rank 0's ``world W, step S`` start lines, one per attempt."""
    log = run / "logs" / "rank_0.log"
    text = log.read_text() if log.exists() else ""
    return re.findall(r"start: (world \d+, step \d+)", text)


def last_step(run: Path) -> int:
    rows = (run / "metrics.jsonl").read_text().splitlines() if (run / "metrics.jsonl").exists() else []
    found = [int(m.group(1)) for m in (re.search(r'"step": (\d+)', row) for row in rows) if m]
    return max(found, default=0)


def check_listeners(job: Job) -> str:
    """Where a running multi-node job listens, as ``ss`` sees it, against docs/security.md
    ("Several nodes", "Job tokens"): on loopback and the host's own address only, never on all
    interfaces; the rendezvous store on the host's address; the workers' gloo sockets on the
    address of GLOO_SOCKET_IFNAME's interface (eth0); every launcher's snapshot keeper there,
    behind its own token's challenge (checkpoint/memory_keeper.py); without a job token, the
    launcher of rank 0's node also serves the per-attempt worker store there (and, c10d,
    torch's bootstrap store); with a token, whatever a launcher exposes opens with the token's
    challenge."""
    master, rank0 = job.hosts[0], job.rank_host(0)
    seen = [(host, listening_in(host)) for host in job.hosts]
    for (host, sockets), launcher in zip(seen, (p.pid for p in job.procs)):
        wrong = [s for s in sockets if s[1] not in ("127.0.0.1", host.addr)]
        if wrong:
            job.fail(f"{host.hostname} listens beyond loopback and {host.addr}: {wrong} (all: {sockets})")
        if [s for s in sockets if s[0] != launcher and s[1] != host.addr]:
            job.fail(f"{host.hostname}: a worker listens elsewhere than on {host.addr}: {sockets}")
        public = sorted(port for pid, addr, port in sockets if pid == launcher and addr == host.addr)
        gated = [port for port in public if gate_asks_for_token(host, host.addr, port)]
        if job.token and gated != public:
            job.fail(f"{host.hostname}: a launcher port on {host.addr} without the token's gate: {sockets}")
        if not job.token and len(gated) != 1:  # the node's snapshot keeper: always behind its own token
            job.fail(f"{host.hostname}: {len(gated)} gated ports on {host.addr}, not its snapshot keeper: {sockets}")
        stores = len(public) - (host is master) - 1  # besides the rendezvous store and the snapshot keeper
        if not job.token and stores != (host is rank0) * (1 + bool(job.rdzv)):
            job.fail(f"{host.hostname}: {stores} stores on {host.addr} besides the rendezvous store: {sockets}")
    if (job.procs[0].pid, master.addr, job.port) not in seen[0][1]:
        job.fail(f"no rendezvous store of the launcher at {master.addr}:{job.port}: {seen}")
    return f"{job.name}: " + "; ".join(f"{h.hostname} ({h.addr}): {sorted(s)}" for h, s in seen)


def silent_for(job: Job) -> int:
    """``N`` of the line naming rank 1 and its host: ``... did not arrive: rank 1 (... silent for N s ...) on HOST``."""
    assert job.cut_host is not None
    line = re.compile(rf"did not arrive: rank 1 \([^)]*silent for (\d+) s[^)]*\) on {job.cut_host.hostname}")
    found = line.search(job.output())
    return int(found.group(1)) if found else -1


@pytest.mark.timeout(900)
def test_a_120s_partition_names_the_silent_rank_then_resumes_exactly_once_the_link_is_back(tmp_path):
    with hosts(2 * len(VARIANTS)) as made:
        retransmit = max(host.tcp_rto_max(RTO_MAX) for host in made) + SLACK
        jobs = [
            Job(name, rdzv, cut, token, (made[2 * i], made[2 * i + 1]), tmp_path / name)
            for i, (name, (rdzv, cut, token)) in enumerate(VARIANTS.items())
        ]
        for job in jobs:
            job.start()
        reference = tmp_path / "reference"  # meanwhile: the uninterrupted 1-process run
        ref = cli("train", *ARGS, "--set", f"run.dir={reference}")
        assert ref.returncode == 0, ref.stderr
        for job in jobs:
            wait_until(lambda j: last_step(j.run) >= HELD, f"step {HELD}", 240, job)
        print("\n".join(check_listeners(job) for job in jobs))
        for job in jobs:
            job.cut_host = job.rank_host(1)
            job.cut_at = time.monotonic()
            job.cut_link(True)
            (job.gate / f"hold_{HELD}").unlink()  # the ranks go on into step 7's collectives, and time out
        for job in jobs:  # the rank on the store's side names rank 1 and its host (heartbeat.py)
            wait_until(lambda j: silent_for(j) >= 0, "line naming rank 1 and its host", 120, job)
            if not TIMEOUT - 1 <= silent_for(job) <= NAMED_WITHIN:
                job.fail(f"rank 1 named {silent_for(job)} s after it was last heard (timeout {TIMEOUT} s)")
        returned = {}
        for job in jobs:
            time.sleep(max(0.0, job.cut_at + PARTITION - time.monotonic()))
            if any(p.poll() is not None for p in job.procs):
                job.fail("a launcher gave up during the cut")
            job.cut_link(False)
            returned[job.name] = time.monotonic()
        done_after = {}
        for job in jobs:
            for proc in job.procs:
                try:
                    code = proc.wait(timeout=max(1.0, returned[job.name] + retransmit + 60 - time.monotonic()))
                except subprocess.TimeoutExpired:
                    code = None
                if code != 0:
                    job.fail(f"launcher ended with {code}")
            done_after[job.name] = time.monotonic() - returned[job.name]
    expected = final_params(reference)
    for job in jobs:
        assert starts(job.run) == ["world 2, step 0", "world 2, step 4"], (job.name, starts(job.run))
        assert_params(final_params(job.run), expected, atol=1e-10)
        print(
            f"{job.name}: rank 1 and {job.cut_host.hostname} named {silent_for(job)} s after rank 1 was last heard "
            f"(timeout {TIMEOUT} s); finished {done_after[job.name]:.1f} s after the link returned"
        )
