"""Applications: one folder each, holding everything that is specific to it.

Run one: ``neural-arch train --config tiny`` (the config's ``run.task`` names the app).

Each ``apps/<name>/`` has its config sections (``config.py``), data creation and reading,
its model (plain PyTorch, no distributed imports), its ``Task`` (loss, metrics, baselines,
report, export builder) and, where it has one, a parallelize plan. The framework
(``neural_arch.training``, ``neural_arch.distributed``, ``neural_arch.cli``) imports nothing
from here: each app's ``Task`` is declared as a ``neural_arch.tasks`` entry point in
pyproject.toml, and the registry (``neural_arch.training.registry``) finds it by the
``run.task`` name, the same way it finds an application installed from another package.
Add your own with an entry point of your package, ``register_task``, or
``run.task: pkg.mod:Class``.
"""
