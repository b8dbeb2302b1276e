# Two commands for a new user: `make run` (the main job) and `make test` (the suite).
# Each bootstraps its own virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-fast docs venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned: a looser spec would pull a multi-GB CUDA build.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(PY) -m neural_arch.cli train --config icenet --create-data

test: $(STAMP)
	$(PY) -m pytest

# The edit-run loop: in-process tests only (no spawned ranks, CLI runs or builds), under a minute.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not multiprocess" -q

# The documentation site, built as CI builds it (every warning an error) into build/site.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d build/site

clean:
	rm -rf $(VENV) runs build
