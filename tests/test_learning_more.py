"""The other half of tests/test_learning.py's cases, in a file of its own: under the README's
`-n 2 --dist loadfile` a file runs on one worker, and the learning runs are the suite's longest."""

import pytest
from test_learning import CASES, ids, learns_cartpole

HALF = CASES[1::2]


@pytest.mark.parametrize("script,toggles", HALF, ids=ids(HALF))
def test_learns_cartpole_with_defaults(script, toggles, tmp_path):
    learns_cartpole(script, toggles, tmp_path)
