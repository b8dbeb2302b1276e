"""Applications: one folder each, holding everything that is specific to it.

Each ``apps/<name>/`` has its config sections (``config.py``), data creation and reading,
its model (plain PyTorch, no distributed imports), its ``Task`` (loss, metrics, baselines,
report, export builder) and, where it has one, a parallelize plan. The framework
(``neural_arch.training``, ``neural_arch.distributed``, ``neural_arch.cli``) never imports
an application: it looks the ``run.task`` name up in the registry below (imported lazily,
so importing this package imports no application). Add your own application outside this
package with ``neural_arch.training.registry.register_task`` or ``run.task: pkg.mod:Class``.
"""

BUILTIN_TASKS = {"regression": "neural_arch.apps.regression.task:RegressionTask", "icenet": "neural_arch.apps.icenet.task:IceNetTask",
                 "gpt": "neural_arch.apps.gpt.task:GPTTask"}
"""Built-in applications: task name -> ``module:Class`` (imported only when a config names it)."""
DEFAULT_TASK = "regression"
"""The task of a config that names none: the small MLP, so an empty config trains in a second."""
