"""Continuous actions (issue 31): do the scripts learn Pendulum-v1 and HalfCheetah-v5 (folder
continuous-learning, bench.sh's preset of that name), each variant's runs against the bar a
continuous PPO is expected to pass there."""

import numpy as np

from .learning import plot_learning_curves
from .output import variant_order

BARS = {"Pendulum-v1": -300.0, "HalfCheetah-v5": 1000.0}  # the final return every seed must reach


def learning_rows(runs) -> list[list]:
    """Per env and variant: the seeds, the mean return of the first 10 logged iterations (near random), their
    final returns (mean of the last 10 iterations' episodes),
    the bar, how many seeds reached it, and a run's env steps (its time is the continuous timing study's)."""
    rows = []
    for env in sorted({r.env_id for r in runs}):
        for v in variant_order({r.variant for r in runs if r.env_id == env}):
            mine = [r for r in runs if (r.env_id, r.variant) == (env, v)]
            finals = [r.summary.get("charts/episodic_return_final") for r in mine]
            finals = [f for f in finals if f is not None]
            if not finals:
                continue
            bar = BARS.get(env)
            reached = "–" if bar is None else f"{sum(f >= bar for f in finals)} of {len(finals)}"
            steps = max(int(r.series("time/iteration")[0][-1]) for r in mine)
            first = [float(np.mean(r.series("charts/episodic_return")[1][:10])) for r in mine]
            rows.append([env, v, len(finals), float(np.mean(first)), float(np.mean(finals)),
                         f"{min(finals):.1f} .. {max(finals):.1f}",
                         "–" if bar is None else bar, reached, steps])
    return rows


def continuous_learning_section(runs, out):
    out.heading("Learning continuous control",
                "Every Gymnax script on Pendulum-v1 and both CPU-env scripts on MuJoCo's HalfCheetah-v5, small "
                "model, the continuous defaults (CleanRL's continuous script's learning rate, minibatches and "
                "entropy bonus; observation and reward normalization on), one run per seed "
                "(`bash bench.sh continuous-learning --repeats 3`).")
    plot_learning_curves(runs, "steps", out, name="continuous_learning.png",
                         caption="Return against env steps on the continuous envs: mean and min..max over seeds. "
                                 "Every variant runs the same algorithm, so the curves of one env should overlap.")
    out.table("Continuous control: the final return (the mean over the episodes of the last 10 iterations) of each "
              "seed, against the bar each must reach",
              ["env", "variant", "seeds", "return, first 10 iterations", "final return, mean", "min .. max", "bar",
               "seeds at the bar", "env steps"],
              learning_rows(runs), block="continuous-learning")
