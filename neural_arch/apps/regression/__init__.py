"""The regression app: an MLP on synthetic or file data (smoke tests, examples, benchmarks).

Run: ``neural-arch train --config tiny``. ``task.py`` is the smallest complete
``Task`` and a template for a new application; ``model.py`` the MLP, ``data.py`` the data,
``config.py`` its ``model:``/``data:`` config sections.
"""
