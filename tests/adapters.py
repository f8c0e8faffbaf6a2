"""One adapter per framework: load canonical weights into a script's own model and optimizer,
run the script's own functions (loss, update, rollout), and hand back canonical NumPy arrays.
Canonical weights are {"actor" | "critic": [(kernel (in, out), bias), ...]} (reference.py)."""

import contextlib
import dataclasses
import functools
from functools import partial

import numpy as np
import reference as ref
from helpers import load
from reference import CNNS, NETS


def feature_shape(weights) -> tuple[int, int, int]:
    return ref.feature_shape(weights["image_shape"], weights["cnn"])


def rows_to_chw(kernel, shape):
    """A dense kernel's rows from (h, w, channel) order, the reference's (NHWC flattened), to (channel, h, w):
    the order a channels-first framework flattens its features in."""
    h, w, c = shape
    return kernel.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(h * w * c, -1)


def rows_to_hwc(kernel, shape):
    h, w, c = shape
    return kernel.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(h * w * c, -1)


def jitted_reset(m, env, env_params, args):
    """A Gymnax script's env_reset, jitted as the script jits it (Craftax's state holds a key,
    which only a traced env_reset can cast), with fresh normalization statistics where the
    script's training starts them."""
    import math

    import jax

    norm = None
    if m.normalizes(args, env, env_params):
        norm = m.Normalizer.start(math.prod(env.observation_space(env_params).shape), args.num_envs)
    return jax.jit(partial(m.env_reset, env=env, env_params=env_params, num_envs=args.num_envs, norm=norm))


class Adapter:
    """What every framework's adapter offers; the subclasses fill in the framework's own calls."""

    def __init__(self, script, weights, args):
        self.m, self.args, self.hidden = self.module(script), args, len(weights["actor"]) - 1
        self.num_actions, self.cnn = weights["actor"][-1][0].shape[1], weights.get("cnn")  # cnn: --model cnn's
        self.obs_shape = weights["image_shape"] if self.cnn else (weights["actor"][0][0].shape[0],)
        self.obs_dim = int(np.prod(self.obs_shape))
        self.continuous = "actor_logstd" in weights  # the Gaussian head: num_actions are its dimensions
        self.setup(weights)

    @staticmethod
    def module(script):
        return load(script)

    def loss_and_grads(self, mb):
        """(loss, statistics, canonical gradients) of ppo_loss on one minibatch."""
        raise NotImplementedError

    def update(self, batch: dict, iteration: int):
        """One call of the script's update(); (canonical weights after it, the learning rate the
        optimizer used in its last step, read from the optimizer's state, and the logged one)."""
        raise NotImplementedError

    def save(self, run_dir, norm=None) -> str:
        """The script's save_model (with a normalizer's statistics, if given): the file it wrote, in run_dir."""
        raise NotImplementedError

    def load(self, path):
        """The script's read_model and restore, into this adapter's model and optimizer."""
        raise NotImplementedError

    def logits(self, obs) -> np.ndarray:
        raise NotImplementedError

    def fresh(self, seed: int) -> dict:
        """The script's own initial weights from this seed (its init, not the reference's), canonical."""
        raise NotImplementedError

    def weights(self) -> dict:
        """The model's canonical weights now."""
        raise NotImplementedError

    def adam_state(self) -> tuple[dict, dict, int]:
        """Adam's first and second moments (canonical, like weights) and its step count."""
        import jax
        import optax

        is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)
        (adam,) = [x for x in jax.tree.leaves(self.opt_state_tree(), is_leaf=is_adam) if is_adam(x)]
        return self.canonical(adam.mu), self.canonical(adam.nu), int(np.asarray(adam.count))

    @contextlib.contextmanager
    def drawn_permutations(self):
        """Every permutation the script's update() draws to shuffle the batch, in the order it
        draws them. JAX draws them inside jit, so they come out through an ordered debug callback."""
        import jax

        perms, original = [], jax.random.permutation

        def recording(key, x, *args, **kwargs):
            perm = original(key, x, *args, **kwargs)
            jax.debug.callback(lambda p: perms.append(np.asarray(p).copy()), perm, ordered=True)
            return perm

        jax.random.permutation = recording
        try:
            yield perms
        finally:
            jax.random.permutation = original

    def with_valid(self, mb: dict) -> dict:
        """The CPU-env scripts' batches weigh each transition (0: a next-step autoreset's reset
        step); a reference batch holds transitions only."""
        if "valid" in self.m.Batch._fields and "valid" not in mb:
            return {**mb, "valid": np.ones(len(mb["obs"]), np.float32)}
        return mb

    def rollouts(self, *inputs, calls=2):
        """Consecutive calls of the script's rollout() from one fresh env_reset, the runner (env
        state, episode statistics, keys) carried from one to the next as the script carries it
        (Gymnax: env, env_params, env key, policy key; Gymnasium: vector env, seed, policy key).
        Per call: (batch, stats, last obs, the arguments it passed to compute_gae), as NumPy; a
        jitted function's compute_gae arguments come out through an ordered debug callback."""
        import jax

        recorded = []
        original = self.m.compute_gae

        def recording(*args):
            if any(isinstance(a, jax.core.Tracer) for a in args[:6]):
                jax.debug.callback(lambda *a: recorded.append(a), *args[:6], ordered=True)
            else:
                recorded.append(args[:6])
            return original(*args)

        self.m.compute_gae = recording
        try:
            results = self.run_rollout(*inputs, calls=calls)
            jax.effects_barrier()
        finally:
            self.m.compute_gae = original
        assert len(recorded) == calls, f"compute_gae ran {len(recorded)} times in {calls} rollouts"
        as_np = lambda x: None if x is None else np.asarray(x)
        return [({k: np.asarray(v) for k, v in batch._asdict().items()}, {k: float(v) for k, v in stats.items()},
                 np.asarray(obs), [as_np(a) for a in gae_args]) for (obs, batch, stats), gae_args in zip(results, recorded)]


class Linen(Adapter):
    def setup(self, weights):
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp = jax, jnp
        params = {"params": {net: {f"Dense_{i}": {"kernel": jnp.asarray(k), "bias": jnp.asarray(b)}
                                   for i, (k, b) in enumerate(weights[net])} for net in NETS}}
        if self.continuous:
            params["params"]["actor_logstd"] = jnp.asarray(weights["actor_logstd"])
        if self.cnn:  # Flax's Conv kernels are HWIO and its images NHWC, as the reference's
            layers = {f"Conv_{i}": layer for i, layer in enumerate(weights["conv"])} | {"Dense_0": weights["torso"][0]}
            params["params"]["cnn"] = {name: {"kernel": jnp.asarray(k), "bias": jnp.asarray(b)}
                                       for name, (k, b) in layers.items()}
        self.state = self.m.make_train_state(jax.random.key(0), self.obs_shape, self.num_actions, self.continuous,
                                             self.args).replace(params=params)

    def batch(self, mb):
        return self.m.Batch(**{k: self.jnp.asarray(v, self.jnp.int32 if v.dtype.kind in "iu" else self.jnp.float32)
                               for k, v in self.with_valid(mb).items()})

    def canonical(self, params):
        out = {net: [(np.asarray(params["params"][net][f"Dense_{i}"]["kernel"]),
                      np.asarray(params["params"][net][f"Dense_{i}"]["bias"])) for i in range(self.hidden + 1)]
               for net in NETS}
        if "actor_logstd" in params["params"]:
            out["actor_logstd"] = np.asarray(params["params"]["actor_logstd"])
        if "cnn" in params["params"]:
            layer = lambda name: tuple(np.asarray(params["params"]["cnn"][name][k]) for k in ("kernel", "bias"))
            out |= {"cnn": self.cnn, "image_shape": self.obs_shape, "torso": [layer("Dense_0")],
                    "conv": [layer(f"Conv_{i}") for i in range(len(params["params"]["cnn"]) - 1)]}
        return out

    def fresh(self, seed):
        return self.canonical(self.m.make_train_state(self.jax.random.key(seed), self.obs_shape, self.num_actions,
                                                      self.continuous, self.args).params)

    def loss_and_grads(self, mb):
        grad_fn = self.jax.value_and_grad(self.m.ppo_loss, has_aux=True)
        (loss, stats), grads = grad_fn(self.state.params, self.state.apply_fn, self.batch(mb), self.args)
        return float(loss), {k: float(v) for k, v in stats.items()}, self.canonical(grads)

    @functools.cached_property
    def update_fn(self):
        return self.jax.jit(partial(self.m.update, shuffle_key=self.jax.random.key(0), args=self.args))

    def update(self, batch, iteration):
        self.state, stats = self.update_fn(self.state, self.batch(batch))
        self.jax.effects_barrier()  # every debug callback of this call has run
        used = self.state.opt_state[1].hyperparams["learning_rate"]
        return self.canonical(self.state.params), float(used), float(stats["learning_rate"])

    @property
    def policy(self):
        """What the script's rollout() takes first: Linen's train state, the others' model."""
        return self.state

    def save(self, run_dir, norm=None):
        return self.m.save_model(str(run_dir), self.state, norm, self.args)

    def load(self, path):
        self.state = self.m.restore(self.state, self.m.read_model(str(path), self.args))

    def logits(self, obs):
        """The actor's output: logits, or a Gaussian's mean."""
        policy = self.state.apply_fn(self.state.params, self.jnp.asarray(obs), method=self.m.ActorCritic.policy)
        return np.asarray(policy[0])

    def weights(self):
        return self.canonical(self.state.params)

    def opt_state_tree(self):
        return self.state.opt_state

    def run_rollout(self, env, env_params, env_key, runner_key, calls):
        obs, env_state = jitted_reset(self.m, env, env_params, self.args)(env_key)
        runner = self.m.Runner(runner_key, env_state, obs)
        rollout = self.jitted_rollout(env, env_params)
        results = []
        for _ in range(calls):
            runner, batch, stats = rollout(self.policy, runner)
            results.append((runner.obs, batch, stats))
        return results

    def jitted_rollout(self, env, env_params):
        """rollout() jitted as the script jits it: jax.jit, nnx.jit or eqx.filter_jit."""
        rollout = partial(self.m.rollout, env=env, env_params=env_params, args=self.args)
        if isinstance(self, Equinox):
            import equinox as eqx

            return eqx.filter_jit(rollout)
        if isinstance(self, NNX):
            from flax import nnx

            return nnx.jit(rollout)
        return self.jax.jit(rollout)


class NNX(Linen):
    """The model and optimizer are objects: weights go in and come out through their layers."""

    def setup(self, weights):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        self.jax, self.jnp, self.nnx = jax, jnp, nnx
        self.model, self.optimizer = self.make_model(weights, jax.random.key(0))

    def make_model(self, weights, key):
        """The script's make_model, its layers then set to the canonical weights."""
        model, optimizer = self.m.make_model(key, self.obs_shape, self.num_actions, self.continuous, self.args)
        layers = [(getattr(model, net).layers[i], layer) for net in NETS for i, layer in enumerate(weights[net])]
        if self.cnn:  # nnx.Conv's kernels are HWIO and its images NHWC, as the reference's
            layers += [*zip(model.cnn.convs, weights["conv"]), (model.cnn.dense, weights["torso"][0])]
        for layer, (kernel, bias) in layers:
            layer.kernel[...], layer.bias[...] = self.jnp.asarray(kernel), self.jnp.asarray(bias)
        if self.continuous:
            model.actor_logstd[...] = self.jnp.asarray(weights["actor_logstd"])
        return model, optimizer

    def canonical(self, tree):
        out = {net: [(np.asarray(tree[net]["layers"][i]["kernel"][...]), np.asarray(tree[net]["layers"][i]["bias"][...]))
                     for i in range(self.hidden + 1)] for net in NETS}
        if "actor_logstd" in tree and tree["actor_logstd"] is not None:
            out["actor_logstd"] = np.asarray(tree["actor_logstd"][...])
        if "cnn" in tree and tree["cnn"] is not None:
            layer = lambda x: (np.asarray(x["kernel"][...]), np.asarray(x["bias"][...]))
            out |= {"cnn": self.cnn, "image_shape": self.obs_shape, "torso": [layer(tree["cnn"]["dense"])],
                    "conv": [layer(tree["cnn"]["convs"][i]) for i in range(len(tree["cnn"]["convs"]))]}
        return out

    def fresh(self, seed):
        model, _ = self.m.make_model(self.jax.random.key(seed), self.obs_shape, self.num_actions, self.continuous,
                                     self.args)
        return self.canonical(self.nnx.state(model))

    def loss_and_grads(self, mb):
        grad_fn = self.nnx.value_and_grad(self.m.ppo_loss, has_aux=True)
        (loss, stats), grads = grad_fn(self.model, self.batch(mb), self.args)
        return float(loss), {k: float(v) for k, v in stats.items()}, self.canonical(grads)

    @functools.cached_property
    def update_fn(self):
        return self.nnx.jit(partial(self.m.update, shuffle_key=self.jax.random.key(0), args=self.args))

    def update(self, batch, iteration):
        stats = self.update_fn(self.model, self.optimizer, self.batch(batch))
        self.jax.effects_barrier()
        used = self.optimizer.opt_state[1].hyperparams["learning_rate"][...]
        return self.canonical(self.nnx.state(self.model)), float(used), float(stats["learning_rate"])

    @property
    def policy(self):
        return self.model

    def save(self, run_dir, norm=None):
        return self.m.save_model(str(run_dir), self.model, self.optimizer, norm, self.args)

    def load(self, path):
        self.m.restore(self.model, self.optimizer, self.m.read_model(str(path), self.args))

    def logits(self, obs):
        return np.asarray(self.model.policy(self.jnp.asarray(obs))[0])

    def weights(self):
        return self.canonical(self.nnx.state(self.model))

    def opt_state_tree(self):
        return self.optimizer.opt_state


class Equinox(NNX):
    """The model is a pytree; eqx.nn.Linear keeps its weight as (out, in), like torch."""

    def setup(self, weights):
        import equinox as eqx
        import jax
        import jax.numpy as jnp

        self.jax, self.jnp, self.eqx = jax, jnp, eqx
        model, self.tx, self.opt_state = self.m.make_model(jax.random.key(0), self.obs_shape, self.num_actions,
                                                           self.continuous, self.args)
        for net in NETS:
            for i, (kernel, bias) in enumerate(weights[net]):
                model = eqx.tree_at(lambda m: (getattr(m, net).layers[i].weight, getattr(m, net).layers[i].bias),
                                    model, (jnp.asarray(kernel.T), jnp.asarray(bias)))
        if self.cnn:  # eqx.nn.Conv2d's weights are OIHW and its images (channels, h, w), flattened in that order
            for i, (kernel, bias) in enumerate(weights["conv"]):
                model = eqx.tree_at(lambda m: (m.cnn.convs[i].weight, m.cnn.convs[i].bias), model,
                                    (jnp.asarray(kernel.transpose(3, 2, 0, 1)), jnp.asarray(bias)[:, None, None]))
            kernel, bias = weights["torso"][0]
            model = eqx.tree_at(lambda m: (m.cnn.dense.weight, m.cnn.dense.bias), model,
                                (jnp.asarray(rows_to_chw(kernel, feature_shape(weights)).T), jnp.asarray(bias)))
        if self.continuous:
            model = eqx.tree_at(lambda m: m.actor_logstd, model, jnp.asarray(weights["actor_logstd"]))
        self.model = model

    def canonical(self, tree):
        out = {net: [(np.asarray(getattr(tree, net).layers[i].weight).T, np.asarray(getattr(tree, net).layers[i].bias))
                     for i in range(self.hidden + 1)] for net in NETS}
        if tree.actor_logstd is not None:
            out["actor_logstd"] = np.asarray(tree.actor_logstd)
        if tree.cnn is not None:
            out |= {"cnn": self.cnn, "image_shape": self.obs_shape}
            out |= {"conv": [(np.asarray(c.weight).transpose(2, 3, 1, 0), np.asarray(c.bias)[:, 0, 0]) for c in tree.cnn.convs],
                    "torso": [(rows_to_hwc(np.asarray(tree.cnn.dense.weight).T, feature_shape(out)),
                               np.asarray(tree.cnn.dense.bias))]}
        return out

    def fresh(self, seed):
        model, _, _ = self.m.make_model(self.jax.random.key(seed), self.obs_shape, self.num_actions, self.continuous,
                                        self.args)
        return self.canonical(model)

    def loss_and_grads(self, mb):
        grad_fn = self.eqx.filter_value_and_grad(self.m.ppo_loss, has_aux=True)
        (loss, stats), grads = grad_fn(self.model, self.batch(mb), self.args)
        return float(loss), {k: float(v) for k, v in stats.items()}, self.canonical(grads)

    @functools.cached_property
    def update_fn(self):
        return self.eqx.filter_jit(partial(self.m.update, shuffle_key=self.jax.random.key(0), tx=self.tx,
                                           args=self.args))

    def update(self, batch, iteration):
        self.model, self.opt_state, stats = self.update_fn(self.batch(batch), self.model, self.opt_state)
        self.jax.effects_barrier()
        used = self.opt_state[1].hyperparams["learning_rate"]
        return self.canonical(self.model), float(used), float(stats["learning_rate"])

    def save(self, run_dir, norm=None):
        return self.m.save_model(str(run_dir), self.model, self.opt_state, norm, self.args)

    def load(self, path):  # Equinox reads the leaves into this run's structure, which the env's shapes fix
        saved = self.m.read_model(str(path), self.args, *self.m.make_env(self.args.env_id))
        self.model, self.opt_state = self.m.restore(saved, self.opt_state)

    def weights(self):
        return self.canonical(self.model)

    def opt_state_tree(self):
        return self.opt_state


class Torch(Adapter):
    def setup(self, weights):
        import torch

        self.torch = torch
        self.agent, self.optimizer = self.m.make_agent(self.obs_shape, self.num_actions, self.continuous, self.args,
                                                       torch.device("cpu"))
        state = {f"{net}.{2 * i}.{name}": torch.tensor(k.T.copy() if name == "weight" else b)
                 for net in NETS for i, (k, b) in enumerate(weights[net]) for name in ("weight", "bias")}
        if self.continuous:
            state["actor_logstd"] = torch.tensor(weights["actor_logstd"])
        if self.cnn:  # torch's Conv2d weights are OIHW and its images NCHW, flattened (channel, h, w)
            for i, (kernel, bias) in enumerate(weights["conv"]):
                state |= {f"cnn.net.{2 * i}.weight": torch.tensor(kernel.transpose(3, 2, 0, 1).copy()),
                          f"cnn.net.{2 * i}.bias": torch.tensor(bias)}
            kernel, bias = weights["torso"][0]
            dense = f"cnn.net.{2 * len(weights['conv']) + 1}"  # after the ReLUs and the Flatten
            state |= {f"{dense}.weight": torch.tensor(rows_to_chw(kernel, feature_shape(weights)).T.copy()),
                      f"{dense}.bias": torch.tensor(bias)}
        self.agent.load_state_dict(state)

    def batch(self, mb):
        dtype = lambda v: self.torch.int32 if v.dtype.kind in "iu" else self.torch.float32
        return self.m.Batch(**{k: self.torch.tensor(v, dtype=dtype(v)) for k, v in self.with_valid(mb).items()})

    def canonical(self, tensor_of):
        out = {net: [(tensor_of(f"{net}.{2 * i}.weight").T.numpy(), tensor_of(f"{net}.{2 * i}.bias").numpy())
                     for i in range(self.hidden + 1)] for net in NETS}
        if self.continuous:
            out["actor_logstd"] = tensor_of("actor_logstd").numpy()
        if self.cnn:
            convs = len(CNNS[self.cnn]["convs"])
            out |= {"cnn": self.cnn, "image_shape": self.obs_shape,
                    "conv": [(tensor_of(f"cnn.net.{2 * i}.weight").numpy().transpose(2, 3, 1, 0),
                              tensor_of(f"cnn.net.{2 * i}.bias").numpy()) for i in range(convs)]}
            out["torso"] = [(rows_to_hwc(tensor_of(f"cnn.net.{2 * convs + 1}.weight").T.numpy(), feature_shape(out)),
                             tensor_of(f"cnn.net.{2 * convs + 1}.bias").numpy())]
        return out

    def weights(self):
        params = dict(self.agent.named_parameters())
        return self.canonical(lambda name: params[name].detach().clone())

    def fresh(self, seed):
        self.torch.manual_seed(seed)
        agent, _ = self.m.make_agent(self.obs_shape, self.num_actions, self.continuous, self.args,
                                     self.torch.device("cpu"))
        params = dict(agent.named_parameters())
        return self.canonical(lambda name: params[name].detach().clone())

    def adam_state(self):
        params = dict(self.agent.named_parameters())
        state = lambda key: lambda name: self.optimizer.state[params[name]][key].detach().clone()
        (count,) = {int(self.optimizer.state[p]["step"]) for p in params.values()}
        return self.canonical(state("exp_avg")), self.canonical(state("exp_avg_sq")), count

    def loss_and_grads(self, mb):
        loss, stats = self.m.ppo_loss(self.agent, self.batch(mb), self.args)
        self.agent.zero_grad()
        loss.backward()
        params = dict(self.agent.named_parameters())
        # a parameter the loss does not reach has no gradient: zero, which the comparison then names
        grads = self.canonical(lambda name: self.torch.zeros_like(params[name]) if params[name].grad is None
                               else params[name].grad.detach())
        self.agent.zero_grad()
        return float(loss.detach()), {k: float(v.detach()) for k, v in stats.items()}, grads

    def update(self, batch, iteration):
        self.torch.manual_seed(iteration)
        self.m.update(self.agent, self.optimizer, self.batch(batch), iteration, self.args)
        used = float(self.optimizer.param_groups[0]["lr"])
        return self.weights(), used, used  # the scripts log this same value

    def save(self, run_dir, norm=None):
        return self.m.save_model(str(run_dir), self.agent, self.optimizer, norm, self.args)

    def load(self, path):
        self.m.restore(self.agent, self.optimizer, self.m.read_model(str(path), self.args))

    def logits(self, obs):
        with self.torch.no_grad():
            return self.agent.policy(self.torch.tensor(obs))[0].numpy()

    @contextlib.contextmanager
    def drawn_permutations(self):
        import sys

        perms, original = [], self.torch.randperm

        def recording(*args, **kwargs):
            perm = original(*args, **kwargs)
            caller = sys._getframe(1)  # update(), or a comprehension in it; not torch.compile's own draws
            if self.m.update.__code__ in (caller.f_code, caller.f_back.f_code):
                perms.append(perm.cpu().numpy().copy())
            return perm

        self.torch.randperm = recording
        try:
            yield perms
        finally:
            self.torch.randperm = original

    def run_rollout(self, env, env_params, env_key, runner_key, calls):
        import jax

        obs, env_state = jitted_reset(self.m, env, env_params, self.args)(env_key)
        runner = self.m.Runner(env_state, self.torch.from_dlpack(obs))
        jax_step = jax.jit(partial(self.m.env_step, env=env, env_params=env_params, num_envs=self.args.num_envs,
                                   gamma=self.args.gamma))
        env_step_fn = lambda state, action: jax_step(state, self.m.to_jax(action))  # as train() hands it over
        self.torch.manual_seed(int(jax.random.randint(runner_key, (), 0, 2**31 - 1)))
        results = []
        for _ in range(calls):
            runner, batch, stats = self.m.rollout(self.agent, runner, env_step_fn, self.args)
            results.append((runner.obs, batch, stats))
        return results


def gymnasium_reset(m, envs, seed, args):
    """A CPU-env script's first reset as its train() makes it: through a fresh normalizer where it normalizes."""
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    return m.env_reset(envs, seed, m.Normalizer.start(obs_dim, args.num_envs) if m.normalizes(args, envs) else None)


class LinenGymnasium(Linen):
    """The Gymnasium twin: the policy step and the batch jitted as the script jits them."""

    def run_rollout(self, envs, seed, runner_key, calls):
        obs, env_state = gymnasium_reset(self.m, envs, seed, self.args)
        runner = self.m.Runner(runner_key, env_state, obs)
        policy_fn = self.jax.jit(partial(self.m.policy_step, apply_fn=self.state.apply_fn))
        batch_fn = self.jax.jit(partial(self.m.learn_batch, args=self.args))
        results = []
        for _ in range(calls):
            runner, batch, stats = self.m.rollout(self.state, runner, envs, policy_fn, batch_fn, self.args)
            results.append((runner.obs, batch, stats))
        return results


class TorchGymnasium(Torch):
    def run_rollout(self, envs, seed, runner_key, calls):
        import jax

        obs, env_state = gymnasium_reset(self.m, envs, seed, self.args)
        runner = self.m.Runner(env_state, self.torch.from_numpy(obs))
        self.torch.manual_seed(int(jax.random.randint(runner_key, (), 0, 2**31 - 1)))
        results = []
        for _ in range(calls):
            runner, batch, stats = self.m.rollout(self.agent, runner, envs, self.args)
            results.append((runner.obs, batch, stats))
        return results


@functools.cache
def compiled_torch_module(script: str, scope: str):
    """A private copy of a torch_compile script with its hot paths compiled as the script compiles
    them on a CPU at that --compile-scope, made once per test session, script and scope: the shared
    module keeps its eager functions."""
    m = load(script, fresh=True)
    m.compile_hot_paths("default", scope)
    return m


class TorchCompile(Torch):
    """The compiled gradients and GAE (the CPU's default scope): compilation must not change the numbers."""

    SCOPE = "grads"

    def __init__(self, script, weights, args):
        super().__init__(script, weights, dataclasses.replace(args, compile_scope=self.SCOPE))

    @classmethod
    def module(cls, script):
        return compiled_torch_module(script, cls.SCOPE)


class TorchCompileAll(TorchCompile):
    """Everything compiled (--compile-scope update+policy, the CUDA default): the policy step, GAE
    and the whole minibatch step with the multi-tensor, capturable Adam."""

    SCOPE = "update+policy"


class TorchCompileGymnasium(TorchCompile, TorchGymnasium):
    """The CPU-env script compiled: TorchCompile's compiled module, TorchGymnasium's rollout."""


class TorchCompileAllGymnasium(TorchCompileAll, TorchGymnasium):
    """The CPU-env script with everything compiled (its default scope on every device)."""


class Agents:
    """An agent script's adapter: args.num_agents agents, each from the same canonical weights,
    each with its own batch per update() call (a list, one per agent), as the script's training
    loop runs update() (the JAX scripts vmap the single-agent update, torch's update takes them
    all); update() returns a list of each agent's canonical weights."""

    def stack(self, tree):
        return self.jax.tree.map(lambda x: self.jnp.stack([x] * self.args.num_agents), tree)

    def keys(self):
        return self.jax.random.split(self.jax.random.key(0), self.args.num_agents)  # one shuffle key per agent

    def agent(self, tree, a):
        return self.jax.tree.map(lambda x: x[a], tree)

    def stacked_batch(self, batches):
        return self.jax.tree.map(lambda *xs: self.jnp.stack(xs), *[self.batch(b) for b in batches])


class LinenAgents(Agents, Linen):
    def setup(self, weights):
        super().setup(weights)
        self.state = self.stack(self.state)

    @functools.cached_property
    def update_fn(self):
        return self.jax.jit(self.jax.vmap(partial(self.m.update, args=self.args)))

    def update(self, batches, iteration):
        hyper = self.m.agent_hyper(self.args)
        self.state, _ = self.update_fn(self.state, self.stacked_batch(batches), self.keys(), hyper)
        self.jax.effects_barrier()
        return [self.canonical(self.agent(self.state.params, a)) for a in range(self.args.num_agents)]


class NNXAgents(Agents, NNX):
    def setup(self, weights):
        super().setup(weights)
        self.model, self.optimizer = self.nnx.vmap(partial(self.make_model, weights))(self.keys())

    @functools.cached_property
    def update_fn(self):
        return self.nnx.jit(self.nnx.vmap(partial(self.m.update, args=self.args)))

    def update(self, batches, iteration):
        hyper = self.m.agent_hyper(self.args)
        self.update_fn(self.model, self.optimizer, self.stacked_batch(batches), self.keys(), hyper)
        self.jax.effects_barrier()
        state = self.nnx.state(self.model)
        return [self.canonical(self.agent(state, a)) for a in range(self.args.num_agents)]


class TorchAgents(Torch):
    """Stacked weights (make_agents), set per layer for every agent at once."""

    def setup(self, weights):
        import torch

        self.torch = torch
        self.model, self.params, self.optimizer, self.generators = self.m.make_agents(
            self.obs_dim, self.num_actions, self.continuous, self.args, torch.device("cpu"))
        if self.continuous:
            self.params["actor_logstd"][:] = torch.tensor(weights["actor_logstd"])
        for net in NETS:
            for i, (kernel, bias) in enumerate(weights[net]):
                self.params[net][f"{2 * i}.weight"][:] = torch.tensor(kernel.T.copy())
                self.params[net][f"{2 * i}.bias"][:] = torch.tensor(bias)

    def update(self, batches, iteration):
        stacked = self.m.Batch(*(self.torch.stack(xs) for xs in zip(*[self.batch(b) for b in batches])))
        hyper = self.m.agent_hyper(self.args)
        self.m.update(self.model, self.params, self.optimizer, self.generators, stacked, iteration, hyper, self.args)
        tensor_of = lambda a: lambda name: self.params[name.split(".", 1)[0]][name.split(".", 1)[1]][a].clone()
        return [self.canonical(tensor_of(a)) for a in range(self.args.num_agents)]

    def save(self, run_dir, norm=None):
        return self.m.save_model(str(run_dir), self.params, self.optimizer, norm, self.args)

    def load(self, path):
        self.m.restore(self.params, self.optimizer, self.m.read_model(str(path), self.args))


@functools.cache
def compiled_torch_agents_module():
    """A private copy of ppo_torch_agents.py with --compile's hot paths compiled, made once per session."""
    m = load("ppo_torch_agents.py", fresh=True)
    m.compile_hot_paths()
    return m


class TorchAgentsCompile(TorchAgents):
    @staticmethod
    def module(script):
        return compiled_torch_agents_module()


def adapter_for(script: str, compiled: bool = False) -> type[Adapter]:
    """The adapter of a script (compiled: the agent script's --compile, torch_compile's everything)."""
    if compiled:
        return {"ppo_torch_agents.py": TorchAgentsCompile, "ppo_torch_compile.py": TorchCompileAll,
                "ppo_torch_compile_gymnasium.py": TorchCompileAllGymnasium}[script]
    return {"linen": Linen, "nnx": NNX, "nnx_cached": NNX, "equinox": Equinox, "torch": Torch,
            "torch_compile": TorchCompile, "linen_gymnasium": LinenGymnasium,
            "torch_gymnasium": TorchGymnasium, "torch_compile_gymnasium": TorchCompileGymnasium,
            "linen_agents": LinenAgents, "nnx_agents": NNXAgents, "torch_agents": TorchAgents}[script[4:-3]]


# ---- The off-policy scripts' evaluation (tests/test_dqn.py, test_td3.py, test_sac.py): each action their
# evaluate() takes, with the observation it took it on.

def recorded_evaluation(m, monkeypatch) -> list:
    """For the rest of the test, every action the module's evaluate() hands its env, with the observation it was
    taken on, appended to the list returned as (obs, action) NumPy pairs, one per env step. The env's state carries
    the observation the env shows (evaluate() hands the state on untouched), so one call records each pair and
    nothing rests on the order the records come in. Inside jit (a JAX script's evaluate(), a torch script's jitted
    Gymnax step) a debug callback hands them over: call jax.effects_barrier() before reading them."""
    import inspect

    import jax

    pairs, reset, step = [], m.env_reset, m.env_step
    host = next(iter(inspect.signature(step).parameters)) == "envs"  # Gymnasium's env_step(envs, state, action)
    record = lambda obs, action: pairs.append((np.array(obs), np.array(action)))

    def env_reset(*args, **kwargs):
        obs, state = reset(*args, **kwargs)
        return obs, (state, obs)

    def env_step(*args, **kwargs):
        if host:
            envs, (state, obs), action = args
            state, out = step(envs, state, action, **kwargs)
            record(obs, action)
        else:
            (state, obs), action, *rest = args
            state, out = step(state, action, *rest, **kwargs)
            jax.debug.callback(record, obs, action)
        return (state, out.obs), out

    monkeypatch.setattr(m, "env_reset", env_reset)
    monkeypatch.setattr(m, "env_step", env_step)
    return pairs
