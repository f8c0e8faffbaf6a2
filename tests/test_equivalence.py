"""Proof that every script computes one algorithm, checked against the independent float64
NumPy reference in reference.py, never against another framework:
- from identical weights and one minibatch, the same loss, statistics and gradients (the
  reference's gradients are written out by hand, and checked by finite differences);
- from identical weights, consecutive calls of each script's own update() on different
  batches, each of several epochs of shuffled minibatches, leave the weights the reference's
  global-norm clipping + Adam + linear schedule leaves when it steps through the minibatches
  the script's own permutations make; the optimizer's state holds the schedule's rate;
- GAE, truncation bootstrap included."""

import dataclasses
import functools

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import CONTINUOUS_SCRIPTS, GYMNASIUM_SCRIPTS, load, script_args
from helpers import ONE_AGENT_SCRIPTS as SCRIPTS  # the agent scripts: tests/test_agents.py

# --model cnn: MinAtar's network in every script, the Nature CNN (frames of 36 pixels and more) where Atari runs
CNN_CASES = [(s, "minatar") for s in SCRIPTS] + [(s, "nature") for s in GYMNASIUM_SCRIPTS]

OBS_DIM, NUM_ACTIONS, HIDDEN, MINIBATCH = 6, 3, (64, 64), 256
EPOCHS, MINIBATCHES, UPDATES = 2, 2, 2  # update() calls of 2 epochs x 2 shuffled minibatches each
BATCH = MINIBATCH * MINIBATCHES
STEPS = UPDATES * EPOCHS * MINIBATCHES  # optimizer steps: the whole schedule, from lr down to lr/8
ATOL_WEIGHTS = 2e-6  # float32 against float64; an optimizer step moves a weight by up to lr = 2.5e-4


def shared_args(script, **changes):
    """The script's own Args (its defaults are the contract's), with the given changes: the discrete
    defaults on either head, so that a Gaussian's entropy bonus (0 by default) is in the gradient too."""
    return script_args(load(script), **changes)


def update_args(script):
    """update() as the training loop calls it, at a size the reference can follow: UPDATES calls
    of EPOCHS epochs of MINIBATCHES shuffled minibatches each, over a schedule of STEPS steps."""
    return shared_args(script, num_envs=4, num_steps=BATCH // 4, num_minibatches=MINIBATCHES,
                       update_epochs=EPOCHS, num_iterations=UPDATES)


def random_batch(rng, weights, return_error: float, size: int = BATCH, obs=None) -> dict:
    """Old log-probs and values near the current ones, so some ratios and values clip; the size
    of the return errors sets the gradient's norm (3+-4: above max_grad_norm, 0+-0.05: below).
    The actions: uniform over the logits, or the Gaussian's samples (some beyond the env's [-1, 1]).
    obs: images for a CNN; else standard normal vectors."""
    num_actions = weights["actor"][-1][0].shape[1]
    if obs is None:
        obs = rng.normal(0, 1, (size, weights["actor"][0][0].shape[0])).astype(np.float32)
    out, values, _ = ref.network(ref.as64(weights), obs)
    if "actor_logstd" in weights:
        logstd = weights["actor_logstd"].astype(np.float64)
        actions = (out + np.exp(logstd) * rng.normal(0, 1, out.shape)).astype(np.float32)
        logprobs = ref.gaussian(out, logstd, actions)[0]
    else:
        actions = rng.integers(0, num_actions, size).astype(np.int32)
        logprobs = ref.categorical(out, actions)[0]
    values = values + rng.normal(0, 0.3, size)
    return {
        "obs": obs, "actions": actions,
        "logprobs": logprobs + rng.normal(0, 0.2, size),
        "values": values, "advantages": rng.normal(0.5, 2, size),
        "returns": values + rng.normal(3 if return_error > 1 else 0, return_error, size),
    }


def rows(batch: dict, index) -> dict:
    return {k: v[index] for k, v in batch.items()}


def minibatches_of(batches, perms) -> list[dict]:
    """The minibatches a correct update() steps through, given the permutations it drew: per
    update call, per epoch, the rows perm[j * MINIBATCH:(j + 1) * MINIBATCH] for j in order."""
    out = []
    for u, batch in enumerate(batches):
        for perm in perms[u * EPOCHS:(u + 1) * EPOCHS]:
            out += [rows(batch, perm[j * MINIBATCH:(j + 1) * MINIBATCH]) for j in range(MINIBATCHES)]
    return out


UNSHUFFLED = [np.arange(BATCH)] * (UPDATES * EPOCHS)


def make_problem(continuous: bool):
    rng = np.random.default_rng(0)
    weights = ref.random_weights(rng, OBS_DIM, HIDDEN, NUM_ACTIONS, continuous)
    # the update calls alternate between gradient norms above max_grad_norm (clipped) and below
    batches = [random_batch(rng, weights, 4.0 if u % 2 == 0 else 0.05) for u in range(UPDATES)]
    return weights, batches


@pytest.fixture(scope="module")
def problem():
    return make_problem(continuous=False)


@pytest.fixture(scope="module")
def continuous_problem():
    """The Gaussian head's: 3 action dimensions, a log-std away from its init."""
    return make_problem(continuous=True)


@pytest.fixture(scope="module")
def unshuffled_updates(problem):
    """The reference's steps through each batch in its own order."""
    weights, batches = problem
    return ref.optimizer_steps(weights, minibatches_of(batches, UNSHUFFLED), update_args(SCRIPTS[0]), STEPS)


@functools.cache
def cnn_problem(cnn: str):
    """A CNN's weights and UPDATES batches of images, as make_problem's: MinAtar's 10x10 grids of 0/1
    channels, or Atari's bytes (36x36 rather than 84x84: the Nature CNN's smallest input, to keep
    the float64 reference quick)."""
    rng = np.random.default_rng(2)
    shape = (10, 10, 4) if cnn == "minatar" else (36, 36, 4)
    weights = ref.random_cnn_weights(rng, shape, cnn, NUM_ACTIONS)
    images = lambda: ((rng.random((BATCH, np.prod(shape))) < 0.2) if cnn == "minatar"  # flat, as the scripts'
                      else rng.integers(0, 256, (BATCH, np.prod(shape)))).astype(np.float32)
    return weights, [random_batch(rng, weights, 4.0 if u % 2 == 0 else 0.05, BATCH, images())
                     for u in range(UPDATES)]


# ---- the reference itself
@pytest.mark.parametrize("head", ["categorical", "gaussian", "cnn minatar", "cnn nature"])
def test_reference_gradients_match_finite_differences(head, problem, continuous_problem):
    """The hand-written backward pass equals central differences of the float64 loss (the log-std's
    too; a CNN's convolutions and shared torso too)."""
    if head.startswith("cnn"):
        weights, (batch, *_) = cnn_problem(head.split()[1])
        mb = rows(batch, slice(0, 64))  # the float64 convolutions are slow
    else:
        weights, (batch, *_) = problem if head == "categorical" else continuous_problem
        mb = rows(batch, slice(0, MINIBATCH))
    args = shared_args(SCRIPTS[0])
    rng = np.random.default_rng(1)
    params, grads = ref.flat(ref.as64(weights)), ref.flat(ref.loss_and_grads(weights, mb, args)[2])
    loss_at = lambda p: ref.loss_and_grads(ref.unflat(p, weights), mb, args)[0]
    for _ in range(6):
        direction = rng.normal(0, 1, params.shape)
        direction /= np.linalg.norm(direction)
        h = 1e-6
        numeric = (loss_at(params + h * direction) - loss_at(params - h * direction)) / (2 * h)
        assert grads @ direction == pytest.approx(numeric, rel=1e-6, abs=1e-9)


def test_the_steps_exercise_clipping_and_the_schedule(unshuffled_updates):
    """Some steps are clipped and some are not, and the learning rate falls at each step."""
    norms = [step.norm for step in unshuffled_updates]
    args = update_args(SCRIPTS[0])
    assert max(norms) > 2 * args.max_grad_norm and min(norms) < args.max_grad_norm, norms
    assert [step.lr for step in unshuffled_updates] == pytest.approx(
        [args.learning_rate * (1 - t / STEPS) for t in range(STEPS)])


@pytest.mark.parametrize("planted", ["learning rate decays at half the speed", "clip at 4x max_grad_norm",
                                     "no gradient clipping", "minibatches not shuffled",
                                     "the same shuffle in every epoch"])
def test_planted_errors_are_visible(planted, problem, unshuffled_updates):
    """Each error moves the weights, within these steps, by far more than
    test_updates_match_reference tolerates: that test would fail."""
    weights, batches = problem
    args = update_args(SCRIPTS[0])
    rng = np.random.default_rng(2)
    shuffled = [rng.permutation(BATCH) for _ in range(UPDATES * EPOCHS)]
    correct, wrong = unshuffled_updates, dict(perms=UNSHUFFLED)
    if planted in ("minibatches not shuffled", "the same shuffle in every epoch"):
        correct = ref.optimizer_steps(weights, minibatches_of(batches, shuffled), args, STEPS)
        same = [shuffled[0]] * (UPDATES * EPOCHS)
        wrong = dict(perms=UNSHUFFLED if planted == "minibatches not shuffled" else same)
    else:
        wrong |= {"learning rate decays at half the speed": dict(lr_decay_speed=0.5),
                  "clip at 4x max_grad_norm": dict(max_grad_norm=4 * args.max_grad_norm),
                  "no gradient clipping": dict(max_grad_norm=np.inf)}[planted]
    perms = wrong.pop("perms")
    planted_updates = ref.optimizer_steps(weights, minibatches_of(batches, perms), args, STEPS, **wrong)
    gap = max(np.abs(ref.flat(a.weights) - ref.flat(b.weights)).max() for a, b in zip(correct, planted_updates))
    assert gap > 10 * ATOL_WEIGHTS, f"{planted}: the weights move by only {gap:.2g}"


# ---- every script against the reference
def check_loss_and_gradients(adapter, weights, mb, args):
    expected_loss, expected_stats, expected_grads = ref.loss_and_grads(weights, mb, args)
    loss, stats, grads = adapter.loss_and_grads(mb)
    assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-6)
    for name in ref.LOSS_STATS:
        assert stats[name] == pytest.approx(expected_stats[name], rel=1e-4, abs=1e-6), name
    assert 0 < expected_stats["clipfrac"] < 1  # the clipped branch is exercised
    scale = np.abs(ref.flat(expected_grads)).max()
    assert [net for net in ref.ORDER if net in grads] == [net for net in ref.ORDER if net in expected_grads]
    for net in (net for net in ref.ORDER if net in expected_grads):
        for i, ((g, gb), (e, eb)) in enumerate(zip(grads[net], expected_grads[net])):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6 * scale, err_msg=f"{net} layer {i} kernel")
            np.testing.assert_allclose(gb, eb, rtol=1e-4, atol=1e-6 * scale, err_msg=f"{net} layer {i} bias")
    assert ("actor_logstd" in grads) == ("actor_logstd" in expected_grads)
    if "actor_logstd" in expected_grads:
        np.testing.assert_allclose(grads["actor_logstd"], expected_grads["actor_logstd"], rtol=1e-4,
                                   atol=1e-6 * scale, err_msg="the log-std")


@pytest.mark.parametrize("script", SCRIPTS)
def test_loss_and_gradients_match_reference(script, problem):
    weights, (batch, *_) = problem
    args = shared_args(script)
    check_loss_and_gradients(adapter_for(script)(script, weights, args), weights, rows(batch, slice(0, MINIBATCH)), args)


COMPILED_ALL = ["ppo_torch_compile.py", "ppo_torch_compile_gymnasium.py"]  # their default scope: the whole step


@pytest.mark.parametrize("script,compiled", [(s, False) for s in SCRIPTS] + [(s, True) for s in COMPILED_ALL],
                         ids=SCRIPTS + [f"{s}-update-compiled" for s in COMPILED_ALL])
def test_updates_match_reference(script, compiled, problem):
    """UPDATES consecutive update() calls, on different batches, each of EPOCHS epochs of
    MINIBATCHES minibatches: the script draws a new permutation for every epoch of every call,
    and after each call the weights equal what the reference leaves after stepping through the
    minibatches those permutations make, in order; the optimizer's state holds the schedule's
    learning rate. So which rows form each minibatch, and how the shuffle advances between
    epochs and calls, are proven with the rest."""
    weights, batches = problem
    args = update_args(script)
    adapter = adapter_for(script, compiled)(script, weights, args)  # compiled: Adam too, multi-tensor
    with adapter.drawn_permutations() as perms:
        results = [adapter.update(batch, iteration=u) for u, batch in enumerate(batches)]
    check_updates(script, results, perms, weights, batches, args)


def check_updates(script, results, perms, weights, batches, args):
    assert len(perms) == UPDATES * EPOCHS, f"{script} drew {len(perms)} permutations, not one per epoch"
    for perm in perms:
        assert sorted(perm) == list(range(BATCH)), "not a permutation of the batch"
    assert len({perm.tobytes() for perm in perms}) == len(perms), "the shuffle repeats across epochs or calls"
    expected = ref.optimizer_steps(weights, minibatches_of(batches, perms), args, STEPS)
    for u, (got, lr_used, lr_logged) in enumerate(results):
        want, want_lr, *_ = expected[(u + 1) * EPOCHS * MINIBATCHES - 1]
        assert lr_used == pytest.approx(want_lr, rel=1e-6), f"call {u}: the optimizer used {lr_used}"
        assert lr_logged == lr_used, f"call {u}: logged {lr_logged}, used {lr_used}"
        np.testing.assert_allclose(ref.flat(got), ref.flat(want), rtol=0, atol=ATOL_WEIGHTS,
                                   err_msg=f"{script}: weights after update() call {u}")


GAUSSIAN_CASES = [(s, False) for s in CONTINUOUS_SCRIPTS] + [("ppo_torch_compile.py", True)]


@pytest.mark.parametrize("script,compiled", GAUSSIAN_CASES, ids=[s + "-compiled" * c for s, c in GAUSSIAN_CASES])
def test_gaussian_head_matches_reference(script, compiled, continuous_problem):
    """The continuous head, as both tests above prove the categorical one: from identical weights (a
    log-std among them), one minibatch's loss, statistics and gradients, then consecutive update()
    calls, the log-std's Adam steps included."""
    weights, batches = continuous_problem
    args = update_args(script)
    adapter = adapter_for(script, compiled)(script, weights, args)  # compiled: the whole step, Adam too
    check_loss_and_gradients(adapter, weights, rows(batches[0], slice(0, MINIBATCH)), args)
    with adapter.drawn_permutations() as perms:
        results = [adapter.update(batch, iteration=u) for u, batch in enumerate(batches)]
    check_updates(script, results, perms, weights, batches, args)


@pytest.mark.parametrize("script,cnn", CNN_CASES)
def test_cnn_matches_reference(script, cnn):
    """--model cnn, as the tests above prove the MLPs: from identical weights, the actor's output on
    images, one minibatch's loss, statistics and gradients (the convolutions' and the shared torso's
    too), then consecutive update() calls. On MinAtar's 10x10 grids (MinAtar's network) and on byte
    frames (the Nature CNN, its input scaled by 1/255)."""
    weights, batches = cnn_problem(cnn)
    args = dataclasses.replace(update_args(script), model="cnn")
    adapter = adapter_for(script)(script, weights, args)
    obs = batches[0]["obs"][:16]
    np.testing.assert_allclose(adapter.logits(obs), ref.network(ref.as64(weights), obs.astype(np.float64))[0],
                               rtol=1e-4, atol=1e-5, err_msg="the actor's output")
    check_loss_and_gradients(adapter, weights, rows(batches[0], slice(0, MINIBATCH)), args)
    with adapter.drawn_permutations() as perms:
        results = [adapter.update(batch, iteration=u) for u, batch in enumerate(batches)]
    check_updates(script, results, perms, weights, batches, args)



@pytest.mark.parametrize("script", [s for s in SCRIPTS if "torch" not in s])
def test_cnn_off_the_cpu_matches_reference(script, monkeypatch):
    """The JAX scripts convolve as patches times the kernel on a CPU (XLA's kernel gradient inside a
    scan is slow there) and with XLA's own convolution elsewhere: that path, forced here on the CPU,
    computes the same loss and gradients (the Nature CNN: strides and three layers)."""
    import jax

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    weights, batches = cnn_problem("nature")
    adapter = adapter_for(script)(script, weights, dataclasses.replace(update_args(script), model="cnn"))
    check_loss_and_gradients(adapter, weights, rows(batches[0], slice(0, MINIBATCH)), adapter.args)

@pytest.mark.parametrize("script", [s for s in SCRIPTS if "torch" not in s and "agents" not in s])
def test_cnn_patches_refuse_what_they_do_not_compute(script):
    """The CPU's patches compute a VALID convolution without dilation or groups, what the scripts' CNNs
    ask for; asked for padding, a dilation or groups, they say so instead of convolving otherwise."""
    import jax
    import jax.numpy as jnp

    m = adapter_for(script).module(script)
    if script == "ppo_equinox.py":
        import equinox as eqx

        layers = [eqx.nn.Conv2d(4, 8, 3, 1, key=jax.random.key(0), **change)
                  for change in ({"padding": 1}, {"dilation": 2}, {"groups": 2})]
        calls = [lambda layer=layer: m.convolve(layer, jnp.ones((4, 10, 10))) for layer in layers]
        assert m.convolve(m.conv(4, 8, 3, 1, jax.random.key(0)), jnp.ones((4, 10, 10))).shape == (8, 8, 8)
    else:
        x, kernel, numbers = jnp.ones((2, 10, 10, 4)), jnp.ones((3, 3, 4, 8)), ("NHWC", "HWIO", "NHWC")
        conv = lambda padding="VALID", **kw: m.conv_general_dilated(x, kernel, (1, 1), padding, dimension_numbers=numbers,
                                                                     **kw)
        calls = [lambda: conv("SAME"), lambda: conv(rhs_dilation=(2, 2)), lambda: conv(lhs_dilation=(2, 1)),
                 lambda: conv(feature_group_count=2)]
        np.testing.assert_allclose(conv(lhs_dilation=(1, 1), rhs_dilation=None, feature_group_count=1),
                                   jax.lax.conv_general_dilated(x, kernel, (1, 1), "VALID", dimension_numbers=numbers))
    for call in calls:
        with pytest.raises(NotImplementedError, match="VALID convolution, undilated and ungrouped"):
            call()


# ---- GAE
def trajectory():
    """5 steps of 4 envs: a termination, a truncation, both at once, a truncation on the last step."""
    rng = np.random.default_rng(1)
    terminated = np.zeros((5, 4), bool)
    truncated = np.zeros((5, 4), bool)
    terminated[1, 0] = True
    truncated[2, 1] = True
    terminated[3, 2] = truncated[3, 2] = True
    truncated[4, 3] = True
    f32 = lambda *shape: rng.normal(0, 1, shape).astype(np.float32)
    return f32(5, 4), f32(5, 4), terminated, truncated, f32(4), f32(5, 4)


def test_reference_gae_by_hand():
    """The reference itself, on one step: a truncated step's advantage is r + gamma*V(final) - V."""
    adv, _ = ref.gae(np.array([[0.5]]), np.array([[1.0]]), np.array([[False]]), np.array([[True]]),
                     np.array([9.0]), np.array([[2.0]]), 0.9, 0.95)
    assert adv[0, 0] == pytest.approx(1.0 + 0.9 * 2.0 - 0.5)


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("bootstrap", [True, False])
def test_gae_matches_reference(script, bootstrap):
    values, rewards, terminated, truncated, last_value, final_values = trajectory()
    final_values = final_values if bootstrap else None
    args = shared_args(script)
    expected = ref.gae(values, rewards, terminated, truncated, last_value, final_values, args.gamma, args.gae_lambda)
    m = adapter_for(script).module(script)
    if "torch" in script:
        import torch as convert_module
        to = convert_module.tensor
    else:
        import jax.numpy as convert_module
        to = convert_module.asarray
    got = m.compute_gae(to(values), to(rewards), to(terminated), to(truncated), to(last_value),
                        None if final_values is None else to(final_values), args.gamma, args.gae_lambda)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5)
    if bootstrap:  # the bootstrap changed something, so this test can tell the two apart
        plain = ref.gae(values, rewards, terminated, truncated, last_value, None, args.gamma, args.gae_lambda)
        assert not np.allclose(plain[0], expected[0])
