"""Kubeflow TrainJob progress posts, received by a local HTTPS server that checks them as the
trainer's status server does: POST to the TrainJob's status path, ``Authorization: Bearer
<token>``, a JSON ``UpdateTrainJobStatusRequest``; and the client trusts only the CA it is given.

Run: ``.venv/bin/python -m pytest tests/training/test_kubeflow_progress.py -q`` (about 2 s: the
certificates are made with the ``openssl`` command, the server is Python's http.server with TLS
on 127.0.0.1; the reporter's clock is a fake one, so rates and estimates are exact).
"""

import json
import re
import shutil
import ssl
import subprocess
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from neural_arch.distributed.env.kubeflow_trainer import TrainerStatusServer
from neural_arch.training.callbacks import Callback, FinishEvent, StepEvent, ValidationEvent
from neural_arch.training.kubeflow_progress import KubeflowProgress, status_body, with_trainjob_progress

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command for a test CA")

PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/neural-arch-train/status"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.token-one"


def make_cert(folder, name):
    """A self-signed certificate for localhost / 127.0.0.1 (its own CA): (cert file, key file)."""
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={name}"]
        + ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


class StatusServer:
    """The status server's contract: 403 for a wrong token or path, 422 for a body that is not a
    JSON trainerStatus, 200 (echoing the body) otherwise; every request is kept."""

    def __init__(self, cert, key, token_file):
        self.requests, self.token_file = [], token_file
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests.append((self.command, self.path, dict(self.headers), body))
                expected = "Bearer " + owner.token_file.read_text().strip()
                if self.headers.get("Authorization") != expected or self.path != PATH:
                    return self.reply(403, {"kind": "Status", "message": "Forbidden", "code": 403})
                try:
                    status = json.loads(body)["trainerStatus"]
                except (ValueError, KeyError):
                    return self.reply(422, {"kind": "Status", "message": "Invalid payload", "code": 422})
                self.reply(200, {"trainerStatus": status})

            def reply(self, code, payload):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://localhost:{self.httpd.server_address[1]}{PATH}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self):
        return [json.loads(body)["trainerStatus"] for _, _, _, body in self.requests]


@pytest.fixture
def server(tmp_path):
    cert, key = make_cert(tmp_path, "status-server")
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    running = StatusServer(cert, key, token)
    yield running, TrainerStatusServer(url=running.url, token_file=str(token), ca_cert_file=str(cert))
    running.httpd.shutdown()
    running.httpd.server_close()


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def run_steps(reporter, clock, steps, seconds_per_step, validate_at=()):
    """What the trainer calls on rank 0: on_validation where it validated, then on_step, per step;
    each post is awaited so which steps post depends on the fake clock alone."""
    for step in range(1, steps + 1):
        clock.now += seconds_per_step
        if step in validate_at:
            reporter.on_validation(ValidationEvent(step=step, steps=steps, rank=0, metrics={"val/loss": 1.0 / step}))
        row = {"train/loss": 2.0 / step, "lr": 0.01}
        reporter.on_step(StepEvent(step=step, steps=steps, rank=0, lr=0.01, metrics=row))
        if reporter.in_flight is not None:
            reporter.in_flight.result(timeout=30)
    reporter.on_finish(FinishEvent(steps, steps, 0, {"val/loss": 0.125}, None))


def test_progress_posts_reach_the_status_server_with_the_token(server):
    running, endpoint = server
    clock = FakeClock()
    reporter = KubeflowProgress(endpoint, min_interval=5.0, clock=clock)
    run_steps(reporter, clock, steps=8, seconds_per_step=2.0, validate_at=(4,))
    assert reporter.posts == len(running.requests) and reporter.failure is None
    assert {(method, path) for method, path, _, _ in running.requests} == {("POST", PATH)}
    assert {headers["Authorization"] for _, _, headers, _ in running.requests} == {f"Bearer {TOKEN}"}
    assert {headers["Content-Type"] for _, _, headers, _ in running.requests} == {"application/json"}
    bodies = running.bodies()
    # Posts at steps 1, 4, 7 (5 s apart at 2 s a step), then the final one.
    assert [b["progressPercentage"] for b in bodies] == [12, 50, 87, 100]
    # The rate is measured from step 1: 2 s a step, so 4 and 1 steps left are 8 s and 2 s.
    assert [b.get("estimatedRemainingSeconds") for b in bodies] == [None, 8, 2, 0]
    metrics = [{m["name"]: m["value"] for m in b["metrics"]} for b in bodies]
    assert metrics[0] == {"lr": "0.01", "train/loss": "2"}
    assert metrics[1] == {"lr": "0.01", "train/loss": "0.5", "val/loss": "0.25"}  # step 4 validated
    assert metrics[3]["val/loss"] == "0.125"
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", b["lastUpdatedTime"]) for b in bodies)


def test_the_token_is_read_again_for_every_post(server, tmp_path):
    running, endpoint = server
    clock = FakeClock()
    reporter = KubeflowProgress(endpoint, min_interval=0.0, clock=clock)
    run_steps(reporter, clock, steps=1, seconds_per_step=1.0)
    (tmp_path / "token").write_text("rotated-token")  # the kubelet rotates the projected token
    run_steps(reporter, clock, steps=1, seconds_per_step=1.0)  # a second run with the same reporter
    tokens = [headers["Authorization"] for _, _, headers, _ in running.requests]
    assert tokens == [f"Bearer {TOKEN}"] * 2 + ["Bearer rotated-token"] * 2
    assert reporter.failure is None


def test_a_server_outside_the_given_ca_gets_nothing_and_training_goes_on(server, tmp_path):
    running, endpoint = server
    other_ca, _ = make_cert(tmp_path, "some-other-ca")
    clock = FakeClock()
    reporter = KubeflowProgress(
        TrainerStatusServer(endpoint.url, endpoint.token_file, str(other_ca)), min_interval=0.0, clock=clock
    )
    with pytest.warns(
        RuntimeWarning, match="progress: posting to https://localhost.* failed .*CERTIFICATE_VERIFY_FAILED"
    ):
        run_steps(reporter, clock, steps=3, seconds_per_step=1.0)
    assert running.requests == [] and reporter.posts == 0  # the TLS handshake failed: nothing was sent


def test_a_refused_post_is_one_warning_with_the_servers_reason(server, tmp_path, recwarn):
    running, endpoint = server
    bad_token = tmp_path / "bad-token"
    bad_token.write_text("not-the-token")
    clock = FakeClock()
    reporter = KubeflowProgress(
        TrainerStatusServer(endpoint.url, str(bad_token), endpoint.ca_cert_file), min_interval=0.0, clock=clock
    )
    run_steps(reporter, clock, steps=3, seconds_per_step=1.0)
    assert len(running.requests) == 4 and reporter.posts == 0  # every post tried, each refused
    warned = [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert len(warned) == 1 and "failed (HTTP 403: Forbidden)" in warned[0]


def test_other_ranks_post_nothing(server):
    running, endpoint = server
    reporter = KubeflowProgress(endpoint, min_interval=0.0)
    reporter.on_step(StepEvent(step=1, steps=2, rank=1, lr=0.1, metrics={"train/loss": 1.0}))
    reporter.on_finish(FinishEvent(2, 2, 1, {"val/loss": 1.0}, None))
    assert running.requests == [] and reporter.in_flight is None


def test_without_the_variables_there_is_no_reporter():
    assert KubeflowProgress.from_environment({}) is None
    only_url = {"KUBEFLOW_TRAINER_SERVER_URL": "https://x" + PATH}
    assert KubeflowProgress.from_environment(only_url) is None


def test_a_training_run_reports_to_its_trainjob(server, tmp_path):
    """``train(cfg, callbacks=[reporter])``: the tiny float64 regression MLP, 6 steps on one process."""
    from neural_arch.training.config import load_config
    from neural_arch.training.trainer import train

    running, endpoint = server
    overrides = ["training.steps=6", "training.global_batch_size=8", "data.num_samples=40", "data.val_samples=8"]
    overrides += ["model.hidden=4", "training.precision=fp64", "training.val_every=3", "logging.progress=false"]
    overrides += ["logging.tensorboard=false", "checkpoint.every_steps=0", f"run.dir={tmp_path / 'run'}"]
    reporter = KubeflowProgress(endpoint, min_interval=0.0)
    final = train(load_config(None, overrides), callbacks=[reporter])
    assert reporter.failure is None and reporter.posts == len(running.requests) >= 1
    assert {headers["Authorization"] for _, _, headers, _ in running.requests} == {f"Bearer {TOKEN}"}
    bodies = running.bodies()
    percents = [b["progressPercentage"] for b in bodies]
    assert percents == sorted(percents) and percents[-1] == 100 and bodies[-1]["estimatedRemainingSeconds"] == 0
    last = {m["name"]: m["value"] for m in bodies[-1]["metrics"]}
    assert last["val/loss"] == f"{final['val/loss']:.8g}"


def test_with_trainjob_progress_adds_one_reporter_only_where_the_pod_has_a_status_server(tmp_path):
    env = {
        "KUBEFLOW_TRAINER_SERVER_URL": "https://x" + PATH,
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token"),
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(tmp_path / "ca.crt"),
    }
    mine = Callback()
    assert with_trainjob_progress([mine], {}) == [mine]
    added = with_trainjob_progress([mine], env)
    assert (
        added[0] is mine
        and isinstance(added[1], KubeflowProgress)
        and added[1].server.url == env["KUBEFLOW_TRAINER_SERVER_URL"]
    )
    assert with_trainjob_progress(added, env) == added  # one given already: not a second


def test_a_run_in_a_trainjob_pod_reports_by_itself(server, tmp_path, monkeypatch):
    """``train(cfg)`` with no callbacks, in a pod whose environment names the status server."""
    from neural_arch.training.config import load_config
    from neural_arch.training.trainer import train

    running, endpoint = server
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", endpoint.url)
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", endpoint.token_file)
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_CA_CERT", endpoint.ca_cert_file)
    train(load_config("tiny", [f"run.dir={tmp_path / 'run'}", "logging.progress=false"]))
    assert running.requests and running.bodies()[-1]["progressPercentage"] == 100
    assert {headers["Authorization"] for _, _, headers, _ in running.requests} == {f"Bearer {TOKEN}"}


def test_the_status_body_keeps_the_losses_within_the_apis_limits():
    metrics = {f"perf/extra_{i:03d}": float(i) for i in range(300)}
    metrics.update({f"perf/compute_s/rank{r}": 0.1 for r in range(64)})  # one per rank: left out
    metrics.update({"train/loss": 0.25, "val/loss": float("nan"), "x" * 65: 1.0, "lr": 1e-3})
    when = datetime(2026, 6, 12, 3, 0, 0, 500000, tzinfo=timezone.utc)
    status = status_body(140, 12.6, metrics, now=when)["trainerStatus"]
    assert status["progressPercentage"] == 100 and status["estimatedRemainingSeconds"] == 13
    assert status["lastUpdatedTime"] == "2026-06-12T03:00:00Z"
    shown = [(m["name"], m["value"]) for m in status["metrics"]]
    assert len(shown) == 256 and shown[:2] == [("train/loss", "0.25"), ("val/loss", "nan")]
    assert not any("/rank" in name or len(name) > 64 for name, _ in shown)
    assert "estimatedRemainingSeconds" not in status_body(5, None, {})["trainerStatus"]
