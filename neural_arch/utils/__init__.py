"""Small utilities with no distributed or application knowledge, shared across the package.

Use: ``from neural_arch.utils.atomic import commit_file``;
``commit_file(path, lambda f: f.write(data))`` replaces a file atomically.

Concern: helpers every layer needs and none owns: ``atomic.py`` (crash-safe files and
directories), ``file_lock.py`` (a lock the kernel frees when its holder dies),
``ports.py`` (a free TCP port).
"""
