"""The tests' start-up speed-up (tests/lazy_imports/sitecustomize.py): a process the tests start imports
gymnax without loading seaborn or scipy.stats, and seaborn still works when used."""

import subprocess
import sys

from helpers import ROOT

CHECK = """
import sys, gymnax
print("scipy.stats" in sys.modules, type(sys.modules["seaborn"]).__name__)
import seaborn
print(len(seaborn.color_palette("husl", 3)), "scipy.stats" in sys.modules)
"""


def test_gymnax_starts_without_seaborn_and_seaborn_still_loads():
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["False _LazyModule", "3 True"]
