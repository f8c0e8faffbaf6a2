"""Loaded at start-up by every Python process the tests start (tests/conftest.py puts this folder on
PYTHONPATH): gymnax imports seaborn, and with it scipy.stats, at import time for its Pong renderer,
which no test draws with. Loaded lazily, on first use, it costs nothing to a process that never uses
it (`ppo_linen.py --help` started in 3.4 s instead of 5.4 s on a loaded 2-core machine; the whole
suite gained a few percent). Nothing else changes: used, it is the same module, loaded then."""

import importlib.abc
import importlib.util
import sys

LAZY = "seaborn"


class LazyFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != LAZY:
            return None
        sys.meta_path.remove(self)  # the spec the other finders would give, with a lazy loader
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


sys.meta_path.insert(0, LazyFinder())
