"""MLflow follows the job: one MLflow run per training run, every step logged once, across a
SIGTERM stop and resume and across a rank SIGKILLed and restarted by the launcher.

Run: ``.venv/bin/python -m pytest tests/training/test_mlflow.py -q``
The regression MLP with ``logging.mlflow=true`` (the default store: ``sqlite:///RUN_DIR/mlflow.db``).
Read back with MLflow's client: the experiment holds one run, ``train/loss`` has each logged step
exactly once, the params hold the resolved config and the finished run has the report artifacts.
"""

import pytest

from tests.helpers.long_run import STEPS
from tests.helpers.tracked_runs import KILLED_STEPS, killed_and_restarted, stopped_and_resumed

mlflow = pytest.importorskip("mlflow")
pytestmark = pytest.mark.multiprocess  # runs the CLI and the launcher


def the_one_run(run_dir):
    """(run, the steps train/loss was logged at) of the run directory's single MLflow run."""
    client = mlflow.tracking.MlflowClient(f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    runs = [r for e in experiments for r in client.search_runs([e.experiment_id])]
    assert len(runs) == 1, [r.info.run_id for r in runs]
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")]
    return runs[0], steps, client


@pytest.mark.timeout(300)
def test_stopped_by_sigterm_and_resumed_is_one_run(tmp_path):
    run = tmp_path / "run"
    stopped_and_resumed(run, "logging.mlflow=true")
    one, steps, client = the_one_run(run)
    assert steps == sorted(set(steps)) and steps[-1] == STEPS, steps  # each step once, up to the end
    assert set(range(50, STEPS + 1, 50)) <= set(steps)
    assert one.data.params["training.steps"] == str(STEPS) and one.info.status == "FINISHED"
    assert {a.path for a in client.list_artifacts(one.info.run_id)} >= {"summary.txt", "config.yaml"}
    assert (run / "mlartifacts").is_dir()  # beside the store, not in the working directory's mlruns/


@pytest.mark.timeout(300)
def test_a_killed_rank_restarted_by_the_launcher_is_one_run(tmp_path):
    run = tmp_path / "run"
    killed_and_restarted(run, "logging.mlflow=true")
    _, steps, _ = the_one_run(run)
    assert steps == list(range(1, KILLED_STEPS + 1)), steps  # steps 5-7, trained twice, logged once
