"""Proof that every script computes one algorithm, checked against the independent float64
NumPy reference in reference.py, never against another framework:
- from identical weights and one minibatch, the same loss, statistics and gradients (the
  reference's gradients are written out by hand, and checked by finite differences);
- from identical weights, several consecutive calls of each script's own update() on
  different batches leave the weights the reference's global-norm clipping + Adam + linear
  schedule leaves, and the optimizer's state holds the learning rate of the schedule;
- GAE, truncation bootstrap included."""

import dataclasses

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import SCRIPTS, load

OBS_DIM, NUM_ACTIONS, HIDDEN, MINIBATCH = 6, 3, (64, 64), 256
UPDATE_STEPS = 4  # one optimizer step per update() call: the whole schedule, from lr down to lr/4
ATOL_WEIGHTS = 2e-6  # float32 against float64; an optimizer step moves a weight by up to lr = 2.5e-4


def shared_args(script, **changes):
    """The script's own Args (its defaults are the contract's), with the given changes."""
    return dataclasses.replace(load(script).Args(), **changes)


def update_args(script):
    """update() as one optimizer step on the whole batch (one epoch, one minibatch, so its
    shuffle cannot change the result), over a schedule of UPDATE_STEPS steps."""
    return shared_args(script, num_envs=4, num_steps=MINIBATCH // 4, num_minibatches=1, update_epochs=1,
                       num_iterations=UPDATE_STEPS)


def random_minibatch(rng, weights, return_error: float) -> dict:
    """Old log-probs and values near the current ones, so some ratios and values clip; the size
    of the return errors sets the gradient's norm (3+-4: above max_grad_norm, 0+-0.05: below)."""
    obs = rng.normal(0, 1, (MINIBATCH, OBS_DIM)).astype(np.float32)
    logp = ref.log_softmax(ref.forward(ref.as64(weights)["actor"], obs)[0])
    actions = rng.integers(0, NUM_ACTIONS, MINIBATCH).astype(np.int32)
    values = ref.forward(ref.as64(weights)["critic"], obs)[0][:, 0] + rng.normal(0, 0.3, MINIBATCH)
    return {
        "obs": obs, "actions": actions,
        "logprobs": logp[np.arange(MINIBATCH), actions] + rng.normal(0, 0.2, MINIBATCH),
        "values": values, "advantages": rng.normal(0.5, 2, MINIBATCH),
        "returns": values + rng.normal(3 if return_error > 1 else 0, return_error, MINIBATCH),
    }


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    weights = ref.random_weights(rng, OBS_DIM, HIDDEN, NUM_ACTIONS)
    # the steps alternate between a gradient norm above max_grad_norm (clipped) and one below
    batches = [random_minibatch(rng, weights, 4.0 if t % 2 == 0 else 0.05) for t in range(UPDATE_STEPS)]
    return weights, batches


@pytest.fixture(scope="module")
def expected_updates(problem):
    weights, batches = problem
    args = update_args(SCRIPTS[0])
    return ref.optimizer_steps(weights, batches, args, total_steps=UPDATE_STEPS)


# ---- the reference itself
def test_reference_gradients_match_finite_differences(problem):
    """The hand-written backward pass equals central differences of the float64 loss."""
    weights, (mb, *_) = problem
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


def test_the_steps_exercise_clipping_and_the_schedule(expected_updates):
    """Some steps are clipped and some are not, and the learning rate falls at each step."""
    norms = [norm for _, _, norm in expected_updates]
    args = update_args(SCRIPTS[0])
    assert max(norms) > 2 * args.max_grad_norm and min(norms) < args.max_grad_norm, norms
    assert [lr for _, lr, _ in expected_updates] == pytest.approx(
        [args.learning_rate * (1 - t / UPDATE_STEPS) for t in range(UPDATE_STEPS)])


@pytest.mark.parametrize("planted", ["learning rate decays at half the speed", "clip at 4x max_grad_norm",
                                     "no gradient clipping"])
def test_planted_errors_are_visible(planted, problem, expected_updates):
    """Each error that slipped past a one-step test moves the weights, within these steps, by
    far more than test_updates_match_reference tolerates: that test would fail."""
    weights, batches = problem
    args = update_args(SCRIPTS[0])
    wrong = {"learning rate decays at half the speed": dict(lr_decay_speed=0.5),
             "clip at 4x max_grad_norm": dict(max_grad_norm=4 * args.max_grad_norm),
             "no gradient clipping": dict(max_grad_norm=np.inf)}[planted]
    planted_updates = ref.optimizer_steps(weights, batches, args, total_steps=UPDATE_STEPS, **wrong)
    gap = max(np.abs(ref.flat(a) - ref.flat(b)).max() for (a, _, _), (b, _, _) in zip(expected_updates, planted_updates))
    assert gap > 10 * ATOL_WEIGHTS, f"{planted}: the weights move by only {gap:.2g}"


# ---- every script against the reference
@pytest.mark.parametrize("script", SCRIPTS)
def test_loss_and_gradients_match_reference(script, problem):
    weights, (mb, *_) = problem
    args = shared_args(script)
    expected_loss, expected_stats, expected_grads = ref.loss_and_grads(weights, mb, args)
    loss, stats, grads = adapter_for(script)(script, weights, args).loss_and_grads(mb)
    assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-6)
    for name in ref.LOSS_STATS:
        assert stats[name] == pytest.approx(expected_stats[name], rel=1e-4, abs=1e-6), name
    assert 0 < expected_stats["clipfrac"] < 1  # the clipped branch is exercised
    scale = np.abs(ref.flat(expected_grads)).max()
    for net in ref.NETS:
        for i, ((g, gb), (e, eb)) in enumerate(zip(grads[net], expected_grads[net])):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6 * scale, err_msg=f"{net} layer {i} kernel")
            np.testing.assert_allclose(gb, eb, rtol=1e-4, atol=1e-6 * scale, err_msg=f"{net} layer {i} bias")


@pytest.mark.parametrize("script", SCRIPTS)
def test_updates_match_reference(script, problem, expected_updates):
    """UPDATE_STEPS consecutive update() calls, on different batches: after each, the weights
    equal the reference's, and the optimizer's state holds the schedule's learning rate."""
    weights, batches = problem
    adapter = adapter_for(script)(script, weights, update_args(script))
    for t, (mb, (expected, expected_lr, _)) in enumerate(zip(batches, expected_updates)):
        got, lr_used, lr_logged = adapter.update(mb, iteration=t)
        assert lr_used == pytest.approx(expected_lr, rel=1e-6), f"step {t}: the optimizer used {lr_used}"
        assert lr_logged == lr_used, f"step {t}: logged {lr_logged}, used {lr_used}"
        np.testing.assert_allclose(ref.flat(got), ref.flat(expected), rtol=0, atol=ATOL_WEIGHTS,
                                   err_msg=f"{script}: weights after step {t}")


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
