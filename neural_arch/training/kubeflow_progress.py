"""Progress of a run shown on its Kubeflow Trainer v2 TrainJob: ``kubectl get trainjob NAME -o
jsonpath='{.status.trainerStatus}'`` gives the percentage done, the estimated seconds left and the
latest metrics while it trains.

Use (rank 0 posts, the other ranks do nothing)::

    from neural_arch.training.kubeflow_progress import KubeflowProgress
    reporter = KubeflowProgress.from_environment()      # None outside a TrainJob with the status server
    train(cfg, callbacks=[reporter] if reporter else [])

Where: the TrainJob controller's status server (Trainer >= 2.2, ``TrainJobStatus`` feature gate),
whose URL, CA certificate and token file the pod's environment names
(``neural_arch.distributed.env.kubeflow_trainer.status_server``). What: ``POST`` of
``{"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds", "metrics": [{"name",
"value"}], "lastUpdatedTime"}}`` with ``Authorization: Bearer <token>``, as kubeflow/trainer's
``UpdateTrainJobStatusRequest`` (pkg/statusserver, v2.3.0). The estimate is the time per step
measured in this process since its first step (a resumed run counts only what it trained), times
the steps left; the metrics are the latest row's and validation's, losses first, per-rank
timings left out (the API keeps 256). Why this way: a post runs in one background thread, at
most one at a time and one every ``min_interval`` seconds (the controller asks for at most one
every 5 s), so a slow or dead server never slows a step; a failed post is one warning, never an
error, and the next posts are still tried. The token rotates, so it is read again for every post.
"""

from __future__ import annotations

import json
import math
import re
import ssl
import time
import urllib.error
import urllib.request
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timezone
from typing import Callable, Mapping, Optional, Sequence

from neural_arch.distributed.env.kubeflow_trainer import TrainerStatusServer, status_server
from neural_arch.training.callbacks import Callback, FinishEvent, StepEvent, ValidationEvent

MAX_METRICS, MAX_TEXT = 256, 64
"""The TrainJob API's limits: at most 256 metrics, names and values at most 64 characters."""
PER_RANK = re.compile(r"/rank\d+$")


def status_body(
    percent: int, remaining_s: Optional[float], metrics: Mapping[str, float], now: Optional[datetime] = None
) -> dict:
    """The JSON the status server takes: percent in 0..100, seconds left (omitted when unknown),
    metrics as name/value strings within the API's limits, and the time of the observation."""
    status: dict = {"progressPercentage": max(0, min(100, int(percent)))}
    if remaining_s is not None and math.isfinite(remaining_s):
        status["estimatedRemainingSeconds"] = max(0, min(2**31 - 1, round(remaining_s)))
    named = sorted((_order(name), name, value) for name, value in metrics.items() if _shown(name))
    if named:
        status["metrics"] = [{"name": name, "value": f"{float(value):.8g}"} for _, name, value in named[:MAX_METRICS]]
    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    status["lastUpdatedTime"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": status}


def _shown(name: str) -> bool:
    """A metric the status shows: within the API's name limit, and not one rank's own timing
    (``perf/compute_s/rank7``: one per rank would crowd out the losses in a large job)."""
    return 0 < len(name) <= MAX_TEXT and PER_RANK.search(name) is None


def _order(name: str) -> int:
    """Order in the status: losses and task metrics first, then the rest (``lr``, ``perf/*``)."""
    return 0 if name.startswith(("val/", "train/")) else 1


def post_status(server: TrainerStatusServer, body: dict, timeout: float = 5.0) -> None:
    """One POST to the status server, trusting only its CA; raises on any failure."""
    with open(server.token_file) as f:
        token = f.read().strip()
    request = urllib.request.Request(
        server.url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=server.ca_cert_file)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        response.read()


class KubeflowProgress(Callback):
    """A callback that posts the run's progress to its TrainJob's status (rank 0 only)."""

    def __init__(
        self,
        server: TrainerStatusServer,
        min_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server, self.min_interval, self.clock = server, min_interval, clock
        self.metrics: dict[str, float] = {}
        """The latest metrics row merged with the latest validation metrics."""
        self.first: Optional[tuple[int, float]] = None
        """(step, time) of the first step this process trained: the start of the rate measured."""
        self.last_post = -math.inf
        self.in_flight: Optional[Future] = None
        self.failure: Optional[str] = None
        """Why the first failed post failed (warned once, from the training thread)."""
        self.warned = False
        self.posts = 0
        """Posts the server accepted."""
        self.pool: Optional[ThreadPoolExecutor] = None
        """The posting thread, started at the first post and stopped by ``close`` (a later run starts another)."""

    @classmethod
    def from_environment(cls, environ: Optional[Mapping[str, str]] = None) -> Optional[KubeflowProgress]:
        """A reporter for this pod's TrainJob, or None where the status server's variables are not set."""
        server = status_server(environ)
        return cls(server) if server is not None else None

    def remaining_seconds(self, step: int, steps: int) -> Optional[float]:
        """Seconds left at the rate measured since this process's first step (None until 2 steps)."""
        if self.first is None or step <= self.first[0]:
            return None
        per_step = (self.clock() - self.first[1]) / (step - self.first[0])
        return per_step * max(0, steps - step)

    def on_step(self, event: StepEvent) -> None:
        if event.rank != 0:
            return
        self._warn_once()
        if self.first is None:
            self.first = (event.step, self.clock())
        if event.metrics is not None:
            self.metrics.update(event.metrics)
        if self.clock() - self.last_post >= self.min_interval and (self.in_flight is None or self.in_flight.done()):
            percent = 100 * event.step // max(1, event.steps)
            self._send(status_body(percent, self.remaining_seconds(event.step, event.steps), self.metrics))

    def on_validation(self, event: ValidationEvent) -> None:
        if event.rank == 0:
            self.metrics.update(event.metrics)  # sent with the next step's post

    def on_finish(self, event: FinishEvent) -> None:
        """The final post (100%, nothing left, the final metrics), waited for a bounded time."""
        if event.rank != 0:
            return
        self.metrics.update(event.metrics)
        self.close(status_body(100, 0.0, self.metrics))

    def close(self, final: Optional[dict] = None, timeout: float = 10.0) -> None:
        """Send ``final`` after any post in flight, wait for it at most ``timeout`` s, stop the thread."""
        if self.in_flight is not None:
            _wait(self.in_flight, timeout)
        if final is not None:
            _wait(self._send(final), timeout)
        if self.pool is not None:
            self.pool.shutdown(wait=False)
        self.pool, self.first = None, None  # a later run with this reporter measures its own rate
        self._warn_once()

    def _warn_once(self) -> None:
        if self.failure is not None and not self.warned:
            self.warned = True
            warnings.warn(
                f"Kubeflow TrainJob progress: posting to {self.server.url} failed ({self.failure}); training goes "
                "on, later posts are still tried and not warned about.",
                RuntimeWarning,
                stacklevel=3,
            )

    def _send(self, body: dict) -> Future:
        self.last_post = self.clock()
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kubeflow-progress")
        self.in_flight = self.pool.submit(self._post, body)
        return self.in_flight

    def _post(self, body: dict) -> None:
        try:
            post_status(self.server, body)
            self.posts += 1
        except (OSError, ValueError) as e:  # HTTP, TLS, socket and token file errors are OSErrors
            if self.failure is None:
                self.failure = _reason(e)


def with_trainjob_progress(
    callbacks: Sequence[Callback], environ: Optional[Mapping[str, str]] = None
) -> list[Callback]:
    """``callbacks`` plus a ``KubeflowProgress`` where this pod's TrainJob has a status server and
    none of ``callbacks`` reports there already (what the trainer calls, so a run reports by itself)."""
    if any(isinstance(callback, KubeflowProgress) for callback in callbacks):
        return list(callbacks)
    reporter = KubeflowProgress.from_environment(environ)
    return [*callbacks, *([reporter] if reporter is not None else [])]


def _reason(error: Exception) -> str:
    """The server's own message for an HTTP error (a Kubernetes Status object), else the error."""
    if isinstance(error, urllib.error.HTTPError):
        try:
            message = json.loads(error.read() or b"{}").get("message")
        except (ValueError, OSError):
            message = None
        return f"HTTP {error.code}" + (f": {message}" if message else "")
    return f"{type(error).__name__}: {error}"


def _wait(future: Future, timeout: float) -> None:
    try:
        future.result(timeout=timeout)
    except FutureTimeout:  # a post still running then is left to its own timeout
        pass
