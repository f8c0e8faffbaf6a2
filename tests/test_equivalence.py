"""Proof that the frameworks run one algorithm: from identical weights and one identical
minibatch, every script computes the same loss, gradients and updated weights, and the
same GAE (truncation bootstrap included) as a NumPy reference."""

import numpy as np
import pytest
from helpers import SCRIPTS, load

OBS_DIM, NUM_ACTIONS, HIDDEN, MINIBATCH = 6, 3, (64, 64), 256
NETS = ("actor", "critic")
LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


# ---- the reference: weights as [(kernel (in, out), bias)] per net, the loss in NumPy
def random_weights(rng) -> dict:
    weights = {}
    for net, out in (("actor", NUM_ACTIONS), ("critic", 1)):
        sizes = (OBS_DIM, *HIDDEN, out)
        weights[net] = [(rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32),
                         rng.normal(0, 0.1, o).astype(np.float32)) for i, o in zip(sizes, sizes[1:])]
    return weights


def forward(layers, x):
    for kernel, bias in layers[:-1]:
        x = np.tanh(x @ kernel + bias)
    return x @ layers[-1][0] + layers[-1][1]


def log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def reference_loss(weights, mb, args):
    w = {k: [(a.astype(np.float64), b.astype(np.float64)) for a, b in v] for k, v in weights.items()}
    logp = log_softmax(forward(w["actor"], mb["obs"]))
    value = forward(w["critic"], mb["obs"])[:, 0]
    logratio = np.take_along_axis(logp, mb["actions"][:, None].astype(int), -1)[:, 0] - mb["logprobs"]
    ratio = np.exp(logratio)
    adv = (mb["advantages"] - mb["advantages"].mean()) / (mb["advantages"].std() + 1e-8)
    pg_loss = np.maximum(-adv * ratio, -adv * np.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
    v_clipped = mb["values"] + np.clip(value - mb["values"], -args.clip_coef, args.clip_coef)
    v_loss = 0.5 * np.maximum((value - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2).mean()
    entropy = -(np.exp(logp) * logp).sum(-1).mean()
    stats = {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy,
             "approx_kl": ((ratio - 1) - logratio).mean(), "clipfrac": (np.abs(ratio - 1) > args.clip_coef).mean()}
    return pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss, stats


def random_minibatch(rng, weights) -> dict:
    obs = rng.normal(0, 1, (MINIBATCH, OBS_DIM)).astype(np.float32)
    logp = log_softmax(forward(weights["actor"], obs))
    actions = rng.integers(0, NUM_ACTIONS, MINIBATCH).astype(np.int32)
    values = forward(weights["critic"], obs)[:, 0] + rng.normal(0, 0.3, MINIBATCH)
    return {  # old log-probs and values near the current ones, so some ratios and values clip
        "obs": obs, "actions": actions,
        "logprobs": (np.take_along_axis(logp, actions[:, None], -1)[:, 0] + rng.normal(0, 0.2, MINIBATCH)),
        "values": values, "advantages": rng.normal(0.5, 2, MINIBATCH),
        "returns": values + rng.normal(3, 4, MINIBATCH),  # large value errors: the gradient norm exceeds the clip
    }


# ---- one adapter per framework: load canonical weights, compute, hand back canonical arrays
class Linen:
    def __init__(self, script, weights, args):
        import jax
        import jax.numpy as jnp

        self.m, self.args, self.jnp, self.jax = load(script), args, jnp, jax
        params = {"params": {net: {f"Dense_{i}": {"kernel": jnp.asarray(k), "bias": jnp.asarray(b)}
                                   for i, (k, b) in enumerate(layers)} for net, layers in weights.items()}}
        state = self.m.make_train_state(jax.random.key(0), OBS_DIM, NUM_ACTIONS, args)
        self.state = state.replace(params=params)

    def batch(self, mb):
        return self.m.Batch(**{k: self.jnp.asarray(v, self.jnp.int32 if k == "actions" else self.jnp.float32)
                               for k, v in mb.items()})

    @staticmethod
    def canonical(params):
        return {net: [(np.asarray(params["params"][net][f"Dense_{i}"]["kernel"]),
                       np.asarray(params["params"][net][f"Dense_{i}"]["bias"])) for i in range(len(HIDDEN) + 1)]
                for net in NETS}

    def loss_and_grads(self, mb):
        grad_fn = self.jax.value_and_grad(self.m.ppo_loss, has_aux=True)
        (loss, stats), grads = grad_fn(self.state.params, self.state.apply_fn, self.batch(mb), self.args)
        return float(loss), {k: float(v) for k, v in stats.items()}, self.canonical(grads)

    def updated_weights(self, mb):
        state, _ = self.m.minibatch_step(self.state, self.batch(mb), self.args)
        return self.canonical(state.params)


class Torch:
    def __init__(self, script, weights, args):
        import torch

        self.m, self.args, self.torch = load(script), args, torch
        self.agent, self.optimizer = self.m.make_agent(OBS_DIM, NUM_ACTIONS, args, torch.device("cpu"))
        self.agent.load_state_dict({f"{net}.{2 * i}.{name}": torch.tensor(k.T.copy() if name == "weight" else b)
                                    for net, layers in weights.items() for i, (k, b) in enumerate(layers)
                                    for name in ("weight", "bias")})

    def batch(self, mb):
        dtype = lambda k: self.torch.int32 if k == "actions" else self.torch.float32
        return self.m.Batch(**{k: self.torch.tensor(v, dtype=dtype(k)) for k, v in mb.items()})

    def canonical(self, tensor_of):
        return {net: [(tensor_of(f"{net}.{2 * i}.weight").T.numpy(), tensor_of(f"{net}.{2 * i}.bias").numpy())
                      for i in range(len(HIDDEN) + 1)] for net in NETS}

    def loss_and_grads(self, mb):
        loss, stats = self.m.ppo_loss(self.agent, self.batch(mb), self.args)
        self.agent.zero_grad()
        loss.backward()
        params = dict(self.agent.named_parameters())
        grads = self.canonical(lambda name: params[name].grad.detach())
        self.agent.zero_grad()
        return float(loss.detach()), {k: float(v.detach()) for k, v in stats.items()}, grads

    def updated_weights(self, mb):
        self.m.minibatch_step(self.agent, self.optimizer, self.batch(mb), self.args)  # lr: the schedule's first
        params = dict(self.agent.named_parameters())
        return self.canonical(lambda name: params[name].detach().clone())


class NNX:
    """The model and optimizer are objects: weights go in and come out through their layers."""

    def __init__(self, script, weights, args):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        self.m, self.args, self.jnp, self.nnx = load(script), args, jnp, nnx
        self.model, self.optimizer = self.m.make_model(jax.random.key(0), OBS_DIM, NUM_ACTIONS, args)
        for net, layers in weights.items():
            for i, (kernel, bias) in enumerate(layers):
                layer = getattr(self.model, net).layers[i]
                layer.kernel[...], layer.bias[...] = jnp.asarray(kernel), jnp.asarray(bias)

    batch = Linen.batch

    @staticmethod
    def canonical(tree):
        return {net: [(np.asarray(tree[net]["layers"][i]["kernel"][...]), np.asarray(tree[net]["layers"][i]["bias"][...]))
                      for i in range(len(HIDDEN) + 1)] for net in NETS}

    def loss_and_grads(self, mb):
        (loss, stats), grads = self.nnx.value_and_grad(self.m.ppo_loss, has_aux=True)(self.model, self.batch(mb), self.args)
        return float(loss), {k: float(v) for k, v in stats.items()}, self.canonical(grads)

    def updated_weights(self, mb):
        self.m.minibatch_step(self.model, self.optimizer, self.batch(mb), self.args)
        return self.canonical(self.nnx.state(self.model))


class Equinox:
    """The model is a pytree; eqx.nn.Linear keeps its weight as (out, in), like torch."""

    def __init__(self, script, weights, args):
        import equinox as eqx
        import jax
        import jax.numpy as jnp

        self.m, self.args, self.jnp, self.eqx = load(script), args, jnp, eqx
        model, self.tx, self.opt_state = self.m.make_model(jax.random.key(0), OBS_DIM, NUM_ACTIONS, args)
        for net, layers in weights.items():
            for i, (kernel, bias) in enumerate(layers):
                model = eqx.tree_at(lambda m: (getattr(m, net).layers[i].weight, getattr(m, net).layers[i].bias),
                                    model, (jnp.asarray(kernel.T), jnp.asarray(bias)))
        self.model = model

    batch = Linen.batch

    @staticmethod
    def canonical(tree):
        return {net: [(np.asarray(getattr(tree, net).layers[i].weight).T, np.asarray(getattr(tree, net).layers[i].bias))
                      for i in range(len(HIDDEN) + 1)] for net in NETS}

    def loss_and_grads(self, mb):
        grad_fn = self.eqx.filter_value_and_grad(self.m.ppo_loss, has_aux=True)
        (loss, stats), grads = grad_fn(self.model, self.batch(mb), self.args)
        return float(loss), {k: float(v) for k, v in stats.items()}, self.canonical(grads)

    def updated_weights(self, mb):
        (model, _), _ = self.m.minibatch_step((self.model, self.opt_state), self.batch(mb), self.tx, self.args)
        return self.canonical(model)


class TorchCompile(Torch):
    """The updated weights come from the compiled update: compilation must not change the numbers."""

    def __init__(self, script, weights, args):
        super().__init__(script, weights, args)
        self.m.compile_hot_paths("default")  # the mode torch_compile uses on CPU


def adapter_for(script):
    if script == "ppo_torch_compile.py":
        return TorchCompile
    if "torch" in script:
        return Torch
    return {"linen": Linen, "nnx": NNX, "nnx_cached": NNX, "equinox": Equinox}[script[4:-3]]


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    weights = random_weights(rng)
    return weights, random_minibatch(rng, weights)


@pytest.fixture(scope="module")
def results(problem):
    weights, mb = problem
    out = {}
    for script in SCRIPTS:
        args = load(script).Args()
        loss, stats, grads = adapter_for(script)(script, weights, args).loss_and_grads(mb)
        out[script] = loss, stats, grads, adapter_for(script)(script, weights, args).updated_weights(mb)
    return out


def flat(tree):
    return np.concatenate([a.ravel() for net in NETS for layer in tree[net] for a in layer])


@pytest.mark.parametrize("script", SCRIPTS)
def test_loss_matches_numpy(script, problem, results):
    weights, mb = problem
    expected_loss, expected_stats = reference_loss(weights, mb, load(script).Args())
    loss, stats, _, _ = results[script]
    assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-6)
    for name in LOSS_STATS:
        assert stats[name] == pytest.approx(expected_stats[name], rel=1e-4, abs=1e-6), name
    assert 0 < expected_stats["clipfrac"] < 1  # the clipped branch is exercised


@pytest.mark.parametrize("script", SCRIPTS)
def test_gradients_and_update_match(script, problem, results):
    weights, _ = problem
    reference = SCRIPTS[0]
    _, _, ref_grads, ref_weights = results[reference]
    _, _, grads, new_weights = results[script]
    assert np.linalg.norm(flat(ref_grads)) > 0.5  # so the global-norm clip acts
    for net in NETS:
        for i, ((g, gb), (rg, rgb)) in enumerate(zip(grads[net], ref_grads[net])):
            np.testing.assert_allclose(g, rg, rtol=1e-4, atol=1e-6, err_msg=f"{script} {net} layer {i} kernel grad")
            np.testing.assert_allclose(gb, rgb, rtol=1e-4, atol=1e-6, err_msg=f"{script} {net} layer {i} bias grad")
    np.testing.assert_allclose(flat(new_weights), flat(ref_weights), rtol=0, atol=2e-6)
    moved = np.abs(flat(new_weights) - flat(weights))
    assert moved.max() == pytest.approx(2.5e-4, rel=0.05)  # Adam's first step moves by ~lr


# ---- GAE
def reference_gae(values, rewards, terminated, truncated, last_value, final_values, gamma, lam):
    advantages, advantage = np.zeros_like(values), np.zeros_like(last_value)
    for t in reversed(range(len(values))):
        next_value = last_value if t == len(values) - 1 else values[t + 1]
        reward = rewards[t].copy()
        if final_values is not None:  # bootstrap through a time limit, never through a termination
            reward += np.where(truncated[t] & ~terminated[t], gamma * final_values[t], 0.0)
        nonterminal = 1.0 - (terminated[t] | truncated[t])
        delta = reward + gamma * next_value * nonterminal - values[t]
        advantage = delta + gamma * lam * nonterminal * advantage
        advantages[t] = advantage
    return advantages, advantages + values


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
    adv, _ = reference_gae(np.array([[0.5]]), np.array([[1.0]]), np.array([[False]]), np.array([[True]]),
                           np.array([9.0]), np.array([[2.0]]), 0.9, 0.95)
    assert adv[0, 0] == pytest.approx(1.0 + 0.9 * 2.0 - 0.5)


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("bootstrap", [True, False])
def test_gae_matches_numpy(script, bootstrap):
    values, rewards, terminated, truncated, last_value, final_values = trajectory()
    final_values = final_values if bootstrap else None
    expected = reference_gae(values, rewards, terminated, truncated, last_value, final_values, 0.99, 0.95)
    m = load(script)
    if "torch" in script:
        import torch as convert_module
        to = convert_module.tensor
    else:
        import jax.numpy as convert_module
        to = convert_module.asarray
    got = m.compute_gae(to(values), to(rewards), to(terminated), to(truncated), to(last_value),
                        None if final_values is None else to(final_values), 0.99, 0.95)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-5, atol=1e-5)
    if bootstrap:  # the bootstrap changed something, so this test can tell the two apart
        plain = reference_gae(values, rewards, terminated, truncated, last_value, None, 0.99, 0.95)
        assert not np.allclose(plain[0], expected[0])
