"""``neural-arch recipes`` lists the shipped recipes and prints one; ``train --config`` takes a name.

Run: ``.venv/bin/python -m pytest tests/cli/test_recipes_cli.py -q``
"""

from neural_arch.training.recipes import RECIPES_DIR, recipe_names
from tests.helpers.cli import run_main


def test_recipes_lists_every_recipe_with_its_first_comment_line(capsys):
    code, out, _ = run_main(["recipes"], capsys)
    assert code == 0
    for name in recipe_names():
        assert any(line.split()[:1] == [name] for line in out.splitlines()), (name, out)
    assert "2 processes on CPU" in out  # gpt.yaml's and icenet.yaml's first lines


def test_recipes_name_prints_the_file_as_shipped(capsys):
    code, out, _ = run_main(["recipes", "icenet"], capsys)
    assert code == 0
    assert out == (RECIPES_DIR / "icenet.yaml").read_text()


def test_an_unknown_recipe_is_one_line_and_exit_2(capsys):
    code, out, err = run_main(["recipes", "tinny"], capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("neural-arch recipes: error: no recipe named 'tinny'")
    assert "did you mean 'tiny'?" in err and "gpt, gpt_gpu, icenet" in err


def test_train_with_an_unknown_config_name_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_main(["train", "--config", "icenett"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and "neither a file nor a recipe (did you mean 'icenet'?)" in err
