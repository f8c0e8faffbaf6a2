"""DQN (dqn_*.py, docs/offpolicy.md) against the NumPy reference (tests/reference.py): the TD targets, loss,
gradients and Adam steps from one batch; epsilon, the updates and the target copies at CleanRL's steps; the
replay buffer's ring and its sampling; the action evaluation takes; and the contract a run keeps."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
from adapters import recorded_evaluation
from helpers import (DQN_SCRIPTS, OFFPOLICY_REGIONS, check_profiled, load, offpolicy_tiny, originals, read_json,
                     ran_in_process, refused_in_a_fresh_process, refused_in_process, run_ok, scalars)

TINY, PROFILED = offpolicy_tiny(2000, 500, 125, 25)


class Linen:
    """What the tests need of dqn_linen.py: its functional train state."""

    @staticmethod
    def make(dqn, args, layers, target):
        state = dqn.make_train_state(jax.random.key(0), (layers[0][0].shape[0],), layers[-1][0].shape[1], args)
        params = lambda ls: {"params": {f"Dense_{i}": {"kernel": jnp.asarray(k), "bias": jnp.asarray(b)}
                                        for i, (k, b) in enumerate(ls)}}
        return state.replace(params=params(layers), target_params=params(target), opt_state=state.tx.init(params(layers)))

    @staticmethod
    def update(dqn, state, batch, gamma):
        return dqn.td_update(state, tuple(map(jnp.asarray, batch)), gamma)

    @staticmethod
    def layers(state, target=False):
        dense = (state.target_params if target else state.params)["params"]
        return [(np.asarray(dense[f"Dense_{i}"]["kernel"]), np.asarray(dense[f"Dense_{i}"]["bias"]))
                for i in range(len(dense))]

    @staticmethod
    def stepper(dqn, args, seed):
        """One iteration at a time: the state after it, its stats, and its optimizer's step count."""
        env, env_params = dqn.make_env("CartPole-v1")
        obs, env_state = dqn.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        state = dqn.make_train_state(jax.random.key(0), (4,), 2, args)
        runner = dqn.Runner(jax.random.key(seed + 1), env_state, obs, dqn.Buffer.empty(args.buffer_size, 4), jnp.int32(0))
        step = jax.jit(lambda s, r: dqn.iteration(s, r, env, env_params, args))
        while True:
            state, runner, stats = step(state, runner)
            yield state, stats, int(state.opt_state[0].count)

    @staticmethod
    def buffer(dqn, capacity, obs_dim):
        return dqn.Buffer.empty(capacity, obs_dim)

    @staticmethod
    def add(buffer, *transition):
        return buffer.add(*map(jnp.asarray, transition))

    @staticmethod
    def sample(buffer, n):
        return np.asarray(buffer.sample(jax.random.key(0), n)[0])

    @staticmethod
    def evaluate(dqn, state, args, num_episodes, epsilon):
        """The script's evaluate() as its main() calls it (jitted), on fresh envs."""
        env, env_params = dqn.make_env(args.env_id)
        evaluate = partial(dqn.evaluate, env=env, env_params=env_params, num_episodes=num_episodes, epsilon=epsilon)
        return jax.jit(evaluate)(state, jax.random.key(4))


class LinenGymnasium(Linen):
    """dqn_linen_gymnasium.py: dqn_linen.py's train state and update, Gymnasium's env, a Python loop."""

    @staticmethod
    def stepper(dqn, args, seed, vectorization="sync", buffer=None):
        envs = dqn.make_env("CartPole-v1", args.num_envs, vectorization, seed)
        obs, env_state = dqn.env_reset(envs, seed)
        state = dqn.make_train_state(jax.random.key(0), (4,), 2, args)
        state = state.replace(target_params=jax.tree.map(jnp.copy, state.params))  # apart, as a run's jitted setup makes
        buffer = buffer or LinenGymnasium.buffer(dqn, args.buffer_size, 4, args.buffer == "host")
        fns, runner = dqn.compiled(args), dqn.Runner(jax.random.key(seed + 1), env_state, obs, 0, np.random.default_rng(seed + 1))
        while True:
            state, buffer, runner, stats = dqn.iteration(state, buffer, runner, envs, fns, args)
            yield state, stats, int(state.opt_state[0].count)

    @staticmethod
    def buffer(dqn, capacity, obs_dim, host=False):
        return dqn.HostBuffer(capacity, obs_dim, 0) if host else dqn.Buffer.empty(capacity, obs_dim)

    @staticmethod
    def sample(buffer, n):
        return np.asarray((buffer.sample(n) if hasattr(buffer, "rng") else buffer.sample(jax.random.key(0), n))[0])

    @staticmethod
    def evaluate(dqn, state, args, num_episodes, epsilon):
        return dqn.evaluate(state, args, num_episodes, epsilon, 1)


class Nnx:
    """What the tests need of dqn_nnx.py: its Q-network, target and optimizer, changed in place."""

    @staticmethod
    def make(dqn, args, layers, target):
        model, target_model, optimizer = dqn.make_model(jax.random.key(0), (layers[0][0].shape[0],),
                                                        layers[-1][0].shape[1], args)
        for net, ls in ((model, layers), (target_model, target)):
            for linear, (k, b) in zip(Nnx.linears(net), ls):
                linear.kernel[...], linear.bias[...] = jnp.asarray(k), jnp.asarray(b)
        return model, target_model, dqn.nnx.Optimizer(model, dqn.optax.adam(args.learning_rate), wrt=dqn.nnx.Param)

    @staticmethod
    def linears(net):
        return [*net.hidden, net.out]

    @staticmethod
    def update(dqn, state, batch, gamma):
        loss, q = dqn.td_update(*state, tuple(map(jnp.asarray, batch)), gamma)
        return state, loss, q

    @staticmethod
    def layers(state, target=False):
        return [(np.asarray(l.kernel[...]), np.asarray(l.bias[...])) for l in Nnx.linears(state[1] if target else state[0])]

    @staticmethod
    def stepper(dqn, args, seed):
        env, env_params = dqn.make_env("CartPole-v1")
        obs, env_state = dqn.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        model, target, optimizer = dqn.make_model(jax.random.key(0), (4,), 2, args)
        runner = dqn.Runner(jax.random.key(seed + 1), env_state, obs, dqn.Buffer.empty(args.buffer_size, 4), jnp.int32(0))
        step = dqn.nnx.jit(lambda m, t, o, r: dqn.iteration(m, t, o, r, env, env_params, args))
        while True:
            runner, stats = step(model, target, optimizer, runner)
            yield (model, target, optimizer), stats, int(optimizer.opt_state[0].count[...])

    @staticmethod
    def evaluate(dqn, state, args, num_episodes, epsilon):
        env, env_params = dqn.make_env(args.env_id)
        evaluate = partial(dqn.evaluate, env=env, env_params=env_params, num_episodes=num_episodes, epsilon=epsilon)
        return dqn.nnx.jit(evaluate)(state[0], jax.random.key(4))

    buffer, add, sample = Linen.buffer, Linen.add, Linen.sample


class Equinox:
    """What the tests need of dqn_equinox.py: its Q-network and target (pytrees), Adam and Adam's state."""

    @staticmethod
    def make(dqn, args, layers, target):
        model, _, tx, _ = dqn.make_model(jax.random.key(0), (layers[0][0].shape[0],), layers[-1][0].shape[1], args)
        with_layers = lambda ls: dqn.eqx.tree_at(lambda m: m.layers, model, [
            dqn.eqx.tree_at(lambda l: (l.weight, l.bias), l, (jnp.asarray(k.T), jnp.asarray(b)))
            for l, (k, b) in zip(model.layers, ls)])
        model = with_layers(layers)
        return model, with_layers(target), tx, tx.init(dqn.eqx.filter(model, dqn.eqx.is_array))

    @staticmethod
    def update(dqn, state, batch, gamma):
        model, target, tx, opt_state = state
        model, opt_state, loss, q = dqn.td_update(model, target, opt_state, tuple(map(jnp.asarray, batch)), tx, gamma)
        return (model, target, tx, opt_state), loss, q

    @staticmethod
    def layers(state, target=False):
        return [(np.asarray(l.weight).T, np.asarray(l.bias)) for l in (state[1] if target else state[0]).layers]

    @staticmethod
    def stepper(dqn, args, seed):
        env, env_params = dqn.make_env("CartPole-v1")
        obs, env_state = dqn.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        model, target, tx, opt_state = dqn.make_model(jax.random.key(0), (4,), 2, args)
        runner = dqn.Runner(jax.random.key(seed + 1), env_state, obs, dqn.Buffer.empty(args.buffer_size, 4), jnp.int32(0))
        step = dqn.eqx.filter_jit(lambda m, t, o, r: dqn.iteration(m, t, o, r, tx, env, env_params, args))
        while True:
            model, target, opt_state, runner, stats = step(model, target, opt_state, runner)
            yield (model, target, tx, opt_state), stats, int(opt_state[0].count)

    @staticmethod
    def evaluate(dqn, state, args, num_episodes, epsilon):
        env, env_params = dqn.make_env(args.env_id)
        evaluate = partial(dqn.evaluate, env=env, env_params=env_params, num_episodes=num_episodes, epsilon=epsilon)
        return dqn.eqx.filter_jit(evaluate)(state[0], jax.random.key(4))

    buffer, add, sample = Linen.buffer, Linen.add, Linen.sample


class Torch:
    """What the tests need of dqn_torch.py: its modules and optimizer, changed in place."""

    @staticmethod
    def make(dqn, args, layers, target):
        import torch

        q, t, optimizer = dqn.make_networks((layers[0][0].shape[0],), layers[-1][0].shape[1], args, torch.device("cpu"))
        for net, ls in ((q, layers), (t, target)):
            with torch.no_grad():
                for linear, (k, b) in zip([m for m in net.net if isinstance(m, torch.nn.Linear)], ls):
                    linear.weight.copy_(torch.from_numpy(k.T)), linear.bias.copy_(torch.from_numpy(b))
        return q, t, optimizer

    @staticmethod
    def update(dqn, state, batch, gamma):
        import torch

        loss, q = dqn.td_update(*state, tuple(map(torch.as_tensor, batch)), gamma)
        return state, loss, q

    @staticmethod
    def layers(state, target=False):
        import torch

        net = state[1] if target else state[0]
        return [(m.weight.detach().numpy().T, m.bias.detach().numpy()) for m in net.net if isinstance(m, torch.nn.Linear)]

    @staticmethod
    def stepper(dqn, args, seed):
        import torch

        torch.manual_seed(seed)
        env, env_params = dqn.make_env("CartPole-v1")
        obs, env_state = dqn.env_reset(jax.random.key(seed), env, env_params, args.num_envs)
        q, t, optimizer = dqn.make_networks((4,), 2, args, torch.device("cpu"))
        buffer = dqn.Buffer(args.buffer_size, 4, torch.device("cpu"), args.buffer == "host", seed)
        jax_step = jax.jit(partial(dqn.env_step, env=env, env_params=env_params, num_envs=args.num_envs))
        runner = dqn.Runner(env_state, torch.from_dlpack(obs), 0)
        while True:
            runner, stats = dqn.iteration(q, t, optimizer, buffer, runner,
                                          lambda s, a: jax_step(s, dqn.to_jax(a)), args)
            count = int(optimizer.state[next(q.parameters())]["step"]) if optimizer.state else 0
            yield (q, t, optimizer), stats, count

    @staticmethod
    def buffer(dqn, capacity, obs_dim, host=False):
        import torch

        return dqn.Buffer(capacity, obs_dim, torch.device("cpu"), host, 0)

    @staticmethod
    def add(buffer, *transition):
        import torch

        buffer.add(*map(torch.as_tensor, transition))
        return buffer

    @staticmethod
    def sample(buffer, n):
        return buffer.sample(n)[0].numpy()

    @staticmethod
    def evaluate(dqn, state, args, num_episodes, epsilon):
        env, env_params = dqn.make_env(args.env_id)
        return dqn.evaluate(state[0], jax.random.key(4), env, env_params, num_episodes, epsilon, 1)


class TorchCompiled(Torch):
    """dqn_torch_compile.py: dqn_torch.py's functions, compiled as a run compiles them (CPU's mode)."""

    @staticmethod
    def make(dqn, args, layers, target):
        TorchCompiled.compile(dqn)
        return Torch.make(dqn, args, layers, target)

    @staticmethod
    def stepper(dqn, args, seed):
        TorchCompiled.compile(dqn)
        return Torch.stepper(dqn, args, seed)

    @staticmethod
    def compile(dqn):
        if not hasattr(dqn.td_grads, "_torchdynamo_orig_callable"):  # once per process: it rebinds the functions
            dqn.compile_hot_paths("default")


class TorchGymnasium(Torch):
    """dqn_torch_gymnasium.py: dqn_torch.py's networks and update, Gymnasium's env and NumPy transitions."""

    @staticmethod
    def stepper(dqn, args, seed, vectorization="sync", buffer=None):
        import torch

        torch.manual_seed(seed)
        envs = dqn.make_env("CartPole-v1", args.num_envs, vectorization, seed)
        obs, env_state = dqn.env_reset(envs, seed)
        q, t, optimizer = dqn.make_networks((4,), 2, args, torch.device("cpu"))
        buffer = buffer or dqn.Buffer(args.buffer_size, 4, torch.device("cpu"), args.buffer == "host", seed)
        runner = dqn.Runner(env_state, obs, 0, np.random.default_rng(seed + 1))
        while True:
            runner, stats = dqn.iteration(q, t, optimizer, buffer, runner, envs, args)
            count = int(optimizer.state[next(q.parameters())]["step"]) if optimizer.state else 0
            yield (q, t, optimizer), stats, count

    @staticmethod
    def add(buffer, *transition):
        buffer.add(*map(np.asarray, transition))
        return buffer

    @staticmethod
    def evaluate(dqn, state, args, num_episodes, epsilon):
        return dqn.evaluate(state[0], args, num_episodes, epsilon, 1)


class TorchCompiledGymnasium(TorchGymnasium):
    """dqn_torch_compile_gymnasium.py: dqn_torch_gymnasium.py with dqn_torch_compile.py's compiled functions."""

    @staticmethod
    def make(dqn, args, layers, target):
        TorchCompiled.compile(dqn)
        return Torch.make(dqn, args, layers, target)

    @staticmethod
    def stepper(dqn, args, seed, vectorization="sync", buffer=None):
        TorchCompiled.compile(dqn)
        return TorchGymnasium.stepper(dqn, args, seed, vectorization, buffer)


ADAPTERS = {"dqn_linen.py": Linen, "dqn_nnx.py": Nnx, "dqn_equinox.py": Equinox, "dqn_torch.py": Torch,
            "dqn_torch_compile.py": TorchCompiled, "dqn_torch_gymnasium.py": TorchGymnasium,
            "dqn_torch_compile_gymnasium.py": TorchCompiledGymnasium,
            "dqn_linen_gymnasium.py": LinenGymnasium}
CPU_ENV = [s for s in DQN_SCRIPTS if "gymnasium" in s]  # the scripts that step Gymnasium's envs


def random_layers(rng, sizes):
    return [(rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32), rng.normal(0, 0.1, o).astype(np.float32))
            for i, o in zip(sizes, sizes[1:])]


def random_batch(rng, n, obs_dim, num_actions):
    """Half the transitions terminated: their targets are the reward alone."""
    return (rng.normal(size=(n, obs_dim)).astype(np.float32), rng.normal(size=(n, obs_dim)).astype(np.float32),
            rng.integers(0, num_actions, n).astype(np.int32), rng.normal(size=n).astype(np.float32),
            rng.random(n) < 0.5)


@pytest.mark.parametrize("script", originals(DQN_SCRIPTS))
def test_td_update_matches_the_reference(script):
    """Three Adam steps on three batches: the loss, the Q-values taken and every weight after each step, with
    online and target networks that differ (a target from the online network would show)."""
    dqn, adapter = load(script), ADAPTERS[script]
    rng = np.random.default_rng(0)
    args = dqn.RunArgs()
    layers, target = random_layers(rng, (4, 120, 84, 2)), random_layers(rng, (4, 120, 84, 2))
    state = adapter.make(dqn, args, layers, target)
    batches = [random_batch(rng, 64, 4, 2) for _ in range(3)]
    expected = reference.dqn_adam_steps(layers, target, batches, args.gamma, args.learning_rate)
    current = layers
    for batch, after in zip(batches, expected):
        loss, taken, _ = reference.td_loss_and_grads(current, target, batch, args.gamma)
        state, got_loss, got_q = adapter.update(dqn, state, batch, args.gamma)
        assert float(got_loss) == pytest.approx(loss, rel=1e-5) and float(got_q) == pytest.approx(taken.mean(), rel=1e-5)
        for (k, b), (k_ref, b_ref) in zip(adapter.layers(state), after):
            np.testing.assert_allclose(k, k_ref, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(b, b_ref, rtol=1e-4, atol=1e-6)
        current = after
    assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(adapter.layers(state, target=True), target))


@pytest.mark.parametrize("script", DQN_SCRIPTS)
@pytest.mark.parametrize("num_envs, tau", [(1, 1.0), (3, 0.25)])
def test_epsilon_updates_and_target_copies_at_cleanrl_steps(script, num_envs, tau):
    """One vector step per call: epsilon as CleanRL's schedule gives it, an Adam step exactly where CleanRL
    trains, and where it updates the target, the target tau of the way to the online network as it is after this
    step's Adam step (tau 1: equal to it exactly; tau 0.25: within float32's rounding, far under the quarter Adam
    step by which a move toward the weights before that step would be off), unchanged elsewhere. Some updates
    fall on a step that also trains: there a target from the weights before the step would show."""
    dqn, adapter = load(script), ADAPTERS[script]
    frequencies = dict(train_frequency=4 if num_envs == 1 else 5, target_network_frequency=7)
    args = dqn.RunArgs(total_timesteps=60 * num_envs, learning_starts=10, buffer_size=64, batch_size=8,
                    num_envs=num_envs, log_frequency=num_envs, tau=tau, **frequencies)
    stepper, before, target = adapter.stepper(dqn, args, 1), 0, None
    flat = lambda layers: np.concatenate([np.ravel(x) for layer in layers for x in layer])
    trained, copied, both = [], [], 0
    for t in range(0, args.total_timesteps, num_envs):
        epsilon, trains, copies = reference.dqn_schedule(t, args.total_timesteps, args.start_e, args.end_e,
                                                         args.exploration_fraction, args.learning_starts,
                                                         num_envs=num_envs, **frequencies)
        state, stats, count = next(stepper)
        assert float(stats["epsilon"]) == pytest.approx(epsilon, rel=1e-6), t
        assert count - before == int(trains) == int(stats["updates"]), t
        now = adapter.layers(state, target=True)
        if copies:  # toward the weights after this step's update
            online = flat(adapter.layers(state))
            if tau == 1:
                assert np.array_equal(flat(now), online), t
            else:
                expected = tau * online.astype(np.float64) + (1 - tau) * flat(target)
                np.testing.assert_allclose(flat(now), expected, rtol=1e-6, atol=1e-7, err_msg=f"step {t}")
            both += int(trains)
        elif target is not None:
            assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(now, target)), t
        before, target = count, [(np.copy(k), np.copy(b)) for k, b in now]
        trained.append(trains)
        copied.append(copies)
    assert sum(trained) >= 5 and sum(copied) >= 3 and both >= 2  # the check saw them happen, and together


@pytest.mark.parametrize("script", DQN_SCRIPTS)
def test_evaluation_acts_greedily_on_q_but_at_its_epsilon(script, monkeypatch):
    """Every action evaluate() takes, each against the argmax of the reference's Q-values (the online network's,
    set through the adapter) at the observation it was taken on. The online network's two Q-values are made level
    around CartPole's start, so that its greedy action changes with the observation (both come up often), and the
    target is the online network with its two actions swapped, so that acting on it would take the other action
    each time. At epsilon 0 every action is the argmax; at evaluation's epsilon (end-e, what main() hands it)
    uniform exploration makes another action of end-e * (1 - 1/actions) of them, over some thousands of steps."""
    dqn, adapter = load(script), ADAPTERS[script]
    rng = np.random.default_rng(0)
    args = dqn.RunArgs()
    layers = random_layers(rng, (4, 120, 84, 2))
    q = lambda layers, obs: reference.q_forward(reference.as64_layers(layers), np.asarray(obs, np.float64))[0]
    starts = q(layers, rng.uniform(-0.05, 0.05, (1000, 4)))  # CartPole's start states
    kernel, bias = layers[-1]
    layers[-1] = (kernel, bias + np.float32([0, np.median(starts[:, 0] - starts[:, 1])]))
    target = [*layers[:-1], (kernel[:, ::-1].copy(), layers[-1][1][::-1].copy())]
    state = adapter.make(dqn, args, layers, target)
    pairs = recorded_evaluation(dqn, monkeypatch)
    for epsilon, episodes in ((0.0, 16), (args.end_e, 64)):
        pairs.clear()
        adapter.evaluate(dqn, state, args, episodes, epsilon)
        jax.effects_barrier()
        obs, actions = (np.concatenate(x) for x in zip(*pairs))
        values = q(layers, obs)
        clear = np.abs(values[:, 0] - values[:, 1]) > 1e-4  # no near-tie, which float32's rounding could decide
        greedy = values[clear].argmax(-1)
        other = int((actions[clear] != greedy).sum())
        n, rate = int(clear.sum()), epsilon * (1 - 1 / values.shape[1])
        assert len(obs) == len(actions) >= 5 * episodes and n >= 0.95 * len(obs), (len(obs), n)
        assert 0.1 < greedy.mean() < 0.9, greedy.mean()  # both actions, each often
        if epsilon == 0:
            assert other == 0, (other, n)
        else:  # mean rate * n (about 50 here), a standard deviation near 7
            assert rate * n / 3 < other < 2 * rate * n, (other, n, rate)


@pytest.mark.parametrize("script", ["dqn_torch.py", "dqn_torch_compile.py"])
def test_a_step_where_every_env_explores_skips_the_network(script):
    """CleanRL's dqn.py runs its Q-network only when it exploits: at epsilon 1 the torch scripts' act() never calls
    it (a network that raises is never reached) and draws every action uniformly; at epsilon 0 it takes the greedy
    action of every env; in between, an env that exploits runs it for all (the where picks each env's own)."""
    import torch

    dqn = load(script)
    q_network = dqn.QNetwork((4,), (8,), 3, False)
    torch.manual_seed(0)
    obs = torch.randn(4096, 4)
    greedy = q_network(obs).argmax(-1)

    class Raises(torch.nn.Module):
        num_actions = 3

        def forward(self, obs):
            raise AssertionError("the network ran where every env explores")

    uniform = torch.cat([dqn.act(Raises(), obs[:1], 1.0) for _ in range(3000)])
    assert uniform.dtype == torch.int32 and np.bincount(uniform.numpy(), minlength=3).min() > 900  # each near 1,000
    assert torch.equal(dqn.act(q_network, obs, 0.0).long(), greedy)
    mixed = dqn.act(q_network, obs, 0.5).long()
    agree = (mixed == greedy).float().mean()  # greedy, or a uniform draw that lands on it: 1/2 + 1/2 * 1/3
    assert abs(float(agree) - 2 / 3) < 0.03, float(agree)


@pytest.mark.parametrize("script, host", [(s, False) for s in DQN_SCRIPTS if s != "dqn_torch_compile.py"]
                         + [(s, True) for s in ("dqn_torch.py", *CPU_ENV)])  # the compiled one's is dqn_torch.py's
def test_the_buffer_is_a_ring_sampled_over_its_written_rows_only(script, host):
    """Rows written in order, the oldest overwritten once full; a sample draws every written row about
    equally and no row that was never written (on the device, and in the host's NumPy buffer)."""
    dqn, adapter = load(script), ADAPTERS[script]
    buffer = adapter.buffer(dqn, 10, 1, host=True) if host else adapter.buffer(dqn, 10, 1)
    row = lambda start, n: (np.arange(start, start + n, dtype=np.float32)[:, None],) * 2 + (
        np.zeros(n, np.int32), np.arange(start, start + n, dtype=np.float32), np.zeros(n, bool))
    buffer = adapter.add(adapter.add(buffer, *row(1, 3)), *row(4, 3))  # six rows of ten: 1..6
    counts = np.bincount(adapter.sample(buffer, 60_000)[:, 0].astype(int), minlength=11)
    assert counts[0] == 0 and counts[7:].sum() == 0  # never an unwritten row (zeros)
    assert np.all(np.abs(counts[1:7] / 10_000 - 1) < 0.05), counts
    buffer = adapter.add(adapter.add(buffer, *row(7, 3)), *row(10, 3))  # twelve rows into ten: 1, 2 overwritten
    counts = np.bincount(adapter.sample(buffer, 60_000)[:, 0].astype(int), minlength=13)
    assert counts[:3].sum() == 0 and np.all(counts[3:] > 0)


@pytest.mark.parametrize("script", CPU_ENV)
@pytest.mark.parametrize("vectorization", ["sync", "envpool"])
def test_a_cpu_env_stores_every_transition_and_only_those(script, vectorization):
    """Gymnasium's same-step autoreset (the final observation in info) and EnvPool's next-step one (the env's
    next step is its reset): the buffer holds one row per real transition, none from a final observation to
    a reset one, and each terminated row's next observation is CartPole's final one, out of its bounds."""
    dqn, adapter = load(script), ADAPTERS[script]
    args = dqn.RunArgs(total_timesteps=600, learning_starts=599, buffer_size=600, batch_size=8, num_envs=2,
                    log_frequency=600, vectorization=vectorization, buffer="host", exploration_fraction=100.0)
    buffer = adapter.buffer(dqn, args.buffer_size, 4, host=True)  # epsilon near 1 throughout: short episodes
    _, stats, _ = next(adapter.stepper(dqn, args, 1, vectorization, buffer))
    # CartPole ends an episode past 2.4 or 12 degrees (within float32's rounding of the float64 state)
    outside = lambda o: (np.abs(o[:, 0]) > 2.4 - 1e-6) | (np.abs(o[:, 2]) > 12 * 2 * np.pi / 360 - 1e-6)
    episodes = int(stats["episodes"])
    obs, next_obs, _, _, terminated = (store[:buffer.size] for store in buffer.stores)
    if vectorization == "envpool":  # a reset step follows each episode that ended before the iteration's last step
        assert 600 - episodes <= buffer.size <= 600 - episodes + args.num_envs, (buffer.size, episodes)
    else:
        assert buffer.size == 600
    assert terminated.sum() >= 10 and np.array_equal(outside(next_obs), terminated)
    assert not outside(obs).any()  # a reset step stored would start from a final observation


@pytest.mark.parametrize("script", originals(DQN_SCRIPTS))
def test_a_run_writes_the_contract_and_reloads(script, tmp_path, monkeypatch):
    """A tiny run (traced by --profile): run.json with what ran, the tags, summary.json, the trace; its saved
    model, loaded with no training,
    evaluates to the same returns (the same fresh envs and exploration)."""
    trained = run_ok(script, *PROFILED, "--save-model", "--eval-episodes", "3", "--profile", log_dir=tmp_path / "train")
    info, summary, logged = read_json(trained / "run.json"), read_json(trained / "summary.json"), scalars(trained)
    check_profiled(trained, script, OFFPOLICY_REGIONS, once_per_iteration=("iteration",))  # the last two
    assert info["args"]["total_timesteps"] == 2000 and info["variant"] == script.removesuffix(".py")
    assert [step for step, _ in logged["time/iteration"]] == list(range(25, 2001, 25))
    assert {"charts/SPS", "charts/epsilon", "losses/td_loss", "losses/q_values", "memory/peak_rss_mb"} <= set(logged)
    assert [step for step, _ in logged["losses/td_loss"]] == list(range(525, 2001, 25))  # none before learning starts
    loaded = ran_in_process(script, "--total-timesteps", "0", *TINY[2:], "--load-model", str(trained),
                            "--eval-episodes", "3", log_dir=tmp_path / "eval", monkeypatch=monkeypatch)
    assert read_json(loaded / "summary.json")["eval/episodic_returns"] == summary["eval/episodic_returns"]


@pytest.mark.parametrize("script", ["dqn_torch.py", "dqn_torch_compile.py"])
def test_a_torch_env_run_names_itself_and_reloads(script, tmp_path, monkeypatch):
    """--torch-env: the variant says it, and a saved model evaluates the same again on the env in torch."""
    trained = run_ok(script, *TINY, "--torch-env", "--save-model", "--eval-episodes", "3", log_dir=tmp_path / "train")
    info, summary = read_json(trained / "run.json"), read_json(trained / "summary.json")
    assert info["variant"] == script.removesuffix(".py") + "-torchenv" and info["args"]["torch_env"] is True
    loaded = ran_in_process(script, "--total-timesteps", "0", *TINY[2:], "--torch-env", "--load-model", str(trained),
                            "--eval-episodes", "3", log_dir=tmp_path / "eval", monkeypatch=monkeypatch)
    assert read_json(loaded / "summary.json")["eval/episodic_returns"] == summary["eval/episodic_returns"]


@pytest.mark.parametrize("script", DQN_SCRIPTS)
@pytest.mark.parametrize("args, says", [
    (["--env-id", "Pendulum-v1"], "Discrete actions"),
    (["--batch-size", "2000", "--buffer-size", "1000"], "batch_size=2000 is larger than buffer_size=1000"),
    (["--total-timesteps", "10000", "--learning-starts", "10000"], "it would never learn"),
    (["--num-envs", "4", "--train-frequency", "2"], "must be at least num_envs=4"),
])
def test_bad_input_is_refused_in_one_line(script, args, says, tmp_path, monkeypatch, capsys):
    assert says in refused_in_process(script, args, tmp_path / "runs", monkeypatch, capsys)


def test_bad_input_is_refused_in_a_fresh_process(tmp_path):
    assert "Discrete actions" in refused_in_a_fresh_process("dqn_torch.py", ["--env-id", "Pendulum-v1"], tmp_path / "runs")
