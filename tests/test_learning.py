"""Each variant learns CartPole with the defaults (100 iterations, 819,200 steps).

Random play returns about 22 on CartPole-v1 and the maximum is 500; the contract asks
for a mean of at least 400 over the episodes of the last 10 iterations.
"""

import pytest
from helpers import SCRIPTS, read_json, run_ok


@pytest.mark.parametrize("script", SCRIPTS)
def test_learns_cartpole_with_defaults(script, tmp_path):
    summary = read_json(run_ok(script, log_dir=tmp_path) / "summary.json")
    assert summary["num_iterations"] == 100 and summary["env_id"] == "CartPole-v1"
    assert summary["charts/episodic_return_final"] >= 400, summary
