"""The random draws the off-policy scripts (dqn_*.py, td3_*.py, sac_*.py) make themselves, and where their learned
coefficients start (issue 89). The reference tests (test_dqn.py, test_td3.py, test_sac.py) hand every update its
batch and its noise and set each learned coefficient themselves, so three things stay out of their sight:

- randomness threaded through an iteration: a key or generator an update returns (or a runner carries) and the
  loop drops makes every update sample the same replay rows and draw the same noise;
- the distribution a script itself draws: epsilon-greedy's exploration, TD3's exploration noise and its target
  smoothing noise, SAC's reparameterized samples (a uniform draw where a Gaussian belongs passes them);
- where a run starts: the first logged epsilon (DQN) and alpha (SAC, autotuned), and the defaults, against
  CleanRL's dqn.py, td3_continuous_action.py and sac_continuous_action.py.

One tiny run per script, through its own main() in this process, watches the draws: the script's functions that
take them (the update that takes a batch and noise, the policy step, SAC's sample) are wrapped in a private copy of
the module to record what they are handed and what they return (JAX's through jax.debug.callback, from inside
the compiled iteration). The buffer is smaller than --learning-starts, full before the first update, so a dropped
key would sample the very same rows again. dqn/td3/sac_torch_compile.py run twice (their CPU-env twins, the
*_torch_compile_gymnasium.py scripts, compiled only): with --compile-mode none (the same
source, its loop and its draws, eager) and in the mode they run by default (torch.compile's default on a CPU),
where TD3's and SAC's policy step is one compiled graph whose random draws are inductor's own generated code, not the
eager ops' (no fallback_random here: what the script draws; DQN's draws stay eager, its greedy action compiled). The compiled policy step is watched from outside, wrapped
once compile_hot_paths has compiled it (a wrapper inside its full graph would break it): the greedy or the actor's
own action each step is the script's eager policy step's, and SAC's acting draw is read back from the compiled
sample (the tanh undone, less the actor's mean, over its spread; the eager run's recorded draws hold the
reading-back to them). The updates (their gradients and Adam's step compiled, the updates watched as the loop calls them) are handed their noise by the loop,
drawn outside them in either mode. A compiled run costs about half a minute of CPU, most of it compiling the
updates, which cannot run eager in that mode (their Adam is capturable, for CUDA graphs)."""

import collections
import functools
import inspect
import math

import numpy as np
import pytest
from helpers import (DQN_SCRIPTS, JAX_SET_BY_SCRIPTS, ROOT, SAC_SCRIPTS, TD3_SCRIPTS, load, scalars)

OFFPOLICY_SCRIPTS = DQN_SCRIPTS + TD3_SCRIPTS + SAC_SCRIPTS
BATCH, BUFFER = 32, 200  # the buffer full before learning starts: a repeated key would repeat the rows
RUNS = {  # the tiny runs: DQN on CartPole (2 actions), TD3 and SAC on Pendulum (torque in [-2, 2])
    "dqn": dict(total_timesteps=2000, learning_starts=500, log_frequency=100),
    # updates from step 246: the first logged iteration (to 250) holds two delayed steps, four steps of alpha
    "td3": dict(total_timesteps=600, learning_starts=245, log_frequency=50),
    "sac": dict(total_timesteps=600, learning_starts=245, log_frequency=50),
}
NUM_ACTIONS, LOW, HIGH = 2, -2.0, 2.0

# CleanRL's defaults (dqn.py, td3_continuous_action.py, sac_continuous_action.py @ fe8d8a03; docs/offpolicy.md)
CLEANRL = {
    "dqn": dict(total_timesteps=500_000, learning_rate=2.5e-4, num_envs=1, buffer_size=10_000, gamma=0.99, tau=1.0,
                target_network_frequency=500, batch_size=128, start_e=1.0, end_e=0.05, exploration_fraction=0.5,
                learning_starts=10_000, train_frequency=10, seed=1),
    "td3": dict(total_timesteps=1_000_000, learning_rate=3e-4, num_envs=1, buffer_size=1_000_000, gamma=0.99,
                tau=0.005, batch_size=256, policy_noise=0.2, exploration_noise=0.1, learning_starts=25_000,
                policy_frequency=2, noise_clip=0.5, seed=1),
    "sac": dict(total_timesteps=1_000_000, num_envs=1, buffer_size=1_000_000, gamma=0.99, tau=0.005, batch_size=256,
                learning_starts=5_000, policy_lr=3e-4, q_lr=1e-3, policy_frequency=2, target_network_frequency=1,
                alpha=0.2, autotune=True, seed=1),
}


def algorithm(script: str) -> str:
    return script.split("_")[0]


def linear_schedule(start_e: float, end_e: float, duration: float, t: int) -> float:
    """CleanRL's dqn.py, as it is written there."""
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


# ---- watching a run's draws
def host(x):
    """A recorded value as a NumPy array (torch's tensors detached and copied)."""
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy().copy()
    return np.array(x)


def record(store: list, *values):
    """Appends the values (as NumPy arrays) to store when they are computed: JAX's from inside the compiled program
    through a callback, anything else at once."""
    import jax

    if any(isinstance(v, jax.Array) for v in values):
        jax.debug.callback(lambda *vs: store.append(tuple(map(host, vs))), *values)
    else:
        store.append(tuple(map(host, values)))


def watched(fn, on_call, eager=None):
    """fn, calling on_call(arguments by name, its result, again) after each call; again(**changes) calls fn (or
    its eager original, where fn is compiled: no compile again for other arguments) once more with those
    arguments changed."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        out = fn(*args, **kwargs)

        def again(**changes):
            bound = signature.bind(*args, **kwargs)
            bound.arguments.update(changes)
            return (eager or fn)(*bound.args, **bound.kwargs)

        on_call(signature.bind(*args, **kwargs).arguments, out, again)
        return out

    return call


def instrument(m, algo: str, seen: dict, eager: dict | None = None):
    """Wraps the module's functions that are handed the draws (each looked up by name when the loop runs or is
    traced, so the wrapper is what the run calls). eager: the compiled functions' eager originals, by name (a
    compiled run, wrapped after compile_hot_paths compiled them)."""
    eager = eager or {}
    if algo == "dqn":
        # each policy step: its epsilon, the action taken, and the greedy one (the same call at epsilon 0)
        m.act = watched(m.act, lambda a, action, again: record(seen["act"], a["epsilon"], action, again(epsilon=0.0)),
                        eager.get("act"))
        m.td_update = watched(m.td_update, lambda a, out, again: record(seen["update"], a["batch"][0]))
        return
    if algo == "td3":  # the action taken and the actor's own (no noise, not uniform)
        m.act = watched(m.act, lambda a, action, again: record(
            seen["act"], a["uniform"], action, again(uniform=False, noise_scale=0.0)), eager.get("act"))
    else:
        def acting(a, action, again):
            record(seen["act"], a["uniform"], action)
            if "torch" in m.__name__ and not a["uniform"]:  # torch's: the draw read back from the sample it made
                record(seen["act_read_back"], drawn_from_sample(a["actor"], a["obs"], action))

        m.act = watched(m.act, acting, eager.get("act"))
        acting_noise = lambda a, out, again: a["noise"].shape[0] != BATCH and record(seen["act_noise"], a["noise"])
        if hasattr(m, "sample"):  # the JAX scripts' function; torch's Actor.sample (an update's are batch-sized)
            m.sample = watched(m.sample, acting_noise)
        elif not eager:  # (compiled, Actor.sample runs inside the policy step's full graph: read back instead)
            m.Actor.sample = watched(m.Actor.sample, acting_noise)
        m.actor_update = watched(m.actor_update, lambda a, out, again: record(seen["actor_noise"], a["noise"]))
    m.critic_update = watched(m.critic_update, lambda a, out, again: record(seen["update"], a["batch"][0], a["noise"]))


def drawn_from_sample(actor, obs, action):
    """The standard normal draw a torch SAC actor's tanh-squashed sample was made from: tanh undone (in float64),
    less the actor's mean, over its spread (the eager actor's, on the same observations)."""
    import torch

    with torch.no_grad():
        mean, log_std = (x.double() for x in actor(obs))
        squashed = (action.double() - actor.action_bias.double()) / actor.action_scale.double()
        return (torch.atanh(squashed) - mean) / log_std.exp()


class Run(collections.namedtuple("Run", "script args seen logged")):
    """One tiny run of a script: its Args, what the wrapped functions saw (lists of tuples of arrays, by name),
    and its TensorBoard scalars."""


def watched_run(script: str, log_dir, compiled: bool = False) -> Run:
    """The script's tiny run through its main(), watched; compiled (a compiled script): in its default compile
    mode, the compiled functions watched once compile_hot_paths has made them."""
    import jax

    algo = algorithm(script)
    m = load(script, fresh=True)
    seen = collections.defaultdict(list)
    if compiled:
        compile_hot_paths, names = m.compile_hot_paths, ("act", "greedy", "td_grads", "critic_grads", "actor_grads", "adam_step")
        eager = {name: getattr(m, name) for name in names if hasattr(m, name)}

        def compiling(mode):
            compile_hot_paths(mode)
            assert any(getattr(m, name) is not f for name, f in eager.items()), "nothing compiled"
            instrument(m, algo, seen, eager)

        m.compile_hot_paths = compiling  # train() calls it by its module name
    else:
        instrument(m, algo, seen)
    argv = [a for name, value in {**RUNS[algo], "buffer_size": BUFFER, "batch_size": BATCH}.items()
            for a in (f"--{name.replace('_', '-')}", str(value))]
    argv += ["--compile-mode", "none"] if script.endswith("_compile.py") and not compiled else []
    kept = {name: jax.config.values[name] for name in JAX_SET_BY_SCRIPTS}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        patch.setattr("sys.argv", [script, *argv, "--log-dir", str(log_dir)])
        try:
            m.main()
            jax.effects_barrier()  # every callback has run
        finally:  # what main() sets for its process, set back for the tests after it
            for name, value in kept.items():
                jax.config.update(name, value)
    assert seen["act"], "the watched functions were not called"
    (run_dir,) = log_dir.iterdir()
    args = m.RunArgs(**{**RUNS[algo], "buffer_size": BUFFER, "batch_size": BATCH})
    return Run(script, args, {k: [tuple(map(np.asarray, v)) for v in vs] for k, vs in seen.items()}, scalars(run_dir))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A script's one tiny run (eager, or compiled), made by the first test that asks for it and shared by the
    others."""
    made = {}

    def get(script: str, compiled: bool = False) -> Run:
        if (script, compiled) not in made:
            name = script.removesuffix(".py") + ("-compiled" if compiled else "")
            made[script, compiled] = watched_run(script, tmp_path_factory.mktemp(name), compiled)
        return made[script, compiled]

    return get


def cases(scripts) -> list:
    """(script, compiled) for each script, eager, and the compiled scripts again in their default compile mode; a
    compiled CPU-env twin in that mode only (eager, it is its eager twin's loop and host draws: tests/test_shape.py)."""
    return [pytest.param(s, False, id=s) for s in scripts if not s.endswith("_compile_gymnasium.py")] + [
        pytest.param(s, True, id=f"{s}-compiled") for s in scripts if "_compile" in s]


# ---- statistics, each bound about five standard errors wide: far tighter than a wrong distribution's distance
def ks_distance(x, cdf) -> float:
    """Kolmogorov-Smirnov: the largest gap between the sample's distribution function and cdf."""
    x = np.sort(np.ravel(x).astype(np.float64))
    f = cdf(x)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(n) / n)))


normal_cdf = np.vectorize(lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2))))


def assert_normal(x, std: float, what: str):
    """Drawn from N(0, std^2): the mean, the spread (each within five standard errors) and the whole shape (a
    Kolmogorov-Smirnov distance its chance puts past 1e-5 fails)."""
    x = np.ravel(x).astype(np.float64)
    n = len(x)
    assert n >= 100, f"{what}: only {n} draws"
    assert abs(x.mean()) < 5 * std / math.sqrt(n), f"{what}: mean {x.mean():.4f} of {n} draws, not 0"
    assert abs(x.std() / std - 1) < 5 * math.sqrt(0.5 / n), f"{what}: std {x.std():.4f} of {n} draws, not {std}"
    assert ks_distance(x / std, normal_cdf) < 2.5 / math.sqrt(n), f"{what}: not Gaussian ({n} draws)"


def assert_uniform(x, low: float, high: float, what: str):
    """Drawn uniform on [low, high]: inside the bounds, the mean, the spread and the shape."""
    x = np.ravel(x).astype(np.float64)
    n, std = len(x), (high - low) / math.sqrt(12)
    assert n >= 100 and x.min() >= low and x.max() <= high, (what, n, x.min(), x.max())
    assert abs(x.mean() - (low + high) / 2) < 5 * std / math.sqrt(n), f"{what}: mean {x.mean():.4f}"
    assert abs(x.std() / std - 1) < 5 * math.sqrt(0.8 / n) / 2, f"{what}: std {x.std():.4f}, not {std:.4f}"
    assert ks_distance(x, lambda v: (v - low) / (high - low)) < 2.5 / math.sqrt(n), f"{what}: not uniform"


def fingerprints(rows) -> np.ndarray:
    """Each row (the last axis) as one number: equal rows, equal numbers."""
    rows = np.ascontiguousarray(rows)
    return np.array([hash(r.tobytes()) for r in rows.reshape(-1, rows.shape[-1])]).reshape(rows.shape[:-1])


# ---- class 2: randomness threaded through an iteration
@pytest.mark.parametrize("script, compiled", cases(DQN_SCRIPTS + TD3_SCRIPTS + SAC_SCRIPTS))
def test_successive_updates_sample_different_rows_and_noise(script, compiled, runs):
    """Every update of a run (one every train-frequency steps, DQN; every step past learning-starts, TD3 and SAC)
    is handed a batch of its own: no two of them share even half their rows, place by place, though the buffer is
    full throughout (a sampler's key handed back and dropped, or a generator seeded again, draws the same rows
    again: nearly every place). TD3's and SAC's noise is fresh at every update too, and SAC's actor and alpha
    draws apart from each other."""
    run = runs(script, compiled)
    args, updates = run.args, run.seen["update"]
    expected = (args.total_timesteps - args.learning_starts - 1) // (args.train_frequency if algorithm(script) == "dqn"
                                                                     else 1)
    assert abs(len(updates) - expected) <= 1, (len(updates), expected)
    rows = fingerprints(np.stack([u[0] for u in updates]))  # (updates, batch): each sampled row's observation
    assert rows.shape[1] == BATCH
    same = (rows[:, None, :] == rows[None, :, :]).mean(-1)  # the share of places two updates agree on
    np.fill_diagonal(same, 0)
    worst = np.unravel_index(same.argmax(), same.shape)
    assert same.max() < 0.5, f"updates {worst} sampled {same.max():.0%} of their rows alike"
    assert len(np.unique(rows)) > BUFFER // 2, "a few rows sampled again and again"  # the whole buffer drawn from
    if algorithm(script) == "dqn":
        return
    noises = [u[1] for u in updates] + [n for (draw,) in run.seen.get("actor_noise", []) for n in draw]
    assert len(set(fingerprints(np.stack([np.ravel(n) for n in noises])))) == len(noises), "noise drawn again"


# ---- class 3: the draws a script makes itself
@pytest.mark.parametrize("script, compiled", cases(DQN_SCRIPTS))
def test_epsilon_greedy_explores_at_cleanrls_epsilon_with_uniform_actions(script, compiled, runs):
    """Each policy step's epsilon is CleanRL's linear schedule at its global step; a step leaves the greedy action
    as often as epsilon times (1 - 1/actions) says, summed over the run (five standard deviations of the count);
    and where epsilon is above 0.9 the actions are near half each (a random action that is always one of the
    two, or an exploration at 1 - epsilon, fails)."""
    run = runs(script, compiled)
    args = run.args
    epsilon, action, greedy = (np.concatenate([np.ravel(s[i]) for s in run.seen["act"]]) for i in range(3))
    schedule = [linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, t)
                for t in range(args.total_timesteps)]
    assert len(epsilon) == args.total_timesteps
    np.testing.assert_allclose(np.sort(epsilon)[::-1], sorted(schedule, reverse=True), rtol=1e-5)
    assert set(np.unique(action)) <= set(range(NUM_ACTIONS))
    p = epsilon.astype(np.float64) * (1 - 1 / NUM_ACTIONS)  # the chance that a step's action is not the greedy one
    off = int((action != greedy).sum())
    assert abs(off - p.sum()) < 5 * math.sqrt((p * (1 - p)).sum()), (off, p.sum())
    early = action[epsilon > 0.9]
    assert abs(early.mean() - 0.5) < 5 * 0.5 / math.sqrt(len(early)), (early.mean(), len(early))


@pytest.mark.parametrize("script, compiled", cases(TD3_SCRIPTS + SAC_SCRIPTS))
def test_actions_uniform_before_learning_starts_then_the_policys(script, compiled, runs):
    """CleanRL's acting: uniform over the bounds at each global step before learning-starts, then the policy's:
    TD3's the actor's action plus Gaussian noise of exploration-noise action scales (the noise read off as the
    action less the actor's, where the actor's is far enough inside the bounds that the clip cannot touch it), all
    in the bounds; SAC's a sample of its Gaussian, whose draw is standard normal."""
    run = runs(script, compiled)
    args = run.args
    uniform, action = (np.concatenate([np.ravel(s[i]) for s in run.seen["act"]]) for i in range(2))
    assert len(uniform) == args.total_timesteps and uniform.sum() == args.learning_starts
    assert action.min() >= LOW and action.max() <= HIGH
    assert_uniform(action[uniform], LOW, HIGH, "before learning starts")
    if algorithm(script) == "sac":
        read_back = [np.ravel(n) for (n,) in run.seen.get("act_read_back", [])]
        if "act_noise" in run.seen:  # the draws the sample was handed, and (torch's) the draws read back from it
            drawn = np.concatenate([np.ravel(n) for (n,) in run.seen["act_noise"]])
            if read_back:
                np.testing.assert_allclose(np.concatenate(read_back), drawn, atol=1e-4)
        else:  # compiled: drawn inside the policy step's graph, read back
            drawn = np.concatenate(read_back)
        assert len(drawn) >= args.total_timesteps - args.learning_starts
        assert_normal(drawn, 1.0, "the acting sample's draw")
        return
    actor = np.concatenate([np.ravel(s[2]) for s in run.seen["act"]])
    std = args.exploration_noise * (HIGH - LOW) / 2
    inside = ~uniform & (np.abs(actor) < HIGH - 5 * std)  # the clip at the bounds out of reach
    assert_normal((action - actor)[inside], std, "the exploration noise")


@pytest.mark.parametrize("script, compiled", cases(TD3_SCRIPTS))
def test_target_smoothing_noise_is_standard_normal_past_the_clip(script, compiled, runs):
    """The noise each critic update is handed for target policy smoothing: one standard normal draw per sampled
    action (the update scales it by policy-noise and clips it at noise-clip, against the reference in
    tests/test_td3.py), its tails reaching past the clip as often as a Gaussian's (|noise| * policy-noise above
    noise-clip: 1.24% at CleanRL's 0.2 and 0.5). Uniform draws on [0, 1) fail each check."""
    run = runs(script, compiled)
    args = run.args
    noise = np.stack([u[1] for u in run.seen["update"]])
    assert noise.shape[1:] == (BATCH, 1)
    assert_normal(noise, 1.0, "the smoothing noise")
    tail = 2 * (1 - normal_cdf(args.noise_clip / args.policy_noise))
    clipped = int((np.abs(noise) * args.policy_noise > args.noise_clip).sum())
    assert abs(clipped - tail * noise.size) < 5 * math.sqrt(tail * noise.size), (clipped, tail * noise.size)


@pytest.mark.parametrize("script, compiled", cases(SAC_SCRIPTS))
def test_sac_updates_draw_standard_normal_samples(script, compiled, runs):
    """The reparameterized samples' draws each SAC update is handed: the critics' (one per sampled next action)
    and each actor step's two (the actor's sample, then alpha's fresh one of the updated actor), standard normal,
    the two of an actor step apart."""
    run = runs(script, compiled)
    critic = np.stack([u[1] for u in run.seen["update"]])
    assert critic.shape[1:] == (BATCH, 1)
    assert_normal(critic, 1.0, "the critics' draw")
    actor = np.stack([n for (n,) in run.seen["actor_noise"]])
    assert actor.shape[1:] == (2, BATCH, 1)
    args = run.args
    delayed = [t for t in range(args.learning_starts + 1, args.total_timesteps) if t % args.policy_frequency == 0]
    assert len(actor) == args.policy_frequency * len(delayed)  # policy-frequency actor steps at each
    assert_normal(actor[:, 0], 1.0, "the actor's draw")
    assert_normal(actor[:, 1], 1.0, "alpha's draw")
    assert not any(np.array_equal(a, b) for a, b in actor), "the actor's and alpha's draws are one"


# ---- class 5: where a run starts
@pytest.mark.parametrize("script, compiled", cases(DQN_SCRIPTS))
def test_the_first_logged_epsilon_is_cleanrls(script, compiled, runs):
    """charts/epsilon at the first iteration's end: CleanRL's schedule from start-e 1 at the iteration's last
    global step (an epsilon that starts at end-e, or counts from another step, fails)."""
    run = runs(script, compiled)
    args = run.args
    step, value = run.logged["charts/epsilon"][0]
    assert step == args.log_frequency
    expected = linear_schedule(CLEANRL["dqn"]["start_e"], CLEANRL["dqn"]["end_e"],
                               CLEANRL["dqn"]["exploration_fraction"] * args.total_timesteps, step - args.num_envs)
    assert value == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("script, compiled", cases(SAC_SCRIPTS))
def test_the_first_logged_alpha_starts_from_cleanrls_one(script, compiled, runs):
    """Autotuned, alpha starts at 1 (log alpha 0, CleanRL's), not at --alpha: the first logged alpha is 1 moved by
    the few Adam steps of log alpha (at q-lr, each at most about the rate) made before it."""
    run = runs(script, compiled)
    args = run.args
    assert args.autotune and args.alpha == CLEANRL["sac"]["alpha"]
    step, value = run.logged["losses/alpha"][0]
    delayed = [t for t in range(args.learning_starts + 1, step) if t % args.policy_frequency == 0]
    alpha_steps = args.policy_frequency * len(delayed)
    assert 0 < alpha_steps <= 8, (step, alpha_steps)  # the run is sized to log alpha early
    assert abs(math.log(value)) <= 2 * args.q_lr * alpha_steps, (value, alpha_steps)


@pytest.mark.parametrize("script", OFFPOLICY_SCRIPTS)
def test_defaults_are_cleanrls(script):
    """The coefficients a run starts from when not given: learning rates, epsilon's schedule, the noise scales and
    clip, alpha and its tuning, tau, the frequencies, as CleanRL's scripts have them."""
    args = load(script).RunArgs()
    expected = CLEANRL[algorithm(script)]
    assert {name: getattr(args, name) for name in expected} == expected
