# Two commands for a new user: `make run` (the main job) and `make test` (the suite).
# Each bootstraps its own virtual environment in .venv: `make run` with only what a run needs
# (torch, then this package without extras); `make test` and `make docs` add the dev extras
# (pytest, ruff, mypy, MLflow, W&B, MkDocs) on top, once.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test test-fast docs venv dev clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned: a looser spec would pull a multi-GB CUDA build.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e .
	touch $(STAMP)

# Remade whenever the runtime install is (pyproject.toml changed), so the extras follow it.
$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install -e '.[dev]'
	touch $(DEV_STAMP)

venv: $(STAMP)

dev: $(DEV_STAMP)

run: $(STAMP)
	$(PY) -m neural_arch.cli train --config icenet --create-data

# Two pytest-xdist workers, one per core: most tests wait on processes they started (restarts,
# timeouts, imports), so two at a time take about half the time; tests marked `machine` (a local
# SLURM, network namespaces, Ray, mpirun) all run on one worker, one after another.
test: $(DEV_STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup

# The edit-run loop: in-process tests only (no spawned ranks, CLI runs or builds), under a minute.
test-fast: $(DEV_STAMP)
	$(PY) -m pytest -m "not multiprocess" -q

# The documentation site, built as CI builds it (every warning an error) into build/site.
docs: $(DEV_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d build/site

clean:
	rm -rf $(VENV) runs build
