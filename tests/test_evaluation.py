"""--eval-episodes N as documented, in every script: one episode on each of N fresh environments,
seeded apart from training, with the greedy policy, after the timed part.

Each script's own main() runs in this process with every env reset and env step recorded
(inside jit through an ordered debug callback), and its evaluation made slower by a known
delay. From that one run:
- greedy: every action of the evaluation is the argmax of the saved model's logits at the
  observation it was taken in;
- seeded apart: no evaluation env starts where a training env started;
- one whole episode each: each logged return is the sum of its env's rewards up to and
  including that env's first episode end, no fewer steps and no later episode;
- outside the timed part: time/total and the iteration times hold none of the delay.
The agent scripts' evaluation is agent i's: tests/test_agents.py checks it equals the
single-agent script's with seed + i, which this file proves."""

import time

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import CONTINUOUS_SCRIPTS, GYMNASIUM_SCRIPTS, ONE_AGENT_SCRIPTS, ROOT, TINY, TINY_ARGS, load, read_json, scalars, script_args

EPISODES = 16  # and as many training envs: a key shared with training's would start them alike
DELAY = 3.0  # seconds the evaluation is made to take longer


def recorded_main(script, tmp_path, monkeypatch, changes=(), plant=None):
    """The script's main() with --save-model and --eval-episodes, recording every env reset
    (obs) and env step (action, obs, reward, terminated, truncated), each tagged with the phase
    it ran in: "train" or "eval". Returns (run directory, records, the wall time since the
    script's START_TIME, the clock of time/total)."""
    import jax

    m = load(script, fresh=True)
    records, phase = [], ["train"]
    env_reset, env_step, evaluate = m.env_reset, m.env_step, m.evaluate

    def record(kind, *arrays):  # at trace time the phase is known, the values only when it runs
        now = phase[0]
        if script in GYMNASIUM_SCRIPTS:
            records.append((now, kind, *map(np.asarray, arrays)))
        else:
            jax.debug.callback(lambda *xs: records.append((now, kind, *map(np.asarray, xs))), *arrays, ordered=True)

    def reset(*args, **kwargs):
        obs, state = env_reset(*args, **kwargs)
        record("reset", obs)
        return obs, state

    def step(*args, **kwargs):
        state, out = env_step(*args, **kwargs)
        action = args[2] if script in GYMNASIUM_SCRIPTS else args[1]
        record("step", action, out.obs, out.reward, out.terminated, out.truncated)
        return state, out

    def slow_evaluate(*args, **kwargs):
        phase[0] = "eval"
        time.sleep(DELAY)
        return evaluate(*args, **kwargs)

    m.env_reset, m.env_step, m.evaluate = reset, step, slow_evaluate
    if plant:
        plant(m)
    log_dir = tmp_path / "runs"
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", [script, *TINY, "--num-envs", str(EPISODES), "--save-model",
                                     "--eval-episodes", str(EPISODES),
                                     "--log-dir", str(log_dir), *changes])
    m.main()
    jax.effects_barrier()
    wall = time.time() - m.START_TIME  # the clock time/total reads, from the module's import
    (run_dir,) = log_dir.iterdir()
    return run_dir, records, wall


def evaluation_checks(script, run_dir, records, wall):
    """Every promise, or the AssertionError of the first one broken."""
    summary = read_json(run_dir / "summary.json")
    train = [r for r in records if r[0] == "train"]
    evals = [r for r in records if r[0] == "eval"]
    (_, _, eval_obs), *eval_steps = evals
    assert eval_obs.shape[0] == EPISODES and all(kind == "step" for _, kind, *_ in eval_steps)

    # greedy: the saved model's argmax at each observation an action was taken in
    m = load(script)
    args = script_args(m, **TINY_ARGS)
    other = ref.random_weights(np.random.default_rng(0), eval_obs.shape[1], (64, 64), 2)
    adapter = adapter_for(script)(script, other, args)
    adapter.load(run_dir)
    seen = [eval_obs] + [obs for _, _, _, obs, *_ in eval_steps[:-1]]
    actions = np.stack([action for _, _, action, *_ in eval_steps])
    greedy = np.stack([adapter.logits(obs.astype(np.float32)).argmax(-1) for obs in seen])
    assert (actions == greedy).all(), f"{(actions != greedy).sum()} of {actions.size} evaluation actions not greedy"

    # seeded apart: no evaluation env starts where a training env did (to the float: XLA compiles
    # training's reset unoptimized, which may round differently)
    train_obs = next(r[2] for r in train if r[1] == "reset")
    shared = [i for i, row in enumerate(eval_obs) if (np.abs(train_obs - row).max(axis=1) < 1e-6).any()]
    assert not shared, f"evaluation envs {shared} start where a training env started: the same seed or key"

    # one whole episode each: the rewards up to and including each env's first episode end
    rewards = np.stack([reward for *_, reward, _, _ in eval_steps])
    ends = np.stack([terminated | truncated for *_, terminated, truncated in eval_steps])
    assert ends.any(axis=0).all(), "an evaluation env never finished an episode"
    first_end = ends.argmax(axis=0)
    expected = [float(rewards[: first_end[i] + 1, i].sum()) for i in range(EPISODES)]
    assert summary["eval/episodic_returns"] == pytest.approx(expected), "an episode cut short or counted twice"

    # outside the timed part
    iterations = [v for _, v in scalars(run_dir)["time/iteration"]]
    assert summary["time/total"] < wall - DELAY + 1.0, f"time/total {summary['time/total']:.2f} s holds the " \
        f"evaluation's {DELAY} s (the run took {wall:.2f} s)"
    # the evaluation runs after the last iteration: that one would hold it
    assert iterations[-1] < np.median(iterations[1:]) + DELAY / 2, "the last iteration's time holds the evaluation"


@pytest.mark.parametrize("script", ONE_AGENT_SCRIPTS)
def test_evaluation_keeps_its_promises(script, tmp_path, monkeypatch):
    evaluation_checks(script, *recorded_main(script, tmp_path, monkeypatch))


@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
@pytest.mark.parametrize("episodes", [2, 7])  # fewer and more than the 4 training envs (as many: above)
def test_evaluation_seeds_never_meet_trainings(script, episodes, tmp_path, monkeypatch):
    """The CPU-env scripts seed env i with seed + i: the evaluation's seeds are none of training's, whether it
    runs fewer or more episodes than training has envs (where an offset by the episode count would meet them)."""
    m = load(script, fresh=True)
    seeds, phase = {"train": set(), "eval": set()}, ["train"]
    env_reset, evaluate = m.env_reset, m.evaluate

    def reset(envs, seed, *args, **kwargs):
        seeds[phase[0]].update(range(seed, seed + envs.num_envs))
        return env_reset(envs, seed, *args, **kwargs)

    def evaluating(*args, **kwargs):
        phase[0] = "eval"
        return evaluate(*args, **kwargs)

    m.env_reset, m.evaluate = reset, evaluating
    monkeypatch.chdir(ROOT)
    compiled = ["--compile-mode", "none"] if "compile" in script else []  # the seeding is main's, compiled or not
    monkeypatch.setattr("sys.argv", [script, *TINY, "--num-iterations", "1", "--eval-episodes", str(episodes),
                                     "--log-dir", str(tmp_path), *compiled])
    m.main()
    assert len(seeds["train"]) == TINY_ARGS["num_envs"] and len(seeds["eval"]) == episodes
    assert not seeds["train"] & seeds["eval"], f"evaluation seeds {sorted(seeds['train'] & seeds['eval'])} are training's"


BEYOND = 3.0  # the mean of the Gaussian below: beyond Pendulum's bounds (+-2) and beyond +-1


@pytest.mark.parametrize("script", CONTINUOUS_SCRIPTS)
def test_a_gaussian_policys_greedy_action_is_its_mean_beyond_the_bounds(script, tmp_path, monkeypatch):
    """A Gaussian policy's greedy action is its mean, wherever the mean lies: the evaluation hands the env
    (whose env_step clips to the bounds, tests/test_rollout.py) the mean itself, here 3.0 at every
    observation, from a model this script saved and loaded (Pendulum-v1, no normalization, no iteration)."""
    m = load(script)
    args = script_args(m, True, env_id="Pendulum-v1", normalize=False, **TINY_ARGS)
    weights = ref.random_weights(np.random.default_rng(0), 3, (64, 64), 1, continuous=True)
    kernel, bias = weights["actor"][-1]
    weights["actor"][-1] = (np.zeros_like(kernel), np.full_like(bias, BEYOND))
    saved = adapter_for(script)(script, weights, args).save(tmp_path)
    _, records, _ = recorded_main(script, tmp_path, monkeypatch, ("--env-id", "Pendulum-v1", "--no-normalize",
                                                                  "--num-iterations", "0", "--load-model",
                                                                  str(tmp_path / saved)))
    actions = np.stack([action for phase, kind, action, *_ in records if phase == "eval" and kind == "step"])
    assert actions.size and np.allclose(actions, BEYOND), f"greedy actions {np.unique(actions)[:5]}, not the mean"


FROZEN = dict(mean=np.array([0.5, -0.3, 1.0]), var=np.array([0.25, 4.0, 9.0]), count=1e7)  # Pendulum's (cos, sin, speed)


@pytest.mark.parametrize("script", CONTINUOUS_SCRIPTS)
def test_a_normalized_policy_is_evaluated_on_trainings_frozen_statistics(script, tmp_path, monkeypatch):
    """The evaluation of a normalized policy scales every observation by the statistics training ended with,
    frozen. A model saved with statistics far from a fresh start's (and a count that the reset's batch barely
    moves) is loaded with no iteration and evaluated on Pendulum-v1, whose observation (cos, sin, speed) lies
    on the circle cos**2 + sin**2 = 1: every observation the policy saw, unscaled with the saved statistics,
    lies on it. Fresh statistics, or statistics that go on learning in the evaluation, put it elsewhere."""
    m = load(script)
    args = script_args(m, True, env_id="Pendulum-v1", **TINY_ARGS)
    weights = ref.random_weights(np.random.default_rng(0), 3, (64, 64), 1, continuous=True)
    stats = {"obs": FROZEN, "reward": dict(mean=np.zeros(()), var=np.ones(()), count=FROZEN["count"])}
    saved = adapter_for(script)(script, weights, args).save(tmp_path, m.Normalizer.start(3, EPISODES, stats))
    _, records, _ = recorded_main(script, tmp_path, monkeypatch, ("--env-id", "Pendulum-v1", "--num-iterations", "0",
                                                                  "--load-model", str(tmp_path / saved)))
    seen = [r[2] if r[1] == "reset" else r[3] for r in records if r[0] == "eval"]  # what the policy was given
    raw = np.concatenate(seen).astype(np.float64) * np.sqrt(FROZEN["var"] + 1e-8) + FROZEN["mean"]
    off = np.abs(raw[:, 0] ** 2 + raw[:, 1] ** 2 - 1)
    assert len(seen) > 10 and off.max() < 3e-5, f"{off.max():.2g}: not the saved statistics, frozen"
