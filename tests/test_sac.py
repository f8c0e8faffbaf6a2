"""SAC (sac_*.py, docs/offpolicy.md) against the NumPy reference (tests/reference.py): the critics' soft target
(the smaller target critic at the actor's sampled next action, less alpha times its log-probability), the
actor's step through the tanh-squashed sample and its log-probability, alpha's step; the actor and alpha
policy-frequency times at CleanRL's steps and the targets at theirs; the action evaluation takes; and the
contract a run keeps."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
from adapters import recorded_evaluation
from helpers import (OFFPOLICY_REGIONS, SAC_SCRIPTS, check_profiled, load, offpolicy_tiny, originals, read_json,
                     ran_in_process, refused_in_a_fresh_process, refused_in_process, run_ok, scalars)

TINY, PROFILED = offpolicy_tiny(600, 200, 50, 10)
BOUNDS = ((-2.0,), (2.0,))  # Pendulum-v1's torque
OBS_DIM, ACTION_DIM = 3, 1
CRITICS = ("qf1", "qf2", "qf1_target", "qf2_target")


class Linen:
    """What the tests need of sac_linen.py: its three functional train states (actor, critics, log alpha)."""

    @staticmethod
    def make(sac, args, w, log_alpha):
        actor, critic, alpha = sac.make_train_states(jax.random.key(0), OBS_DIM, ACTION_DIM, args)
        p = lambda layers: {"params": {f"Dense_{i}": {"kernel": jnp.asarray(k), "bias": jnp.asarray(b)}
                                       for i, (k, b) in enumerate(layers)}}
        critics, log_alpha = (p(w["qf1"]), p(w["qf2"])), {"log_alpha": jnp.float32(log_alpha)}
        return (actor.replace(params=p(w["actor"]), opt_state=actor.tx.init(p(w["actor"]))),
                critic.replace(params=critics, target_params=(p(w["qf1_target"]), p(w["qf2_target"])),
                               opt_state=critic.tx.init(critics)),
                alpha.replace(params=log_alpha, opt_state=alpha.tx.init(log_alpha)))

    @staticmethod
    def critic_update(sac, states, batch, noise, args):
        actor, critic, alpha = states
        critic, loss, q1 = sac.critic_update(actor, critic, jnp.exp(alpha.params["log_alpha"]),
                                             tuple(map(jnp.asarray, batch)), jnp.asarray(noise), BOUNDS, args)
        return (actor, critic, alpha), loss, q1

    @staticmethod
    def actor_update(sac, states, obs, noise, args):
        actor, critic, alpha = states
        actor, alpha, loss, alpha_loss = sac.actor_update(actor, critic, alpha, jnp.asarray(obs), jnp.asarray(noise),
                                                          BOUNDS, args)
        return (actor, critic, alpha), loss, alpha_loss

    @staticmethod
    def weights(states):
        layers = lambda p: [(np.asarray(p["params"][f"Dense_{i}"]["kernel"]), np.asarray(p["params"][f"Dense_{i}"]["bias"]))
                            for i in range(len(p["params"]))]
        actor, critic, alpha = states
        return {"actor": layers(actor.params), "qf1": layers(critic.params[0]), "qf2": layers(critic.params[1]),
                "qf1_target": layers(critic.target_params[0]), "qf2_target": layers(critic.target_params[1]),
                "log_alpha": float(alpha.params["log_alpha"])}

    @staticmethod
    def stepper(sac, args, seed):
        """One iteration at a time: the states after it, its stats, and the optimizers' step counts."""
        env, env_params = sac.make_env("Pendulum-v1")
        obs, env_state = sac.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        states = sac.make_train_states(jax.random.key(0), OBS_DIM, ACTION_DIM, args)
        runner = sac.Runner(jax.random.key(seed + 1), env_state, obs,
                            sac.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM), jnp.int32(0))
        step = jax.jit(lambda a, c, al, r: sac.iteration(a, c, al, r, env, env_params, args))
        while True:
            *states, runner, stats = step(*states, runner)
            yield states, stats, tuple(int(s.opt_state[0].count) for s in (states[1], states[0], states[2]))

    @staticmethod
    def evaluate(sac, states, args, num_episodes):
        """The script's evaluate() as its main() calls it (jitted), on fresh envs."""
        env, env_params = sac.make_env(args.env_id)
        evaluate = partial(sac.evaluate, env=env, env_params=env_params, num_episodes=num_episodes)
        return jax.jit(evaluate)(states[0], jax.random.key(4))


class Nnx:
    """What the tests need of sac_nnx.py: its Model, the networks, log alpha and optimizers changed in place."""

    @staticmethod
    def linears(model):
        actor, critics, targets = model.actor, model.critics, model.critics_target
        return {"actor": [*actor.layers, actor.fc_logstd], "qf1": critics.qf1.layers,
                "qf2": critics.qf2.layers, "qf1_target": targets.qf1.layers, "qf2_target": targets.qf2.layers}

    @staticmethod
    def make(sac, args, w, log_alpha):
        model = sac.Model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        for name, linears in Nnx.linears(model).items():
            for linear, (k, b) in zip(linears, w[name]):
                linear.kernel[...], linear.bias[...] = jnp.asarray(k), jnp.asarray(b)
        model.alpha.log_alpha[...] = jnp.float32(log_alpha)
        return model

    @staticmethod
    def critic_update(sac, model, batch, noise, args):
        return model, *sac.critic_update(model, tuple(map(jnp.asarray, batch)), jnp.asarray(noise), args)

    @staticmethod
    def actor_update(sac, model, obs, noise, args):
        return model, *sac.actor_update(model, jnp.asarray(obs), jnp.asarray(noise), args)

    @staticmethod
    def weights(model):
        return {**{name: [(np.asarray(l.kernel[...]), np.asarray(l.bias[...])) for l in linears]
                   for name, linears in Nnx.linears(model).items()}, "log_alpha": float(model.alpha.log_alpha[...])}

    @staticmethod
    def stepper(sac, args, seed):
        env, env_params = sac.make_env("Pendulum-v1")
        obs, env_state = sac.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        model = sac.Model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        runner = sac.Runner(jax.random.key(seed + 1), env_state, obs,
                            sac.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM), jnp.int32(0))
        step = sac.nnx.jit(lambda m, r: sac.iteration(m, r, env, env_params, args))
        while True:
            runner, stats = step(model, runner)
            yield model, stats, tuple(int(o.opt_state[0].count[...]) for o in (
                model.q_optimizer, model.actor_optimizer, model.alpha_optimizer))

    @staticmethod
    def evaluate(sac, model, args, num_episodes):
        env, env_params = sac.make_env(args.env_id)
        evaluate = partial(sac.evaluate, env=env, env_params=env_params, num_episodes=num_episodes)
        return sac.nnx.jit(evaluate)(model.actor, jax.random.key(4))


class Equinox:
    """What the tests need of sac_equinox.py: its networks and log alpha (pytrees), the two Adams and three states."""

    @staticmethod
    def linears(nets):
        actor, (qf1, qf2), (qf1_target, qf2_target) = nets.actor, nets.critics, nets.critics_target
        return {"actor": [*actor.layers, actor.fc_logstd], "qf1": qf1.layers, "qf2": qf2.layers,
                "qf1_target": qf1_target.layers, "qf2_target": qf2_target.layers}

    @staticmethod
    def make(sac, args, w, log_alpha):
        nets, txs, _ = sac.make_model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        eqx = sac.eqx
        linears = Equinox.linears(nets)
        nets = eqx.tree_at(lambda n: [l for name in linears for l in Equinox.linears(n)[name]], nets,
                           [eqx.tree_at(lambda l: (l.weight, l.bias), l, (jnp.asarray(k.T), jnp.asarray(b)))
                            for name in linears for l, (k, b) in zip(linears[name], w[name])])
        nets = nets._replace(log_alpha=jnp.float32(log_alpha))
        return nets, txs, (txs[0].init(eqx.filter(nets.actor, eqx.is_array)),
                           txs[1].init(eqx.filter(nets.critics, eqx.is_array)), txs[1].init(nets.log_alpha))

    @staticmethod
    def critic_update(sac, state, batch, noise, args):
        nets, txs, (actor_opt, q_opt, alpha_opt) = state
        nets, q_opt, loss, q1 = sac.critic_update(nets, q_opt, tuple(map(jnp.asarray, batch)), jnp.asarray(noise),
                                                  txs[1], args)
        return (nets, txs, (actor_opt, q_opt, alpha_opt)), loss, q1

    @staticmethod
    def actor_update(sac, state, obs, noise, args):
        nets, txs, (actor_opt, q_opt, alpha_opt) = state
        nets, (actor_opt, alpha_opt), loss, alpha_loss = sac.actor_update(
            nets, (actor_opt, alpha_opt), jnp.asarray(obs), jnp.asarray(noise), txs, args)
        return (nets, txs, (actor_opt, q_opt, alpha_opt)), loss, alpha_loss

    @staticmethod
    def weights(state):
        return {**{name: [(np.asarray(l.weight).T, np.asarray(l.bias)) for l in linears]
                   for name, linears in Equinox.linears(state[0]).items()}, "log_alpha": float(state[0].log_alpha)}

    @staticmethod
    def stepper(sac, args, seed):
        env, env_params = sac.make_env("Pendulum-v1")
        obs, env_state = sac.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        nets, txs, opt_states = sac.make_model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        runner = sac.Runner(jax.random.key(seed + 1), env_state, obs,
                            sac.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM), jnp.int32(0))
        step = sac.eqx.filter_jit(lambda n, o, r: sac.iteration(n, o, r, txs, env, env_params, args))
        while True:
            nets, opt_states, runner, stats = step(nets, opt_states, runner)
            actor_opt, q_opt, alpha_opt = opt_states
            yield (nets, txs, opt_states), stats, (int(q_opt[0].count), int(actor_opt[0].count), int(alpha_opt[0].count))

    @staticmethod
    def evaluate(sac, state, args, num_episodes):
        env, env_params = sac.make_env(args.env_id)
        evaluate = partial(sac.evaluate, env=env, env_params=env_params, num_episodes=num_episodes)
        return sac.eqx.filter_jit(evaluate)(state[0].actor, jax.random.key(4))


class Torch:
    """What the tests need of sac_torch.py: its modules, log alpha and optimizers, changed in place."""

    @staticmethod
    def linears(nets, name):
        """The named network's (weight, bias) per layer, the tensors the script updates."""
        import torch

        if name == "actor":
            return [(m.weight, m.bias) for m in (*(m for m in nets.actor.trunk if isinstance(m, torch.nn.Linear)),
                                                  nets.actor.fc_mean, nets.actor.fc_logstd)]
        return [(m.weight, m.bias) for m in getattr(nets, name).net if isinstance(m, torch.nn.Linear)]

    @classmethod
    def make(cls, sac, args, w, log_alpha):
        import torch

        nets = sac.make_networks(OBS_DIM, BOUNDS, args, torch.device("cpu"))
        with torch.no_grad():
            for name in ("actor", *CRITICS):
                for (weight, bias), (k, b) in zip(cls.linears(nets, name), w[name]):
                    weight.copy_(torch.from_numpy(k.T)), bias.copy_(torch.from_numpy(b))
            nets.log_alpha.fill_(log_alpha)
        return nets

    @staticmethod
    def critic_update(sac, nets, batch, noise, args):
        import torch

        loss, q1 = sac.critic_update(nets, tuple(map(torch.as_tensor, batch)), torch.as_tensor(noise), args)
        return nets, loss, q1

    @staticmethod
    def actor_update(sac, nets, obs, noise, args):
        import torch

        return nets, *sac.actor_update(nets, torch.as_tensor(obs), torch.as_tensor(noise), args)

    @classmethod
    def weights(cls, nets):
        return {**{name: [(weight.detach().numpy().T.copy(), bias.detach().numpy().copy())
                          for weight, bias in cls.linears(nets, name)] for name in ("actor", *CRITICS)},
                "log_alpha": float(nets.log_alpha.detach())}

    @staticmethod
    def stepper(sac, args, seed):
        import torch

        torch.manual_seed(seed)
        env, env_params = sac.make_env("Pendulum-v1")
        obs, env_state = sac.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        nets = sac.make_networks(OBS_DIM, BOUNDS, args, torch.device("cpu"))
        buffer = sac.Buffer(args.buffer_size, OBS_DIM, ACTION_DIM, torch.device("cpu"), args.buffer == "host", seed)
        jax_step = jax.jit(partial(sac.env_step, env=env, env_params=env_params, num_envs=args.num_envs))
        runner = sac.Runner(env_state, torch.from_dlpack(obs), 0)
        count = lambda optimizer: int(next(iter(optimizer.state.values()))["step"]) if optimizer.state else 0
        while True:
            runner, stats = sac.iteration(nets, buffer, runner, lambda s, a: jax_step(s, sac.to_jax(a)), args)
            yield nets, stats, (count(nets.q_optimizer), count(nets.actor_optimizer), count(nets.a_optimizer))

    @staticmethod
    def evaluate(sac, nets, args, num_episodes):
        env, env_params = sac.make_env(args.env_id)
        return sac.evaluate(nets.actor, jax.random.key(4), env, env_params, num_episodes, 1)


class TorchCompiled(Torch):
    """sac_torch_compile.py: sac_torch.py's functions, compiled as a run compiles them (CPU's mode), the twin
    critics (and their targets) one module, each parameter the two critics' stacked."""

    @staticmethod
    def linears(nets, name):
        if name.startswith("qf"):
            twins, i = (nets.qf_target if name.endswith("_target") else nets.qf).stacked, int(name[2]) - 1
            return [(m.weight[i], m.bias[i]) for m in twins.net if isinstance(m, type(nets.actor.fc_mean))]
        return Torch.linears(nets, name)

    @classmethod
    def make(cls, sac, args, w, log_alpha):
        TorchCompiled.compile(sac)
        return super().make(sac, args, w, log_alpha)

    @staticmethod
    def stepper(sac, args, seed):
        TorchCompiled.compile(sac)
        return Torch.stepper(sac, args, seed)

    @staticmethod
    def compile(sac):
        if not hasattr(sac.critic_grads, "_torchdynamo_orig_callable"):  # once per process: it rebinds the functions
            sac.compile_hot_paths("default")


class LinenGymnasium(Linen):
    """sac_linen_gymnasium.py: sac_linen.py's train states and updates, Gymnasium's env, a Python loop."""

    @staticmethod
    def stepper(sac, args, seed, vectorization="sync", buffer=None):
        envs = sac.make_env("Pendulum-v1", args.num_envs, vectorization, seed)
        obs, env_state = sac.env_reset(envs, seed)
        actor, critic, alpha = sac.make_train_states(jax.random.key(0), OBS_DIM, ACTION_DIM, args)
        states = [actor, critic.replace(target_params=jax.tree.map(jnp.copy, critic.params)), alpha]  # as a run's setup
        buffer = buffer or LinenGymnasium.buffer(sac, args)
        fns = sac.compiled(BOUNDS, args)
        runner = sac.Runner(jax.random.key(seed + 1), env_state, obs, 0, np.random.default_rng(seed + 1))
        while True:
            *states, buffer, runner, stats = sac.iteration(*states, buffer, runner, envs, fns, args)
            yield states, stats, tuple(int(s.opt_state[0].count) for s in (states[1], states[0], states[2]))

    @staticmethod
    def buffer(sac, args):
        return (sac.HostBuffer(args.buffer_size, OBS_DIM, ACTION_DIM, 0) if args.buffer == "host" else
                sac.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM))

    @staticmethod
    def evaluate(sac, states, args, num_episodes):
        return sac.evaluate(states[0], args, num_episodes, 1)


class TorchGymnasium(Torch):
    """sac_torch_gymnasium.py: sac_torch.py's networks and updates, Gymnasium's env and NumPy transitions."""

    @staticmethod
    def stepper(sac, args, seed, vectorization="sync", buffer=None):
        import torch

        torch.manual_seed(seed)
        envs = sac.make_env("Pendulum-v1", args.num_envs, vectorization, seed)
        obs, env_state = sac.env_reset(envs, seed)
        nets = sac.make_networks(OBS_DIM, BOUNDS, args, torch.device("cpu"))
        buffer = buffer or TorchGymnasium.buffer(sac, args)
        runner = sac.Runner(env_state, obs, 0)
        count = lambda optimizer: int(next(iter(optimizer.state.values()))["step"]) if optimizer.state else 0
        while True:
            runner, stats = sac.iteration(nets, buffer, runner, envs, args)
            yield nets, stats, (count(nets.q_optimizer), count(nets.actor_optimizer), count(nets.a_optimizer))

    @staticmethod
    def buffer(sac, args):
        import torch

        return sac.Buffer(args.buffer_size, OBS_DIM, ACTION_DIM, torch.device("cpu"), args.buffer == "host", 0)

    @staticmethod
    def evaluate(sac, nets, args, num_episodes):
        return sac.evaluate(nets.actor, args, num_episodes, 1)


class TorchCompiledGymnasium(TorchGymnasium):
    """sac_torch_compile_gymnasium.py: sac_torch_gymnasium.py with sac_torch_compile.py's networks and compiled
    functions."""

    linears = TorchCompiled.linears

    @classmethod
    def make(cls, sac, args, w, log_alpha):
        TorchCompiled.compile(sac)
        return super().make(sac, args, w, log_alpha)

    @staticmethod
    def stepper(sac, args, seed, vectorization="sync", buffer=None):
        TorchCompiled.compile(sac)
        return TorchGymnasium.stepper(sac, args, seed, vectorization, buffer)


ADAPTERS = {"sac_equinox.py": Equinox, "sac_linen.py": Linen, "sac_nnx.py": Nnx, "sac_torch.py": Torch,
            "sac_torch_compile.py": TorchCompiled, "sac_linen_gymnasium.py": LinenGymnasium,
            "sac_torch_gymnasium.py": TorchGymnasium, "sac_torch_compile_gymnasium.py": TorchCompiledGymnasium}


def random_weights(rng):
    layers = lambda sizes: [(rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32),
                             rng.normal(0, 0.1, o).astype(np.float32)) for i, o in zip(sizes, sizes[1:])]
    actor = layers((OBS_DIM, 256, 256, ACTION_DIM)) + layers((256, ACTION_DIM))  # the trunk, the mean, the log-std
    # a log-std near -1.5 (std 0.22, the head's tanh near 0): samples seldom past where float32's tanh rounds to 1
    # and float64's does not, which would part tanh's correction, log(1 - tanh^2 + 1e-6), in the two
    actor[3] = (actor[3][0] * 0.1, np.zeros(ACTION_DIM, np.float32))
    return {"actor": actor, **{name: layers((OBS_DIM + ACTION_DIM, 256, 256, 1)) for name in CRITICS}}


def random_batch(rng, n):
    """Half the transitions terminated (their targets are the reward alone), actions across the bounds."""
    return (rng.normal(size=(n, OBS_DIM)).astype(np.float32), rng.normal(size=(n, OBS_DIM)).astype(np.float32),
            rng.uniform(-2, 2, (n, ACTION_DIM)).astype(np.float32), rng.normal(size=n).astype(np.float32),
            rng.random(n) < 0.5)


def flat_layers(layers):
    """A network's arrays in order: each layer's kernel, then its bias."""
    return [x for layer in layers for x in layer]


def assert_weights(got, expected, names):
    """All but one weight in 10,000 within a fifteenth of an Adam step (the critics' learning rate), and every one
    within one: float32 rounds a gradient near Adam's eps to a step of another size now and then (more often over
    the actor's sampled, squashed path); a wrong update moves most weights a whole step."""
    for name in names:
        for got_array, expected_array in ((a, b) for pairs in zip(got[name], expected[name]) for a, b in zip(*pairs)):
            off = np.abs(got_array - expected_array)
            far = off > 2e-5 + 1e-4 * np.abs(expected_array)
            assert far.mean() <= 1e-4 and off.max() < 3e-4, (name, int(far.sum()), float(off.max()))


@pytest.mark.parametrize("script", originals(SAC_SCRIPTS))
def test_critic_actor_and_alpha_updates_match_the_reference(script):
    """A critic step at alpha 0.3, then an actor step and a step of log alpha: the losses, the first critic's
    values, every weight and log alpha after each, the critic targets untouched."""
    sac, adapter = load(script), ADAPTERS[script]
    rng = np.random.default_rng(0)
    args, log_alpha = sac.RunArgs(), np.log(0.3)
    w = random_weights(rng)
    state = adapter.make(sac, args, w, log_alpha)
    expected = {k: list(v) for k, v in w.items()}
    batch, noise = random_batch(rng, 64), rng.normal(size=(64, ACTION_DIM)).astype(np.float32)
    loss, q1, grads = reference.sac_critic_loss_and_grads(expected, batch, noise, BOUNDS, args.gamma, 0.3)
    moments = {"qf1": [], "qf2": []}
    for name in ("qf1", "qf2"):
        expected[name] = reference.adam_layers(expected[name], grads[name], moments[name], 1, args.q_lr)
    state, got_loss, got_q1 = adapter.critic_update(sac, state, batch, noise, args)
    assert float(got_loss) == pytest.approx(loss, rel=1e-5, abs=1e-5) and float(got_q1) == pytest.approx(q1, rel=1e-5)
    assert_weights(adapter.weights(state), expected, ("actor", *CRITICS))
    actor_moments, alpha_moments = [], []
    for count in (1, 2):  # a burst of two, as policy-frequency 2 makes: Adam's second step weighs the two gradients
        noise = rng.normal(size=(2, 64, ACTION_DIM)).astype(np.float32)  # the actor's draw, then alpha's
        loss, grads = reference.sac_actor_loss_and_grads(expected, batch[0], noise[0], BOUNDS, np.exp(log_alpha))
        expected["actor"] = reference.adam_layers(expected["actor"], grads, actor_moments, count, args.policy_lr)
        alpha_loss = reference.sac_alpha_loss(log_alpha, expected, batch[0], noise[1], BOUNDS, -ACTION_DIM)
        log_alpha = reference.adam_layers([(np.array([log_alpha]), np.zeros(1))],
                                          [(np.array([alpha_loss]), np.zeros(1))], alpha_moments, count, args.q_lr)[0][0][0]
        state, got_loss, got_alpha_loss = adapter.actor_update(sac, state, batch[0], noise, args)
        assert float(got_loss) == pytest.approx(loss, rel=1e-5, abs=1e-5)
        assert float(got_alpha_loss) == pytest.approx(alpha_loss, rel=1e-5, abs=1e-5)
        got = adapter.weights(state)
        assert_weights(got, expected, ("actor", *CRITICS))
        assert got["log_alpha"] == pytest.approx(log_alpha, abs=1e-6)
    assert np.exp(log_alpha) != pytest.approx(0.3)


@pytest.mark.parametrize("script", SAC_SCRIPTS)
def test_critics_every_step_actor_and_alpha_in_bursts_targets_at_their_frequency(script):
    """One env step per call past learning-starts: a critic step at each; policy-frequency actor steps and as many
    of alpha where the step is a multiple of it; the critic targets moved exactly at multiples of
    target-network-frequency, each (tau 0.25) a quarter of the way to its critic as that critic is after this
    step's Adam step, within float32's rounding (1e-6 of a weight): a move toward the critic before the step
    would be off by a quarter of an Adam step, some 1e-4."""
    sac, adapter = load(script), ADAPTERS[script]
    args = sac.RunArgs(total_timesteps=40, learning_starts=10, buffer_size=64, batch_size=8, log_frequency=1,
                    policy_frequency=2, target_network_frequency=3, tau=0.25)
    stepper, before, targets, moves = adapter.stepper(sac, args, 1), (0, 0, 0), None, 0
    for t in range(args.total_timesteps):
        state, stats, counts = next(stepper)
        learning = t > args.learning_starts
        delayed, polyak = learning and t % 2 == 0, learning and t % 3 == 0
        assert tuple(a - b for a, b in zip(counts, before)) == (int(learning), 2 * delayed, 2 * delayed), t
        weights = adapter.weights(state)
        now = {k: [(np.copy(a), np.copy(b)) for a, b in v] for k, v in weights.items() if k.endswith("_target")}
        if targets is not None:
            moved = [not all(np.array_equal(a, b) for (a, _), (b, _) in zip(now[k], targets[k])) for k in now]
            assert moved == [polyak] * 2, (t, moved)
        if polyak:
            for name in now:
                expected = reference.polyak(weights[name.removesuffix("_target")], targets[name], args.tau)
                for got, want in zip(flat_layers(now[name]), flat_layers(expected)):
                    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"{name} at step {t}")
        before, targets, moves = counts, now, moves + polyak
    assert moves >= 5


@pytest.mark.parametrize("script", SAC_SCRIPTS)
def test_evaluation_acts_on_the_squashed_mean_in_the_bounds(script, monkeypatch):
    """Every action evaluate() takes over four whole episodes is the reference's deterministic action at the
    observation it was taken on: tanh of the actor's mean (no sample, no log-std), scaled into the bounds, from the
    weights set through the adapter. The mean head's outputs reach past +-1.5, where the mean scaled without tanh
    parts from the action by more than 1 (and tanh unscaled by half the action)."""
    sac, adapter = load(script), ADAPTERS[script]
    args = sac.RunArgs()
    w = random_weights(np.random.default_rng(0))
    state = adapter.make(sac, args, w, np.log(0.3))
    pairs = recorded_evaluation(sac, monkeypatch)
    adapter.evaluate(sac, state, args, 4)
    jax.effects_barrier()
    obs, actions = (np.concatenate(x) for x in zip(*pairs))
    assert len(obs) == len(actions) >= 4 * 200 and actions.shape[1:] == (ACTION_DIM,)  # Pendulum's 200 steps each
    expected = reference.sac_actor(w["actor"], obs, np.zeros((len(obs), ACTION_DIM)), BOUNDS)[0]
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)
    assert expected.std() > 0.3 and np.abs(expected).max() > 1  # actions across the bounds, not near one value


@pytest.mark.parametrize("script", originals(SAC_SCRIPTS))
def test_a_run_writes_the_contract_and_reloads(script, tmp_path, monkeypatch):
    """A tiny run (traced by --profile): run.json with what ran, the tags, summary.json, the trace; its saved
    model, loaded with no training,
    evaluates to the same returns."""
    trained = run_ok(script, *PROFILED, "--save-model", "--eval-episodes", "2", "--profile", log_dir=tmp_path / "train")
    info, summary, logged = read_json(trained / "run.json"), read_json(trained / "summary.json"), scalars(trained)
    check_profiled(trained, script, OFFPOLICY_REGIONS, once_per_iteration=("iteration",))  # the last two
    assert info["args"]["total_timesteps"] == 600 and info["variant"] == script.removesuffix(".py")
    assert [step for step, _ in logged["time/iteration"]] == list(range(10, 601, 10))
    assert {"charts/SPS", "charts/episodic_return", "losses/qf_loss", "losses/qf1_values", "losses/actor_loss",
            "losses/alpha", "losses/alpha_loss", "memory/peak_rss_mb"} <= set(logged)
    assert [step for step, _ in logged["losses/qf_loss"]] == list(range(210, 601, 10))  # none before learning starts
    assert logged["losses/alpha"][-1][1] < 1  # tuned down from 1 towards the target entropy
    loaded = ran_in_process(script, "--total-timesteps", "0", *TINY[2:], "--load-model", str(trained),
                            "--eval-episodes", "2", log_dir=tmp_path / "eval", monkeypatch=monkeypatch)
    assert read_json(loaded / "summary.json")["eval/episodic_returns"] == summary["eval/episodic_returns"]


@pytest.mark.parametrize("script", SAC_SCRIPTS)
@pytest.mark.parametrize("args, says", [
    (["--env-id", "CartPole-v1"], "Box actions"),
    (["--target-network-frequency", "0"], "target_network_frequency must be a positive integer, got 0"),
    (["--batch-size", "2000", "--buffer-size", "1000"], "batch_size=2000 is larger than buffer_size=1000"),
])
def test_bad_input_is_refused_in_one_line(script, args, says, tmp_path, monkeypatch, capsys):
    assert says in refused_in_process(script, args, tmp_path / "runs", monkeypatch, capsys)


def test_bad_input_is_refused_in_a_fresh_process(tmp_path):
    err = refused_in_a_fresh_process("sac_nnx.py", ["--target-network-frequency", "0"], tmp_path / "runs")
    assert "target_network_frequency must be a positive integer" in err
