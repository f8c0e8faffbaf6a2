"""README's "How long a default run takes" (analysis/defaults.py, issue 88): the defaults it models are each
script's own, its default run is the variant it reads, and its model adds up a run as it runs."""

import numpy as np
import pytest
from helpers import load

from analysis import defaults


@pytest.mark.parametrize("algorithm, variant", [(a, v) for a, vs in defaults.SCRIPTS.items() for v in vs])
def test_the_modelled_defaults_are_the_scripts_own(algorithm, variant):
    m = load(defaults.script_of(variant))
    args = m.RunArgs()
    for name, value in defaults.DEFAULTS[algorithm].items():
        assert getattr(args, name) == value, f"{defaults.script_of(variant)}: {name}"
    assert args.model == "small" and m.variant_name(args) == variant  # a default run names itself as the table reads it


class Run:
    """What the model reads of a run: its args, start time and time/iteration series (steps, seconds, walls)."""

    def __init__(self, args, seconds, start=1.5):
        log = args.get("log_frequency", 1)
        steps = np.arange(1, len(seconds) + 1) * log
        walls = 100.0 + start + np.cumsum(seconds)  # each iteration's event, written as it ends
        self.info, self.scalars = {"args": args, "start_time": 100.0}, {"time/iteration": (steps, np.asarray(seconds), walls)}

    def series(self, tag):
        return self.scalars[tag]


def test_an_offpolicy_default_run_adds_up_its_phases():
    """A TD3 run of 30 iterations with learning starting at 5,000: start-up 1.5 s, iteration 0 compiles (9 s), four
    fill at 0.2 s, the fifth (the first update's) 7 s, then 0.9 s each; the default run (1M env steps, 25,000 of
    them filling) is start-up, iteration 0, 24 filling, the first update's, and 974 training iterations."""
    seconds = [9.0] + [0.2] * 4 + [7.0] + [0.9] * 24
    run = Run({"log_frequency": 1000, "learning_starts": 5000}, seconds)
    expected = 1.5 + 9.0 + 24 * 0.2 + 7.0 + 974 * 0.9
    assert defaults.offpolicy_default_run(run, "td3") == pytest.approx(expected)


def test_a_ppo_default_run_is_measured_where_it_ran_whole_and_modelled_where_it_did_not():
    whole = [5.0] + [0.1] * 99
    assert defaults.ppo_default_run(Run({}, whole)) == pytest.approx(1.5 + 5.0 + 9.9)
    short = [5.0] + [0.3] * 7 + [0.1] * 12  # 20 iterations: the steady iteration (8..19) for the other 80
    assert defaults.ppo_default_run(Run({}, short)) == pytest.approx(1.5 + 5.0 + 2.1 + 1.2 + 80 * 0.1)
    assert defaults.ppo_default_run(Run({}, [5.0] + [0.1] * 9)) is None  # no steady state to model the rest with


def test_durations_read_as_a_newcomer_reads_them():
    assert defaults.duration(40) == "40 s" and defaults.duration(150) == "2.5 min" and defaults.duration(6000) == "1.7 h"
    assert defaults.durations([60, 150, 240]) == "2.5 min (1–4, 3 runs)"
