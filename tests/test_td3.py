"""TD3 (td3_*.py, docs/offpolicy.md) against the NumPy reference (tests/reference.py): the critics' target
(clipped double Q, target policy smoothing with clipped noise), their loss, gradients and Adam steps; the
actor's step through the first critic and the Polyak steps of every target; the delayed actor at CleanRL's
steps; the exploration; the action evaluation takes; and the contract a run keeps."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
from adapters import recorded_evaluation
from helpers import (OFFPOLICY_REGIONS, SAC_SCRIPTS, TD3_SCRIPTS, check_profiled, load, offpolicy_tiny, originals,
                     read_json, ran_in_process, refused_in_a_fresh_process, refused_in_process, run_ok, scalars)
from test_sac import ADAPTERS as SAC_ADAPTERS
from test_sac import flat_layers

TINY, PROFILED = offpolicy_tiny(600, 200, 50, 10)
BOUNDS = ((-2.0,), (2.0,))  # Pendulum-v1's torque
OBS_DIM, ACTION_DIM = 3, 1


class Linen:
    """What the tests need of td3_linen.py: its two functional train states, each with its target."""

    @staticmethod
    def make(td3, args, w):
        actor_state, critic_state = td3.make_train_states(jax.random.key(0), OBS_DIM, BOUNDS, args)
        p = lambda layers: {"params": {f"Dense_{i}": {"kernel": jnp.asarray(k), "bias": jnp.asarray(b)}
                                       for i, (k, b) in enumerate(layers)}}
        critics = (p(w["qf1"]), p(w["qf2"]))
        return (actor_state.replace(params=p(w["actor"]), target_params=p(w["actor_target"]),
                                    opt_state=actor_state.tx.init(p(w["actor"]))),
                critic_state.replace(params=critics, target_params=(p(w["qf1_target"]), p(w["qf2_target"])),
                                     opt_state=critic_state.tx.init(critics)))

    @staticmethod
    def critic_update(td3, states, batch, noise, args):
        critic_state, loss, q1 = td3.critic_update(*states, tuple(map(jnp.asarray, batch)), jnp.asarray(noise),
                                                   BOUNDS, args)
        return (states[0], critic_state), loss, q1

    @staticmethod
    def actor_update(td3, states, obs, args):
        actor_state, critic_state, loss = td3.actor_update(*states, jnp.asarray(obs), args.tau)
        return (actor_state, critic_state), loss

    @staticmethod
    def weights(states):
        layers = lambda p: [(np.asarray(p["params"][f"Dense_{i}"]["kernel"]), np.asarray(p["params"][f"Dense_{i}"]["bias"]))
                            for i in range(len(p["params"]))]
        (actor, critic) = states
        return {"actor": layers(actor.params), "actor_target": layers(actor.target_params),
                "qf1": layers(critic.params[0]), "qf2": layers(critic.params[1]),
                "qf1_target": layers(critic.target_params[0]), "qf2_target": layers(critic.target_params[1])}

    @staticmethod
    def stepper(td3, args, seed):
        """One iteration at a time: the states after it, its stats, and the two optimizers' step counts."""
        env, env_params = td3.make_env("Pendulum-v1")
        obs, env_state = td3.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        actor_state, critic_state = td3.make_train_states(jax.random.key(0), OBS_DIM, BOUNDS, args)
        runner = td3.Runner(jax.random.key(seed + 1), env_state, obs,
                            td3.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM), jnp.int32(0))
        step = jax.jit(lambda a, c, r: td3.iteration(a, c, r, env, env_params, args))
        while True:
            actor_state, critic_state, runner, stats = step(actor_state, critic_state, runner)
            yield (actor_state, critic_state), stats, (int(critic_state.opt_state[0].count),
                                                        int(actor_state.opt_state[0].count))

    @staticmethod
    def act(td3, states, obs, uniform, noise_scale):
        return np.asarray(td3.act(states[0], jnp.asarray(obs), jax.random.key(0), uniform, noise_scale, BOUNDS))

    @staticmethod
    def evaluate(td3, states, args, num_episodes):
        """The script's evaluate() as its main() calls it (jitted), on fresh envs."""
        env, env_params = td3.make_env(args.env_id)
        evaluate = partial(td3.evaluate, env=env, env_params=env_params, num_episodes=num_episodes)
        return jax.jit(evaluate)(states[0], jax.random.key(4))


class Nnx:
    """What the tests need of td3_nnx.py: its Model, the networks and optimizers changed in place."""

    @staticmethod
    def nets(model):
        return {"actor": model.actor, "actor_target": model.actor_target, "qf1": model.critics.qf1,
                "qf2": model.critics.qf2, "qf1_target": model.critics_target.qf1, "qf2_target": model.critics_target.qf2}

    @staticmethod
    def make(td3, args, w):
        model = td3.Model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        for name, net in Nnx.nets(model).items():
            for linear, (k, b) in zip(net.layers, w[name]):
                linear.kernel[...], linear.bias[...] = jnp.asarray(k), jnp.asarray(b)
        return model

    @staticmethod
    def critic_update(td3, model, batch, noise, args):
        loss, q1 = td3.critic_update(model, tuple(map(jnp.asarray, batch)), jnp.asarray(noise), args)
        return model, loss, q1

    @staticmethod
    def actor_update(td3, model, obs, args):
        return model, td3.actor_update(model, jnp.asarray(obs), args.tau)

    @staticmethod
    def weights(model):
        return {name: [(np.asarray(l.kernel[...]), np.asarray(l.bias[...])) for l in net.layers]
                for name, net in Nnx.nets(model).items()}

    @staticmethod
    def stepper(td3, args, seed):
        env, env_params = td3.make_env("Pendulum-v1")
        obs, env_state = td3.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        model = td3.Model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        runner = td3.Runner(jax.random.key(seed + 1), env_state, obs,
                            td3.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM), jnp.int32(0))
        step = td3.nnx.jit(lambda m, r: td3.iteration(m, r, env, env_params, args))
        while True:
            runner, stats = step(model, runner)
            yield model, stats, (int(model.q_optimizer.opt_state[0].count[...]),
                                 int(model.actor_optimizer.opt_state[0].count[...]))

    @staticmethod
    def act(td3, model, obs, uniform, noise_scale):
        return np.asarray(td3.act(model.actor, jnp.asarray(obs), jax.random.key(0), uniform, noise_scale))

    @staticmethod
    def evaluate(td3, model, args, num_episodes):
        env, env_params = td3.make_env(args.env_id)
        evaluate = partial(td3.evaluate, env=env, env_params=env_params, num_episodes=num_episodes)
        return td3.nnx.jit(evaluate)(model.actor, jax.random.key(4))


class Equinox:
    """What the tests need of td3_equinox.py: its networks (pytrees), Adam and Adam's two states."""

    @staticmethod
    def nets(nets):
        return {"actor": nets.actor, "actor_target": nets.actor_target, "qf1": nets.critics[0], "qf2": nets.critics[1],
                "qf1_target": nets.critics_target[0], "qf2_target": nets.critics_target[1]}

    @staticmethod
    def make(td3, args, w):
        nets, tx, _ = td3.make_model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        eqx, given = td3.eqx, {}
        for name, net in Equinox.nets(nets).items():
            given[name] = eqx.tree_at(lambda m: m.layers, net, [
                eqx.tree_at(lambda l: (l.weight, l.bias), l, (jnp.asarray(k.T), jnp.asarray(b)))
                for l, (k, b) in zip(net.layers, w[name])])
        nets = td3.Networks(given["actor"], given["actor_target"], (given["qf1"], given["qf2"]),
                            (given["qf1_target"], given["qf2_target"]))
        return nets, tx, (tx.init(eqx.filter(nets.actor, eqx.is_array)), tx.init(eqx.filter(nets.critics, eqx.is_array)))

    @staticmethod
    def critic_update(td3, state, batch, noise, args):
        nets, tx, (actor_opt, q_opt) = state
        nets, q_opt, loss, q1 = td3.critic_update(nets, q_opt, tuple(map(jnp.asarray, batch)), jnp.asarray(noise), tx,
                                                  args)
        return (nets, tx, (actor_opt, q_opt)), loss, q1

    @staticmethod
    def actor_update(td3, state, obs, args):
        nets, tx, (actor_opt, q_opt) = state
        nets, actor_opt, loss = td3.actor_update(nets, actor_opt, jnp.asarray(obs), tx, args.tau)
        return (nets, tx, (actor_opt, q_opt)), loss

    @staticmethod
    def weights(state):
        return {name: [(np.asarray(l.weight).T, np.asarray(l.bias)) for l in net.layers]
                for name, net in Equinox.nets(state[0]).items()}

    @staticmethod
    def stepper(td3, args, seed):
        env, env_params = td3.make_env("Pendulum-v1")
        obs, env_state = td3.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        nets, tx, opt_states = td3.make_model(jax.random.key(0), OBS_DIM, BOUNDS, args)
        runner = td3.Runner(jax.random.key(seed + 1), env_state, obs,
                            td3.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM), jnp.int32(0))
        step = td3.eqx.filter_jit(lambda n, o, r: td3.iteration(n, o, r, tx, env, env_params, args))
        while True:
            nets, opt_states, runner, stats = step(nets, opt_states, runner)
            yield (nets, tx, opt_states), stats, (int(opt_states[1][0].count), int(opt_states[0][0].count))

    @staticmethod
    def act(td3, state, obs, uniform, noise_scale):
        return np.asarray(td3.act(state[0].actor, jnp.asarray(obs), jax.random.key(0), uniform, noise_scale))

    @staticmethod
    def evaluate(td3, state, args, num_episodes):
        env, env_params = td3.make_env(args.env_id)
        evaluate = partial(td3.evaluate, env=env, env_params=env_params, num_episodes=num_episodes)
        return td3.eqx.filter_jit(evaluate)(state[0].actor, jax.random.key(4))


def adam_steps(optimizer) -> int:
    """A torch Adam's step count (0 before its first step)."""
    state = optimizer.state.get(optimizer.param_groups[0]["params"][0])
    return int(state["step"]) if state else 0


class Torch:
    """What the tests need of td3_torch.py: its modules and optimizers, changed in place."""

    @staticmethod
    def linears(net):
        import torch

        return [(m.weight, m.bias) for m in net.net if isinstance(m, torch.nn.Linear)]

    @classmethod
    def layers(cls, nets, name):
        """The named network's (weight, bias) per layer, the tensors the script updates."""
        return cls.linears(getattr(nets, name))

    @classmethod
    def make(cls, td3, args, w):
        import torch

        nets = td3.make_networks(OBS_DIM, BOUNDS, args, torch.device("cpu"))
        with torch.no_grad():
            for name in reference.TD3_NETS:
                for (weight, bias), (k, b) in zip(cls.layers(nets, name), w[name]):
                    weight.copy_(torch.from_numpy(k.T)), bias.copy_(torch.from_numpy(b))
        return nets

    @staticmethod
    def critic_update(td3, nets, batch, noise, args):
        import torch

        loss, q1 = td3.critic_update(nets, tuple(map(torch.as_tensor, batch)), torch.as_tensor(noise), args)
        return nets, loss, q1

    @staticmethod
    def actor_update(td3, nets, obs, args):
        import torch

        return nets, td3.actor_update(nets, torch.as_tensor(obs), args.tau)

    @classmethod
    def weights(cls, nets):
        return {name: [(weight.detach().numpy().T.copy(), bias.detach().numpy().copy())
                       for weight, bias in cls.layers(nets, name)] for name in reference.TD3_NETS}

    @staticmethod
    def stepper(td3, args, seed):
        import torch

        torch.manual_seed(seed)
        env, env_params = td3.make_env("Pendulum-v1")
        obs, env_state = td3.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        nets = td3.make_networks(OBS_DIM, BOUNDS, args, torch.device("cpu"))
        buffer = td3.Buffer(args.buffer_size, OBS_DIM, ACTION_DIM, torch.device("cpu"), args.buffer == "host", seed)
        jax_step = jax.jit(partial(td3.env_step, env=env, env_params=env_params, num_envs=args.num_envs))
        runner = td3.Runner(env_state, torch.from_dlpack(obs), 0)
        while True:
            runner, stats = td3.iteration(nets, buffer, runner, lambda s, a: jax_step(s, td3.to_jax(a)), args)
            yield nets, stats, (adam_steps(nets.q_optimizer), adam_steps(nets.actor_optimizer))

    @staticmethod
    def act(td3, nets, obs, uniform, noise_scale):
        import torch

        torch.manual_seed(0)
        return td3.act(nets.actor, torch.as_tensor(obs), uniform, noise_scale).numpy()

    @staticmethod
    def evaluate(td3, nets, args, num_episodes):
        env, env_params = td3.make_env(args.env_id)
        return td3.evaluate(nets.actor, jax.random.key(4), env, env_params, num_episodes, 1)


class TorchCompiled(Torch):
    """td3_torch_compile.py: td3_torch.py's functions, compiled as a run compiles them (CPU's mode), the twin
    critics (and their targets) one module, each parameter the two critics' stacked."""

    @classmethod
    def layers(cls, nets, name):
        if name.startswith("qf"):
            twins = nets.qf_target if name.endswith("_target") else nets.qf
            return [(weight[int(name[2]) - 1], bias[int(name[2]) - 1]) for weight, bias in cls.linears(twins.stacked)]
        return cls.linears(getattr(nets, name))

    @classmethod
    def make(cls, td3, args, w):
        TorchCompiled.compile(td3)
        return super().make(td3, args, w)

    @staticmethod
    def stepper(td3, args, seed):
        TorchCompiled.compile(td3)
        return Torch.stepper(td3, args, seed)

    @staticmethod
    def act(td3, nets, obs, uniform, noise_scale):
        TorchCompiled.compile(td3)
        return Torch.act(td3, nets, obs, uniform, noise_scale)

    @staticmethod
    def compile(td3):
        if not hasattr(td3.critic_grads, "_torchdynamo_orig_callable"):  # once per process: it rebinds the functions
            td3.compile_hot_paths("default")


class LinenGymnasium(Linen):
    """td3_linen_gymnasium.py: td3_linen.py's train states and updates, Gymnasium's env, a Python loop."""

    @staticmethod
    def stepper(td3, args, seed, vectorization="sync", buffer=None):
        envs = td3.make_env("Pendulum-v1", args.num_envs, vectorization, seed)
        obs, env_state = td3.env_reset(envs, seed)
        apart = lambda state: state.replace(target_params=jax.tree.map(jnp.copy, state.params))  # as a run's setup
        actor_state, critic_state = map(apart, td3.make_train_states(jax.random.key(0), OBS_DIM, BOUNDS, args))
        buffer = buffer or LinenGymnasium.buffer(td3, args)
        fns = td3.compiled(BOUNDS, args)
        runner = td3.Runner(jax.random.key(seed + 1), env_state, obs, 0, np.random.default_rng(seed + 1))
        while True:
            actor_state, critic_state, buffer, runner, stats = td3.iteration(actor_state, critic_state, buffer,
                                                                             runner, envs, fns, args)
            yield (actor_state, critic_state), stats, (int(critic_state.opt_state[0].count),
                                                        int(actor_state.opt_state[0].count))

    @staticmethod
    def buffer(td3, args):
        return (td3.HostBuffer(args.buffer_size, OBS_DIM, ACTION_DIM, 0) if args.buffer == "host" else
                td3.Buffer.empty(args.buffer_size, OBS_DIM, ACTION_DIM))

    @staticmethod
    def act(td3, states, obs, uniform, noise_scale):
        return td3.act(jax.jit(td3.policy), states[0], obs, uniform, noise_scale, BOUNDS, np.random.default_rng(0))

    @staticmethod
    def evaluate(td3, states, args, num_episodes):
        return td3.evaluate(states[0], args, num_episodes, 1)


class TorchGymnasium(Torch):
    """td3_torch_gymnasium.py: td3_torch.py's networks and updates, Gymnasium's env and NumPy transitions."""

    @staticmethod
    def stepper(td3, args, seed, vectorization="sync", buffer=None):
        import torch

        torch.manual_seed(seed)
        envs = td3.make_env("Pendulum-v1", args.num_envs, vectorization, seed)
        obs, env_state = td3.env_reset(envs, seed)
        nets = td3.make_networks(OBS_DIM, BOUNDS, args, torch.device("cpu"))
        buffer = buffer or TorchGymnasium.buffer(td3, args)
        runner = td3.Runner(env_state, obs, 0)
        while True:
            runner, stats = td3.iteration(nets, buffer, runner, envs, args)
            yield nets, stats, (adam_steps(nets.q_optimizer), adam_steps(nets.actor_optimizer))

    @staticmethod
    def buffer(td3, args):
        import torch

        return td3.Buffer(args.buffer_size, OBS_DIM, ACTION_DIM, torch.device("cpu"), args.buffer == "host", 0)

    @staticmethod
    def evaluate(td3, nets, args, num_episodes):
        return td3.evaluate(nets.actor, args, num_episodes, 1)


class TorchCompiledGymnasium(TorchGymnasium):
    """td3_torch_compile_gymnasium.py: td3_torch_gymnasium.py with td3_torch_compile.py's networks and compiled
    functions."""

    layers = TorchCompiled.layers

    @classmethod
    def make(cls, td3, args, w):
        TorchCompiled.compile(td3)
        return super().make(td3, args, w)

    @staticmethod
    def stepper(td3, args, seed, vectorization="sync", buffer=None):
        TorchCompiled.compile(td3)
        return TorchGymnasium.stepper(td3, args, seed, vectorization, buffer)

    @staticmethod
    def act(td3, nets, obs, uniform, noise_scale):
        TorchCompiled.compile(td3)
        return Torch.act(td3, nets, obs, uniform, noise_scale)


ADAPTERS = {"td3_linen.py": Linen, "td3_nnx.py": Nnx, "td3_equinox.py": Equinox, "td3_torch.py": Torch,
            "td3_torch_compile.py": TorchCompiled, "td3_linen_gymnasium.py": LinenGymnasium,
            "td3_torch_gymnasium.py": TorchGymnasium, "td3_torch_compile_gymnasium.py": TorchCompiledGymnasium}
CPU_ENV = [s for s in TD3_SCRIPTS + SAC_SCRIPTS if "gymnasium" in s]  # those that step Gymnasium's or EnvPool's envs


def random_weights(rng):
    layers = lambda sizes: [(rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32),
                             rng.normal(0, 0.1, o).astype(np.float32)) for i, o in zip(sizes, sizes[1:])]
    actor, critic = (OBS_DIM, 256, 256, ACTION_DIM), (OBS_DIM + ACTION_DIM, 256, 256, 1)
    return {name: layers(actor if name.startswith("actor") else critic) for name in reference.TD3_NETS}


def random_batch(rng, n):
    """Half the transitions terminated (their targets are the reward alone), actions across the bounds."""
    return (rng.normal(size=(n, OBS_DIM)).astype(np.float32), rng.normal(size=(n, OBS_DIM)).astype(np.float32),
            rng.uniform(-2, 2, (n, ACTION_DIM)).astype(np.float32), rng.normal(size=n).astype(np.float32),
            rng.random(n) < 0.5)


def assert_weights(got, expected, names):
    """Within a fifteenth of an Adam step (the learning rate): float32 rounds a gradient near Adam's eps to a step
    of another size now and then; a wrong update moves most weights a whole step."""
    for name in names:
        for (k, b), (k_ref, b_ref) in zip(got[name], expected[name]):
            np.testing.assert_allclose(k, k_ref, rtol=1e-4, atol=2e-5, err_msg=name)
            np.testing.assert_allclose(b, b_ref, rtol=1e-4, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("script", originals(TD3_SCRIPTS))
def test_critic_and_actor_updates_match_the_reference(script):
    """Two critic steps on two batches, then the actor's step and the targets' Polyak steps: the losses, the first
    critic's values and every weight after each, with every network apart from its target (a target from the
    online network would show). The noise is wide (three standard deviations) so the clip bites, and the target
    actor sits near the bounds so that the smoothed action is clipped to them."""
    td3, adapter = load(script), ADAPTERS[script]
    rng = np.random.default_rng(0)
    args = td3.RunArgs()
    w = random_weights(rng)
    w["actor_target"][-1] = (w["actor_target"][-1][0] * 4, w["actor_target"][-1][1])  # tanh near +-1
    state = adapter.make(td3, args, w)
    expected, moments = {k: list(v) for k, v in w.items()}, {"qf1": [], "qf2": []}
    batches = [random_batch(rng, 64) for _ in range(2)]
    for count, batch in enumerate(batches, 1):
        noise = rng.normal(0, 3, (64, ACTION_DIM)).astype(np.float32)
        loss, q1, grads = reference.td3_critic_loss_and_grads(expected, batch, noise, BOUNDS, args.gamma,
                                                              args.policy_noise, args.noise_clip)
        for name in ("qf1", "qf2"):
            expected[name] = reference.adam_layers(expected[name], grads[name], moments[name], count, args.learning_rate)
        state, got_loss, got_q1 = adapter.critic_update(td3, state, batch, noise, args)
        assert float(got_loss) == pytest.approx(loss, rel=1e-5) and float(got_q1) == pytest.approx(q1, rel=1e-5)
        assert_weights(adapter.weights(state), expected, reference.TD3_NETS)  # the targets unchanged
    obs = batches[-1][0]
    loss, grads = reference.td3_actor_loss_and_grads(expected, obs, BOUNDS)
    expected["actor"] = reference.adam_layers(expected["actor"], grads, [], 1, args.learning_rate)
    for name in ("actor", "qf1", "qf2"):
        expected[f"{name}_target"] = reference.polyak(expected[name], expected[f"{name}_target"], args.tau)
    state, got_loss = adapter.actor_update(td3, state, obs, args)
    assert float(got_loss) == pytest.approx(loss, rel=1e-5, abs=1e-5)  # a mean of values near 1 each
    assert_weights(adapter.weights(state), expected, reference.TD3_NETS)


@pytest.mark.parametrize("script", TD3_SCRIPTS)
def test_critics_every_step_and_the_actor_and_targets_every_policy_frequency(script):
    """One env step per call: a critic step at every global step past learning-starts (CleanRL's), an actor step
    and a Polyak step of every target exactly where that step is also a multiple of policy-frequency, and the
    targets unchanged everywhere else. Each Polyak step (tau 0.25) moves its target a quarter of the way to its
    network as that network is after this step's Adam step, within float32's rounding (1e-6 of a weight): a move
    toward the weights before the step would be off by a quarter of an Adam step, some 1e-5 or more."""
    td3, adapter = load(script), ADAPTERS[script]
    args = td3.RunArgs(total_timesteps=40, learning_starts=10, buffer_size=64, batch_size=8, log_frequency=1,
                    policy_frequency=3, tau=0.25)
    stepper, before, targets = adapter.stepper(td3, args, 1), (0, 0), None
    actor_steps = 0
    for t in range(args.total_timesteps):
        state, stats, counts = next(stepper)
        learning = t > args.learning_starts
        delayed = learning and t % args.policy_frequency == 0
        assert (counts[0] - before[0], counts[1] - before[1]) == (int(learning), int(delayed)), t
        assert (int(stats["updates"]), int(stats["actor_updates"])) == (int(learning), int(delayed)), t
        weights = adapter.weights(state)
        now = {k: [(np.copy(a), np.copy(b)) for a, b in v] for k, v in weights.items() if k.endswith("_target")}
        if targets is not None:
            moved = [not all(np.array_equal(a, b) for (a, _), (b, _) in zip(now[k], targets[k])) for k in now]
            assert moved == [delayed] * 3, (t, moved)
        if delayed:
            for name in now:
                expected = reference.polyak(weights[name.removesuffix("_target")], targets[name], args.tau)
                for got, want in zip(flat_layers(now[name]), flat_layers(expected)):
                    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"{name} at step {t}")
        before, targets, actor_steps = counts, now, actor_steps + delayed
    assert actor_steps >= 5  # the check saw it happen


@pytest.mark.parametrize("script", TD3_SCRIPTS)
def test_exploration_is_uniform_then_the_actor_plus_scaled_noise(script):
    """Before learning starts an action is uniform over the bounds; after, the actor's action (here 0: a zero
    output layer) plus noise of exploration-noise action scales, clipped to the bounds."""
    td3, adapter = load(script), ADAPTERS[script]
    args = td3.RunArgs()
    w = random_weights(np.random.default_rng(0))
    w["actor"][-1] = (np.zeros_like(w["actor"][-1][0]), np.zeros_like(w["actor"][-1][1]))
    state, obs = adapter.make(td3, args, w), np.random.default_rng(1).normal(size=(20_000, OBS_DIM)).astype(np.float32)
    uniform = adapter.act(td3, state, obs, True, args.exploration_noise)[:, 0]
    assert uniform.min() >= -2 and uniform.max() <= 2
    assert np.histogram(uniform, bins=4, range=(-2, 2))[0] / len(uniform) == pytest.approx([0.25] * 4, abs=0.015)
    noisy = adapter.act(td3, state, obs, False, args.exploration_noise)[:, 0]
    assert noisy.mean() == pytest.approx(0, abs=0.01) and noisy.std() == pytest.approx(0.1 * 2, rel=0.03)
    wide = adapter.act(td3, state, obs, False, 2.0)[:, 0]  # noise of four: half the actions past the bounds
    assert wide.min() == -2 and wide.max() == 2 and np.mean(np.abs(wide) == 2) > 0.4


@pytest.mark.parametrize("script", TD3_SCRIPTS)
def test_evaluation_acts_with_the_actor_scaled_into_the_bounds(script, monkeypatch):
    """Every action evaluate() takes over four whole episodes is the reference's actor output at the observation
    it was taken on: tanh of the MLP, scaled into the bounds, no exploration noise, the actor's weights as set
    through the adapter (not the target actor's, set apart, nor the script's initial ones)."""
    td3, adapter = load(script), ADAPTERS[script]
    args = td3.RunArgs()
    w = random_weights(np.random.default_rng(0))
    state = adapter.make(td3, args, w)
    pairs = recorded_evaluation(td3, monkeypatch)
    adapter.evaluate(td3, state, args, 4)
    jax.effects_barrier()
    obs, actions = (np.concatenate(x) for x in zip(*pairs))
    assert len(obs) == len(actions) >= 4 * 200 and actions.shape[1:] == (ACTION_DIM,)  # Pendulum's 200 steps each
    expected = reference.td3_actor(w["actor"], obs, BOUNDS)[0]
    np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)
    assert expected.std() > 0.3 and np.abs(expected).max() > 1  # actions across the bounds, not near one value


@pytest.mark.parametrize("script", CPU_ENV)
@pytest.mark.parametrize("vectorization", ["sync", "envpool"])
def test_a_cpu_env_stores_every_transition_and_only_those(script, vectorization):
    """TD3's and SAC's CPU-env twins, with Gymnasium's same-step autoreset (the final observation in info) and
    EnvPool's next-step one (the env's next step is its reset): the buffer holds one row per real transition, and
    each row's next observation is its observation moved by Pendulum's physics under its action (a row from a
    final observation to a reset one would not be), none terminated (Pendulum only truncates)."""
    module, adapter = load(script), {**ADAPTERS, **SAC_ADAPTERS}[script]
    args = module.RunArgs(total_timesteps=600, learning_starts=599, buffer_size=600, batch_size=8, num_envs=2,
                       log_frequency=600, buffer="host")
    buffer = adapter.buffer(module, args)
    _, stats, _ = next(adapter.stepper(module, args, 1, vectorization, buffer))
    obs, next_obs, action, _, terminated = (store[:buffer.size] for store in buffer.stores)
    episodes = int(stats["episodes"])  # 300 vector steps of two envs: each env's first episode ends at 200
    assert episodes == 2 and buffer.size == (600 - episodes if vectorization == "envpool" else 600)
    theta = np.arctan2(obs[:, 1], obs[:, 0])  # Pendulum-v1: g 10, l 1, m 1, dt 0.05, speeds clipped to 8
    speed = np.clip(obs[:, 2] + (3 * 10 / 2 * np.sin(theta) + 3.0 * action[:, 0]) * 0.05, -8, 8)
    np.testing.assert_allclose(next_obs[:, 2], speed, atol=1e-4)
    np.testing.assert_allclose(np.arctan2(next_obs[:, 1], next_obs[:, 0]),
                               np.angle(np.exp(1j * (theta + speed * 0.05))), atol=1e-4)
    assert not terminated.any()


@pytest.mark.parametrize("script", originals(TD3_SCRIPTS))
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
            "memory/peak_rss_mb"} <= set(logged)
    assert [step for step, _ in logged["losses/qf_loss"]] == list(range(210, 601, 10))  # none before learning starts
    loaded = ran_in_process(script, "--total-timesteps", "0", *TINY[2:], "--load-model", str(trained),
                            "--eval-episodes", "2", log_dir=tmp_path / "eval", monkeypatch=monkeypatch)
    assert read_json(loaded / "summary.json")["eval/episodic_returns"] == summary["eval/episodic_returns"]


@pytest.mark.parametrize("script", TD3_SCRIPTS)
@pytest.mark.parametrize("args, says", [
    (["--env-id", "CartPole-v1"], "Box actions"),
    (["--policy-frequency", "0"], "policy_frequency must be a positive integer, got 0"),
    (["--batch-size", "2000", "--buffer-size", "1000"], "batch_size=2000 is larger than buffer_size=1000"),
    (["--total-timesteps", "10000", "--learning-starts", "10000"], "it would never learn"),
])
def test_bad_input_is_refused_in_one_line(script, args, says, tmp_path, monkeypatch, capsys):
    assert says in refused_in_process(script, args, tmp_path / "runs", monkeypatch, capsys)


def test_bad_input_is_refused_in_a_fresh_process(tmp_path):
    assert "Box actions" in refused_in_a_fresh_process("td3_linen.py", ["--env-id", "CartPole-v1"], tmp_path / "runs")
