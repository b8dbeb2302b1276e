"""The sea-ice forecaster (IceNet-style U-Net): the application ``make run`` trains.

Run: ``neural-arch train --config icenet --create-data`` (``run.task: icenet``).
Files: ``synth.py`` makes the synthetic gridded months, ``data.py`` writes and reads the
zarr store, ``model.py`` the U-Net and its masked loss (no distributed code), ``metrics.py``
the sea-ice metrics as exact sums, ``task.py`` the ``Task`` (normalization, loss, metrics,
baselines), ``report.py`` report.md and the maps, ``export.py`` the TorchScript export
builder, ``config.py`` its ``model:``/``data:`` config sections.
"""
