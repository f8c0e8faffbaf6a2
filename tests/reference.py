"""The independent reference every script is checked against: PPO's loss with either head (a
categorical over logits, or CleanRL's Gaussian with a state-independent log-std), its gradients
(written out by hand), global-norm clipping, Adam, the linear schedule, GAE and the running
normalization of observations and rewards, in float64 NumPy. Weights are {"actor" | "critic":
[(kernel (in, out), bias), ...]}, plus "actor_logstd": (action_dim,) for a continuous head. A CNN
(--model cnn) has one layer per head after a torso both share; the torso takes the flat observations
(as every script gets them) as the NHWC images they are: "conv": [(kernel (kh, kw, in, out), bias),
...] (VALID padding, ReLU each), then "torso": [(kernel, bias)] on the features flattened in (h, w,
channel) order (ReLU); "cnn" names its layout in CNNS, "image_shape" is the images' (h, w, channels)."""

from typing import NamedTuple

import numpy as np

NETS = ("actor", "critic")
ORDER = ("conv", "torso", *NETS)  # of the arrays in flat()
META = ("cnn", "image_shape")  # a CNN's: not weights
# --model cnn: (filters, kernel size, stride) per convolution, the dense layer's width, and the input's
# scale: MinAtar's own network, and the Nature CNN of CleanRL's ppo_atari_envpool.py (bytes / 255)
CNNS = {"minatar": {"convs": ((16, 3, 1),), "dense": 128, "scale": 1.0},
        "nature": {"convs": ((32, 8, 4), (64, 4, 2), (64, 3, 1)), "dense": 512, "scale": 1 / 255}}
LOSS_STATS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


def random_weights(rng, obs_dim, hidden, num_actions, continuous=False) -> dict:
    """num_actions: the logits' count, or the action's dimensions (continuous)."""
    weights = {}
    for net, out in (("actor", num_actions), ("critic", 1)):
        sizes = (obs_dim, *hidden, out)
        weights[net] = [(rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32),
                         rng.normal(0, 0.1, o).astype(np.float32)) for i, o in zip(sizes, sizes[1:])]
    if continuous:  # not the init's zeros: a log-std that is never read would show
        weights["actor_logstd"] = rng.normal(0, 0.3, num_actions).astype(np.float32)
    return weights


def feature_shape(image_shape, cnn) -> tuple[int, int, int]:
    """(h, w, channels) of a CNN's last convolution on (h, w, channels) images: what its dense layer takes."""
    h, w, channels = image_shape
    for filters, size, stride in CNNS[cnn]["convs"]:
        h, w, channels = (h - size) // stride + 1, (w - size) // stride + 1, filters
    return h, w, channels


def random_cnn_weights(rng, image_shape, cnn, num_actions) -> dict:
    """A CNN's weights for (h, w, channels) images, scaled to keep every layer's output near 1."""
    layout, channels = CNNS[cnn], image_shape[2]
    weights = {"cnn": cnn, "image_shape": tuple(image_shape), "conv": []}
    for filters, size, _ in layout["convs"]:
        fan_in = size * size * channels  # of the scaled input
        weights["conv"].append((rng.normal(0, 1 / np.sqrt(fan_in), (size, size, channels, filters)).astype(np.float32),
                                rng.normal(0, 0.1, filters).astype(np.float32)))
        channels = filters
    sizes = {"torso": (int(np.prod(feature_shape(image_shape, cnn))), layout["dense"]),
             "actor": (layout["dense"], num_actions), "critic": (layout["dense"], 1)}
    for net, (i, o) in sizes.items():
        weights[net] = [(rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32),
                         rng.normal(0, 0.1, o).astype(np.float32))]
    return weights


def flat(weights) -> np.ndarray:
    logstd = [weights["actor_logstd"].ravel()] if "actor_logstd" in weights else []
    layers = [layer for net in ORDER if net in weights for layer in weights[net]]
    return np.concatenate([a.ravel() for layer in layers for a in layer] + logstd)


def unflat(vector, like) -> dict:
    out, i = {k: like[k] for k in META if k in like}, 0
    for net in (net for net in ORDER if net in like):
        out[net] = []
        for kernel, bias in like[net]:
            k = vector[i:i + kernel.size].reshape(kernel.shape)
            i += kernel.size
            out[net].append((k, vector[i:i + bias.size]))
            i += bias.size
    if "actor_logstd" in like:
        out["actor_logstd"] = vector[i:i + like["actor_logstd"].size]
    return out


def forward(layers, x):
    """The MLP's output and every layer's input (for the backward pass)."""
    inputs = [x]
    for kernel, bias in layers[:-1]:
        x = np.tanh(x @ kernel + bias)
        inputs.append(x)
    return x @ layers[-1][0] + layers[-1][1], inputs


def backward(layers, inputs, d_out):
    """Gradients of every (kernel, bias) from the gradient at the MLP's output."""
    grads = []
    for i in reversed(range(len(layers))):
        grads.append((inputs[i].T @ d_out, d_out.sum(0)))
        if i:
            d_out = (d_out @ layers[i][0].T) * (1 - inputs[i] ** 2)  # through tanh
    return grads[::-1]


def conv(x, kernel, bias, stride):
    """A VALID convolution of NHWC images by an HWIO kernel: one matrix product over every patch, shaped
    (n, out_h, out_w, kh, kw, in); the patches and their index are kept for the backward pass."""
    kh, kw, _, filters = kernel.shape
    rows = (np.arange((x.shape[1] - kh) // stride + 1) * stride)[:, None] + np.arange(kh)  # (out_h, kh)
    cols = (np.arange((x.shape[2] - kw) // stride + 1) * stride)[:, None] + np.arange(kw)  # (out_w, kw)
    index = (slice(None), rows[:, None, :, None], cols[None, :, None, :])
    patches = x[index]
    return patches.reshape(*patches.shape[:3], -1) @ kernel.reshape(-1, filters) + bias, (x.shape, patches, index)


def conv_backward(kernel, cache, d_out):
    """The kernel's, the bias's and the input's gradients from the gradient at a convolution's output."""
    (x_shape, patches, index), filters = cache, kernel.shape[-1]
    d_kernel = patches.reshape(-1, kernel.size // filters).T @ d_out.reshape(-1, filters)
    d_x = np.zeros(x_shape)
    np.add.at(d_x, index, (d_out @ kernel.reshape(-1, filters).T).reshape(*d_out.shape[:3], *kernel.shape[:3]))
    return (d_kernel.reshape(kernel.shape), d_out.sum((0, 1, 2))), d_x


def network(w, obs):
    """The actor's output, the value, and what the backward pass needs: two MLPs, or a CNN."""
    if "cnn" not in w:
        (out, actor_inputs), (value, critic_inputs) = forward(w["actor"], obs), forward(w["critic"], obs)
        return out, value[:, 0], (actor_inputs, critic_inputs)
    layout, convs = CNNS[w["cnn"]], []
    x = obs.reshape(len(obs), *w["image_shape"]) * layout["scale"]  # observations are flat, as in the scripts
    for (kernel, bias), (_, _, stride) in zip(w["conv"], layout["convs"]):
        x, cache = conv(x, kernel, bias, stride)
        x = np.maximum(x, 0)
        convs.append((cache, x))
    (torso_kernel, torso_bias), = w["torso"]
    features = np.maximum(x.reshape(len(x), -1) @ torso_kernel + torso_bias, 0)
    (out, _), (value, _) = forward(w["actor"], features), forward(w["critic"], features)
    return out, value[:, 0], (x, convs, features)


def network_backward(w, cache, d_out, d_value):
    """Every weight's gradient, from the gradients at the actor's output and at the value."""
    if "cnn" not in w:
        actor_inputs, critic_inputs = cache
        return {"actor": backward(w["actor"], actor_inputs, d_out),
                "critic": backward(w["critic"], critic_inputs, d_value[:, None])}
    x, convs, features = cache
    grads = {"actor": backward(w["actor"], [features], d_out),
             "critic": backward(w["critic"], [features], d_value[:, None])}
    # both heads' gradients meet in the shared torso
    d_features = (d_out @ w["actor"][0][0].T + d_value[:, None] @ w["critic"][0][0].T) * (features > 0)
    grads["torso"] = [(x.reshape(len(x), -1).T @ d_features, d_features.sum(0))]
    d_x, grads["conv"] = (d_features @ w["torso"][0][0].T).reshape(x.shape), []
    for (kernel, _), (cache, out) in reversed(list(zip(w["conv"], convs))):
        layer, d_x = conv_backward(kernel, cache, d_x * (out > 0))  # through the ReLU
        grads["conv"].insert(0, layer)
    return grads


def log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def as64(weights):
    cast = lambda v: [(a.astype(np.float64), b.astype(np.float64)) for a, b in v]
    return {k: v if k in META else v.astype(np.float64) if k == "actor_logstd" else cast(v)
            for k, v in weights.items()}


def categorical(logits, actions):
    """Log-probabilities of the actions, the entropies, and both one's gradients by the logits."""
    logp = log_softmax(logits)
    p = np.exp(logp)
    entropy = -(p * logp).sum(-1)
    d_logprob = np.eye(logits.shape[1])[actions.astype(int)] - p
    d_entropy = -p * (logp + entropy[:, None])  # dH/dz_j = -p_j (log p_j + H)
    return logp[np.arange(len(actions)), actions.astype(int)], entropy, d_logprob, d_entropy


def gaussian(mean, logstd, actions):
    """The Gaussian head: log-probabilities of the (unclipped) actions and the entropies, summed
    over action dimensions, and both one's gradients by the mean and by the log-std (per sample)."""
    z = (actions - mean) / np.exp(logstd)
    logprob = (-0.5 * z ** 2 - logstd - 0.5 * np.log(2 * np.pi)).sum(-1)
    entropy = np.broadcast_to((0.5 + 0.5 * np.log(2 * np.pi) + logstd).sum(), len(actions))
    d_mean, d_logstd = z / np.exp(logstd), z ** 2 - 1
    return logprob, entropy, (d_mean, d_logstd), (np.zeros_like(mean), np.ones_like(mean))


def loss_and_grads(weights, mb, args):
    """PPO's loss (clipped surrogate, clipped value loss, entropy bonus), its statistics, and
    its exact gradient with respect to every weight, in float64."""
    w, n, c = as64(weights), len(mb["obs"]), args.clip_coef
    logits, value, cache = network(w, mb["obs"].astype(np.float64))
    continuous = "actor_logstd" in w
    if continuous:
        logprob, entropy_each, d_logprob, d_entropy = gaussian(logits, w["actor_logstd"], mb["actions"])
    else:
        logprob, entropy_each, d_logprob, d_entropy = categorical(logits, mb["actions"])
    logratio = logprob - mb["logprobs"]
    ratio = np.exp(logratio)
    adv = (mb["advantages"] - mb["advantages"].mean()) / (mb["advantages"].std() + 1e-8)
    unclipped, clipped = -adv * ratio, -adv * np.clip(ratio, 1 - c, 1 + c)
    pg_loss = np.maximum(unclipped, clipped).mean()
    v_clipped = mb["values"] + np.clip(value - mb["values"], -c, c)
    v_unclipped_loss, v_clipped_loss = (value - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2
    if args.clip_vloss:
        v_loss = 0.5 * np.maximum(v_unclipped_loss, v_clipped_loss).mean()
    else:
        v_loss = 0.5 * v_unclipped_loss.mean()
    loss = pg_loss - args.ent_coef * entropy_each.mean() + args.vf_coef * v_loss
    stats = {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy_each.mean(),
             "approx_kl": ((ratio - 1) - logratio).mean(), "clipfrac": (np.abs(ratio - 1) > c).mean()}

    # d loss / d log-prob: the surrogate through the branch max() takes (the clipped one is flat
    # outside the clip range); then through the head to the actor's output (and the log-std),
    # with the entropy bonus
    inside = (ratio > 1 - c) & (ratio < 1 + c)
    d_logprob_each = (np.where(unclipped >= clipped, -adv, -adv * inside) / n * ratio)[:, None]
    if continuous:
        d_logits = d_logprob_each * d_logprob[0] - args.ent_coef / n * d_entropy[0]
        d_logstd = (d_logprob_each * d_logprob[1] - args.ent_coef / n * d_entropy[1]).sum(0)
    else:
        d_logits = d_logprob_each * d_logprob - args.ent_coef / n * d_entropy
    # d loss / d value, through the value-loss branch max() takes
    if args.clip_vloss:
        inside_v = np.abs(value - mb["values"]) < c
        d_value = np.where(v_unclipped_loss >= v_clipped_loss, value - mb["returns"],
                           (v_clipped - mb["returns"]) * inside_v)
    else:
        d_value = value - mb["returns"]
    d_value *= args.vf_coef / n
    grads = network_backward(w, cache, d_logits, d_value)
    if continuous:
        grads["actor_logstd"] = d_logstd
    return loss, stats, grads


class Step(NamedTuple):
    weights: dict  # after the step
    lr: float  # the learning rate it used
    norm: float  # the gradient's global norm before clipping
    adam: tuple  # Adam's moments and step count after it: (m, v, count)


def optimizer_steps(weights, minibatches, args, total_steps, max_grad_norm=None, lr_decay_speed=1.0,
                    adam=None) -> list[Step]:
    """Global-norm clipping, Adam with bias correction and the linear schedule, one step per
    minibatch. adam continues from a saved optimizer state (moments and step count) while the
    schedule starts again, as a run that loads a model does. max_grad_norm and lr_decay_speed
    plant known errors, to show the comparison can see them."""
    max_grad_norm = args.max_grad_norm if max_grad_norm is None else max_grad_norm
    (b1, b2), eps = args.adam_betas, args.adam_eps
    params = flat(as64(weights))
    m, v, count = adam if adam is not None else (np.zeros_like(params), np.zeros_like(params), 0)
    out = []
    for t, mb in enumerate(minibatches):
        g = flat(loss_and_grads(unflat(params, weights), mb, args)[2])
        norm = np.sqrt((g ** 2).sum())
        g = g * min(1.0, max_grad_norm / norm)
        m, v, count = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g ** 2, count + 1
        m_hat, v_hat = m / (1 - b1 ** count), v / (1 - b2 ** count)
        lr = args.learning_rate * (1 - lr_decay_speed * t / total_steps)
        params = params - lr * m_hat / (np.sqrt(v_hat) + eps)
        out.append(Step(unflat(params, weights), lr, norm, (m, v, count)))
    return out


def gae(values, rewards, terminated, truncated, last_value, final_values, gamma, lam):
    """GAE step by step, backwards: a trace stops at terminated or truncated; a truncated (not
    terminated) step bootstraps through the time limit with gamma * V(final observation)."""
    advantages, advantage = np.zeros_like(values), np.zeros_like(last_value)
    for t in reversed(range(len(values))):
        next_value = last_value if t == len(values) - 1 else values[t + 1]
        reward = rewards[t].copy()
        if final_values is not None:
            reward += np.where(truncated[t] & ~terminated[t], gamma * final_values[t], 0.0)
        nonterminal = 1.0 - (terminated[t] | truncated[t])
        delta = reward + gamma * next_value * nonterminal - values[t]
        advantage = delta + gamma * lam * nonterminal * advantage
        advantages[t] = advantage
    return advantages, advantages + values


class Running(NamedTuple):
    """Gymnasium's RunningMeanStd: the mean and variance of everything seen, merged batch by batch
    (Chan et al.'s parallel update), from a count of 1e-4 at mean 0, variance 1."""
    mean: np.ndarray
    var: np.ndarray
    count: float

    @classmethod
    def start(cls, shape=()):
        return cls(np.zeros(shape), np.ones(shape), 1e-4)

    def update(self, x):
        x = np.asarray(x, np.float64)
        delta, n = x.mean(0) - self.mean, len(x)
        total = self.count + n
        var = (self.var * self.count + x.var(0) * n + delta ** 2 * self.count * n / total) / total
        return Running(self.mean + delta * n / total, var, total)


def normalize_obs(stats: Running, obs, update=True):
    """CleanRL's NormalizeObservation then its clip to +-10: the statistics take the observations
    in first (every env's, as one batch), then scale them. update=False: a final observation,
    scaled by the statistics without joining them."""
    stats = stats.update(obs) if update else stats
    return stats, np.clip((obs - stats.mean) / np.sqrt(stats.var + 1e-8), -10, 10)


def scale_reward(stats: Running, discounted, reward, terminated, gamma):
    """CleanRL's NormalizeReward then its clip to +-10: each env's discounted return (cut only by a
    termination, as Gymnasium's wrapper does) joins the statistics, and the reward is divided by
    their standard deviation."""
    discounted = discounted * gamma * (1 - terminated) + reward
    stats = stats.update(discounted)
    return stats, discounted, np.clip(reward / np.sqrt(stats.var + 1e-8), -10, 10)


# ---- DQN (dqn_*.py): CleanRL's dqn.py, step by step. A Q-network is [(kernel (in, out), bias), ...] with ReLU
# between layers; a batch is (obs, next_obs, action, reward, terminated) as the replay buffer stores it.
def q_forward(layers, x):
    """The Q-values and every layer's input (for the backward pass)."""
    inputs = [x]
    for kernel, bias in layers[:-1]:
        x = np.maximum(x @ kernel + bias, 0.0)
        inputs.append(x)
    return x @ layers[-1][0] + layers[-1][1], inputs


def td_loss_and_grads(layers, target_layers, batch, gamma):
    """The squared TD error's mean, the online Q-values of the actions taken, and the gradients: the
    target from the target network's best next action, no bootstrap after a termination."""
    obs, next_obs, action, reward, terminated = (np.asarray(x, np.float64) for x in batch)
    target = reward + (1 - terminated) * gamma * q_forward(as64_layers(target_layers), next_obs)[0].max(-1)
    q, inputs = q_forward(as64_layers(layers), obs)
    taken = q[np.arange(len(q)), action.astype(int)]
    d_q = np.zeros_like(q)
    d_q[np.arange(len(q)), action.astype(int)] = 2 * (taken - target) / len(q)
    grads = []
    for i in reversed(range(len(layers))):
        grads.append((inputs[i].T @ d_q, d_q.sum(0)))
        if i:
            d_q = (d_q @ np.asarray(layers[i][0], np.float64).T) * (inputs[i] > 0)  # through ReLU
    return ((taken - target) ** 2).mean(), taken, grads[::-1]


def as64_layers(layers):
    return [(np.asarray(k, np.float64), np.asarray(b, np.float64)) for k, b in layers]


def dqn_adam_steps(layers, target_layers, batches, gamma, learning_rate, betas=(0.9, 0.999), eps=1e-8):
    """Adam with bias correction at a constant rate, no clipping (CleanRL's DQN), one step per batch, the
    target network fixed: the layers after each step."""
    params = np.concatenate([a.ravel() for layer in as64_layers(layers) for a in layer])
    m, v, out = np.zeros_like(params), np.zeros_like(params), []
    unflat_layers = lambda p: unflat(p, {"actor": as64_layers(layers)})["actor"]
    for count, batch in enumerate(batches, 1):
        g = np.concatenate([a.ravel() for layer in td_loss_and_grads(unflat_layers(params), target_layers, batch,
                                                                     gamma)[2] for a in layer])
        m, v = betas[0] * m + (1 - betas[0]) * g, betas[1] * v + (1 - betas[1]) * g ** 2
        params = params - learning_rate * (m / (1 - betas[0] ** count)) / (np.sqrt(v / (1 - betas[1] ** count)) + eps)
        out.append(unflat_layers(params))
    return out


def dqn_schedule(global_step, total_timesteps, start_e, end_e, exploration_fraction, learning_starts,
                 train_frequency, target_network_frequency, num_envs=1):
    """At the vector step that starts at global_step: epsilon (CleanRL's linear_schedule), whether it
    trains and whether it updates the target: CleanRL's global steps past learning_starts that are
    multiples of each frequency, of which a vector step of num_envs envs covers global_step..+num_envs-1."""
    slope = (end_e - start_e) / (exploration_fraction * total_timesteps)
    covers = lambda every: any((global_step + i) % every == 0 for i in range(num_envs))
    learning = global_step > learning_starts
    return max(slope * global_step + start_e, end_e), learning and covers(train_frequency), learning and covers(
        target_network_frequency)


# ---- TD3 (td3_*.py): CleanRL's td3_continuous_action.py, step by step. Weights are a dict of networks (actor,
# actor_target, qf1, qf2, qf1_target, qf2_target), each [(kernel (in, out), bias), ...] with ReLU between layers;
# the actor's output goes through tanh into the bounds, a critic takes the observation and the action side by side.
TD3_NETS = ("actor", "actor_target", "qf1", "qf2", "qf1_target", "qf2_target")


def relu_backward(layers, inputs, d_out):
    """Gradients of every (kernel, bias) of a ReLU MLP from the gradient at its output, and the input's gradient."""
    grads = []
    for i in reversed(range(len(layers))):
        grads.append((inputs[i].T @ d_out, d_out.sum(0)))
        d_out = d_out @ layers[i][0].T * ((inputs[i] > 0) if i else 1)  # through ReLU, but not into the input
    return grads[::-1], d_out


def td3_actor(layers, obs, bounds):
    """The action, and what its backward pass needs: tanh's output and the MLP's layer inputs."""
    low, high = (np.asarray(b, np.float64) for b in bounds)
    out, inputs = q_forward(as64_layers(layers), obs)
    squashed = np.tanh(out)
    return squashed * (high - low) / 2 + (high + low) / 2, squashed, inputs


def td3_critic(layers, obs, action):
    q, inputs = q_forward(as64_layers(layers), np.concatenate([obs, action], -1))
    return q[:, 0], inputs


def td3_critic_loss_and_grads(w, batch, noise, bounds, gamma, policy_noise, noise_clip):
    """Both critics' squared errors against one target, the first critic's mean, and each critic's gradients:
    the target is the smaller target critic at the target actor's action plus noise (standard normal, scaled,
    clipped, then in action scales), the action clipped to the bounds, no bootstrap after a termination."""
    obs, next_obs, action, reward, terminated, noise = (np.asarray(x, np.float64) for x in (*batch, noise))
    low, high = (np.asarray(b, np.float64) for b in bounds)
    smoothing = np.clip(noise * policy_noise, -noise_clip, noise_clip) * (high - low) / 2
    next_action = np.clip(td3_actor(w["actor_target"], next_obs, bounds)[0] + smoothing, low, high)
    next_q = np.minimum(td3_critic(w["qf1_target"], next_obs, next_action)[0],
                        td3_critic(w["qf2_target"], next_obs, next_action)[0])
    target = reward + (1 - terminated) * gamma * next_q
    loss, grads, means = 0.0, {}, {}
    for name in ("qf1", "qf2"):
        q, inputs = td3_critic(w[name], obs, action)
        loss += ((q - target) ** 2).mean()
        grads[name] = relu_backward(as64_layers(w[name]), inputs, (2 * (q - target) / len(q))[:, None])[0]
        means[name] = q.mean()
    return loss, means["qf1"], grads


def td3_actor_loss_and_grads(w, obs, bounds):
    """Minus the first critic's mean value of the actor's action, and the actor's gradients through it."""
    obs = np.asarray(obs, np.float64)
    low, high = (np.asarray(b, np.float64) for b in bounds)
    action, squashed, actor_inputs = td3_actor(w["actor"], obs, bounds)
    q, critic_inputs = td3_critic(w["qf1"], obs, action)
    _, d_input = relu_backward(as64_layers(w["qf1"]), critic_inputs, -np.ones((len(q), 1)) / len(q))
    d_out = d_input[:, obs.shape[1]:] * (high - low) / 2 * (1 - squashed ** 2)  # through the scale and tanh
    return -q.mean(), relu_backward(as64_layers(w["actor"]), actor_inputs, d_out)[0]


def adam_layers(layers, grads, moments, count, learning_rate, betas=(0.9, 0.999), eps=1e-8):
    """One Adam step (bias-corrected, constant rate) on a network's layers; moments: [(m, v)] per array, updated."""
    out, arrays = [], [a for layer in as64_layers(layers) for a in layer]
    for i, (a, g) in enumerate(zip(arrays, (g for layer in grads for g in layer))):
        m, v = moments[i] if i < len(moments) else (np.zeros_like(a), np.zeros_like(a))
        m, v = betas[0] * m + (1 - betas[0]) * g, betas[1] * v + (1 - betas[1]) * g ** 2
        moments[i:i + 1] = [(m, v)]
        out.append(a - learning_rate * (m / (1 - betas[0] ** count)) / (np.sqrt(v / (1 - betas[1] ** count)) + eps))
    return list(zip(out[::2], out[1::2]))


def polyak(online, target, tau):
    """Each target array moved tau of the way to the online one."""
    return [(tau * k + (1 - tau) * tk, tau * b + (1 - tau) * tb)
            for (k, b), (tk, tb) in zip(as64_layers(online), as64_layers(target))]


# ---- SAC (sac_*.py): CleanRL's sac_continuous_action.py, step by step. The actor is [trunk layer, trunk layer,
# mean head, log-std head], each (kernel, bias), ReLU after each trunk layer; the critics as TD3's.
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def sac_actor(layers, obs, noise, bounds):
    """The tanh-squashed sample (mean + std * noise) in the bounds, its log-probability with tanh's correction,
    and what the backward pass needs."""
    (*trunk, (km, bm), (ks, bs)), (low, high) = as64_layers(layers), (np.asarray(b, np.float64) for b in bounds)
    h, inputs = np.asarray(obs, np.float64), []
    for k, b in trunk:
        inputs.append(h)
        h = np.maximum(h @ k + b, 0.0)
    raw = np.tanh(h @ ks + bs)
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (raw + 1)
    scale, noise = (high - low) / 2, np.asarray(noise, np.float64)
    y = np.tanh(h @ km + bm + np.exp(log_std) * noise)
    log_prob = (-0.5 * noise ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1) - np.log(scale * (1 - y ** 2) + 1e-6).sum(-1)
    return y * scale + (high + low) / 2, log_prob, (inputs, h, raw, log_std, y, scale, noise)


def sac_actor_backward(layers, cache, d_action, d_log_prob):
    """The actor's gradients from the gradients at its action and its log-probability (both through the sample)."""
    (*trunk, (km, _), (ks, _)), (inputs, h, raw, log_std, y, scale, noise) = as64_layers(layers), cache
    squash = scale * (1 - y ** 2)
    d_x = d_action * squash + d_log_prob[:, None] * 2 * y * squash / (squash + 1e-6)
    d_raw = (d_x * np.exp(log_std) * noise - d_log_prob[:, None]) * 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (1 - raw ** 2)
    grads, d_h = [(h.T @ d_x, d_x.sum(0)), (h.T @ d_raw, d_raw.sum(0))], d_x @ km.T + d_raw @ ks.T
    for i in reversed(range(len(trunk))):
        d_pre = d_h * ((inputs[i + 1] if i + 1 < len(inputs) else h) > 0)
        grads.insert(0, (inputs[i].T @ d_pre, d_pre.sum(0)))
        d_h = d_pre @ trunk[i][0].T
    return grads


def sac_critic_loss_and_grads(w, batch, noise, bounds, gamma, alpha):
    """TD3's critic loss with SAC's target: the smaller target critic at the actor's sampled next action, less alpha
    times its log-probability."""
    obs, next_obs, action, reward, terminated = (np.asarray(x, np.float64) for x in batch)
    next_action, next_log_prob, _ = sac_actor(w["actor"], next_obs, noise, bounds)
    next_q = np.minimum(td3_critic(w["qf1_target"], next_obs, next_action)[0],
                        td3_critic(w["qf2_target"], next_obs, next_action)[0]) - alpha * next_log_prob
    target = reward + (1 - terminated) * gamma * next_q
    loss, grads, means = 0.0, {}, {}
    for name in ("qf1", "qf2"):
        q, inputs = td3_critic(w[name], obs, action)
        loss += ((q - target) ** 2).mean()
        grads[name] = relu_backward(as64_layers(w[name]), inputs, (2 * (q - target) / len(q))[:, None])[0]
        means[name] = q.mean()
    return loss, means["qf1"], grads


def sac_actor_loss_and_grads(w, obs, noise, bounds, alpha):
    """alpha times the sample's log-probability less the smaller critic's value of it, and the actor's gradients."""
    obs = np.asarray(obs, np.float64)
    action, log_prob, cache = sac_actor(w["actor"], obs, noise, bounds)
    (q1, in1), (q2, in2) = td3_critic(w["qf1"], obs, action), td3_critic(w["qf2"], obs, action)
    n, d_action = len(obs), 0.0
    for q, inputs, name, chosen in ((q1, in1, "qf1", q1 <= q2), (q2, in2, "qf2", q2 < q1)):
        d_input = relu_backward(as64_layers(w[name]), inputs, (-chosen.astype(np.float64) / n)[:, None])[1]
        d_action = d_action + d_input[:, obs.shape[1]:]
    loss = (alpha * log_prob - np.minimum(q1, q2)).mean()
    return loss, sac_actor_backward(w["actor"], cache, d_action, np.full(n, alpha / n))


def sac_alpha_loss(log_alpha, w, obs, noise, bounds, target_entropy):
    """CleanRL's alpha loss, -(exp(log_alpha) * (log_prob + target_entropy)).mean(), which is also its gradient in
    log_alpha."""
    log_prob = sac_actor(w["actor"], obs, noise, bounds)[1]
    return -np.exp(log_alpha) * (log_prob + target_entropy).mean()
