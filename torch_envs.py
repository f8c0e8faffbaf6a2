"""Gymnax's classic-control envs written in torch: benchback's --torch-env.

As a PyTorch user whose env must be fast writes one (Isaac Lab, ManiSkill and MuJoCo Warp hand over torch
tensors): Gymnax's step_env again, formula for formula, on a (num_envs, ...) batch on torch's device, in ops
torch.compile can fuse with the policy step. Spaces and time limits are the Gymnax env's own; a fresh state
is uniform in Gymnax's box, drawn by torch's generator (another stream than JAX's: tests/test_torch_envs.py
says what is held equal and how).

One module, as Gymnax is one package for the JAX scripts: the torch scripts import it only under
--torch-env, so a script copied alone runs on Gymnax (and Gymnasium) without it. Copy it beside the
script to have the envs in torch too.

    env, env_params = make_env("CartPole-v1")            # the script's Gymnax env: spaces and time limit
    env = TorchEnv.make("CartPole-v1", env, env_params, torch.device("cpu"))
    obs, state = env.reset(num_envs=32)
    state, out = env.step(state, actions, env_params)    # out: EnvStep, as the script's env_step returns
"""

import math
from typing import Callable, NamedTuple

import torch


def cartpole(s, action):
    """CartPole-v1: one Euler step of cart and pole. Gymnax's reward, 1 unless the state before had
    fallen, is always 1 here: a fallen pole is reset in the step it falls."""
    gravity, masspole, total_mass, length, polemass_length = 9.8, 0.1, 1.0 + 0.1, 0.5, 0.05
    force_mag, tau, x_threshold, theta_threshold = 10.0, 0.02, 2.4, 12 * 2 * math.pi / 360
    x, x_dot, theta, theta_dot = s.unbind(-1)
    force = force_mag * action - force_mag * (1 - action)
    costheta, sintheta = torch.cos(theta), torch.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (length * (4.0 / 3.0 - masspole * costheta**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    x, x_dot = x + tau * x_dot, x_dot + tau * xacc
    theta, theta_dot = theta + tau * theta_dot, theta_dot + tau * thetaacc
    fallen = (x.abs() > x_threshold) | (theta.abs() > theta_threshold)
    return torch.stack([x, x_dot, theta, theta_dot], -1), torch.ones_like(x), fallen


def acrobot_dsdt(s, a):
    """The acrobot's equations of motion (the "book" version) under torque a: the state's time derivative."""
    m1, m2, l1, lc1, lc2, i1, i2, g = 1.0, 1.0, 1.0, 0.5, 0.5, 1.0, 1.0, 9.8
    theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + i2
    phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
    phi1 = (-m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2) + phi2)
    ddtheta2 = ((a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2)
                / (m2 * lc2**2 + i2 - d2**2 / d1))
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return torch.stack([dtheta1, dtheta2, ddtheta1, ddtheta2], -1)


def wrap(x, m=-math.pi, big_m=math.pi):
    """An angle into [m, big_m), as Gymnax wraps it."""
    diff, go_up, go_down = big_m - m, x < m, x >= big_m
    how_often = go_up * torch.ceil((m - x) / diff) + go_down * torch.floor((x - big_m) / diff + 1)
    return x - how_often * diff * go_down + how_often * diff * go_up


def acrobot(s, action):
    """Acrobot-v1: one RK4 step of dt 0.2 under the action's torque (-1, 0 or +1; no noise), angles wrapped,
    speeds clipped; reward -1 until the tip swings a link's length above the bar."""
    torque, dt = (action - 1).float(), 0.2
    k1 = acrobot_dsdt(s, torque)
    k2 = acrobot_dsdt(s + dt / 2.0 * k1, torque)
    k3 = acrobot_dsdt(s + dt / 2.0 * k2, torque)
    k4 = acrobot_dsdt(s + dt * k3, torque)
    ns = s + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    s = torch.stack([wrap(ns[:, 0]), wrap(ns[:, 1]), ns[:, 2].clamp(-4 * math.pi, 4 * math.pi),
                     ns[:, 3].clamp(-9 * math.pi, 9 * math.pi)], -1)
    up = -torch.cos(s[:, 0]) - torch.cos(s[:, 1] + s[:, 0]) > 1.0
    return s, -1.0 * ~up, up


def mountain_car(s, action):
    """MountainCar-v0: the car pushed left, not at all, or right; reward -1 until it is up the right hill."""
    position, velocity = s.unbind(-1)
    velocity = (velocity + (action - 1) * 0.001 - torch.cos(3 * position) * 0.0025).clamp(-0.07, 0.07)
    position = (position + velocity).clamp(-1.2, 0.6)
    velocity = velocity * ~((position == -1.2) & (velocity < 0))  # the left wall stops it
    goal = (position >= 0.5) & (velocity >= 0.0)
    return torch.stack([position, velocity], -1), torch.full_like(position, -1.0), goal


def mountain_car_continuous(s, action):
    """MountainCarContinuous-v0: the car pushed by a force in [-1, 1]; 100 for reaching the goal, less 0.1 x
    the force squared. Gymnax stops a car that rolls back at the goal (Gymnasium stops it at the left wall)."""
    position, velocity = s.unbind(-1)
    velocity = (velocity + action[:, 0] * 0.0015 - torch.cos(3 * position) * 0.0025).clamp(-0.07, 0.07)
    position = (position + velocity).clamp(-1.2, 0.6)
    velocity = velocity * ~((position >= 0.45) & (velocity < 0))
    goal = (position >= 0.45) & (velocity >= 0.0)
    return torch.stack([position, velocity], -1), -0.1 * action[:, 0]**2 + 100 * goal, goal


def pendulum(s, action):
    """Pendulum-v1: a torque in [-2, 2] on the pendulum; the reward is minus the cost of its angle from
    upright, its speed and the torque. It never terminates: its time limit truncates it."""
    g, m, l, dt = 10.0, 1.0, 1.0, 0.05  # noqa: E741 (Gymnax's names)
    theta, theta_dot, u = *s.unbind(-1), action[:, 0]
    reward = -((torch.remainder(theta + math.pi, 2 * math.pi) - math.pi)**2 + 0.1 * theta_dot**2 + 0.001 * u**2)
    theta_dot = (theta_dot + (3 * g / (2 * l) * torch.sin(theta) + 3.0 / (m * l**2) * u) * dt).clamp(-8.0, 8.0)
    return torch.stack([theta + theta_dot * dt, theta_dot], -1), reward, torch.zeros_like(theta, dtype=torch.bool)


def cos_sin(s, angles: int):
    """The observation of a state whose first entries are angles: the cos and sin of each, then the rest."""
    trig = [f(s[:, i]) for i in range(angles) for f in (torch.cos, torch.sin)]
    return torch.cat([torch.stack(trig, -1), s[:, angles:]], -1)


ENVS = {  # each one's dynamics, observation and start box (Gymnax's reset_env: uniform from low to high)
    "CartPole-v1": (cartpole, lambda s: s, (-0.05,) * 4, (0.05,) * 4),
    "Acrobot-v1": (acrobot, lambda s: cos_sin(s, 2), (-0.1,) * 4, (0.1,) * 4),
    "MountainCar-v0": (mountain_car, lambda s: s, (-0.6, 0.0), (-0.4, 0.0)),
    "MountainCarContinuous-v0": (mountain_car_continuous, lambda s: s, (-0.6, 0.0), (-0.4, 0.0)),
    "Pendulum-v1": (pendulum, lambda s: cos_sin(s, 1), (-math.pi, -1.0), (math.pi, 1.0)),
}


class Running(NamedTuple):
    """A running mean and variance (Gymnasium's RunningMeanStd) of torch tensors, merged batch by batch; the
    batch's population variance (correction=0)."""
    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def update(self, x):
        delta, n = x.mean(0) - self.mean, x.shape[0]
        total = self.count + n
        var = (self.var * self.count + x.var(0, correction=0) * n + delta**2 * self.count * n / total) / total
        return Running(self.mean + delta * n / total, var, total)


class Normalizer(NamedTuple):
    """CleanRL's NormalizeObservation and NormalizeReward (each clipped to +-10), over every env at once, on the
    env's device: the PPO scripts' Normalizer with torch tensors for statistics."""
    obs: Running
    reward: Running  # of the discounted returns, whose standard deviation scales the reward
    discounted: torch.Tensor  # each env's discounted return so far

    @classmethod
    def start(cls, obs_dim, num_envs, saved: dict | None = None, device=None):
        """Fresh statistics (mean 0, variance 1, count 1e-4, as Gymnasium's), or those a model was saved with."""
        full = lambda shape, value: torch.full(shape, value, device=device)
        stats = {"obs": Running(full((obs_dim,), 0.0), full((obs_dim,), 1.0), full((), 1e-4)),
                 "reward": Running(full((), 0.0), full((), 1.0), full((), 1e-4))}
        if saved:  # a saved model's, as tensors
            stats = {k: Running(*(torch.as_tensor(saved[k][f]).to(device) for f in Running._fields)) for k in stats}
        return cls(stats["obs"], stats["reward"], full((num_envs,), 0.0))

    def observe(self, obs, learn=True):
        """The statistics take the observations in first, then scale them; learn=False: frozen."""
        stats = self.obs.update(obs) if learn else self.obs
        return self._replace(obs=stats), torch.clamp((obs - stats.mean) / torch.sqrt(stats.var + 1e-8), -10, 10)

    def scale(self, reward, terminated, gamma):
        discounted = torch.where(terminated, 0.0, self.discounted * gamma) + reward  # cut by a termination only
        stats = self.reward.update(discounted)
        scaled = torch.clamp(reward / torch.sqrt(stats.var + 1e-8), -10, 10)
        return self._replace(reward=stats, discounted=discounted), scaled


class EnvState(NamedTuple):
    """The scripts' EnvState, field for field: no key (torch's generator draws), each env's physics and time step."""
    key: None
    env: tuple[torch.Tensor, torch.Tensor]  # (physics, elapsed steps)
    episode_return: torch.Tensor
    episode_length: torch.Tensor
    norm: Normalizer | None  # None: raw observations and rewards


class EnvStep(NamedTuple):
    """The scripts' EnvStep, field for field."""
    obs: torch.Tensor  # after auto-reset
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor  # before auto-reset: what a truncated step bootstraps from
    episode_return: torch.Tensor  # return of the episode that ended here, else 0
    episode_length: torch.Tensor


class TorchEnv(NamedTuple):
    """A Gymnax env in torch: its dynamics and observation, its start box on torch's device, and the Gymnax env
    whose spaces it has (and whose params, the time limit among them, the vector step takes)."""
    dynamics: Callable  # (states, actions) -> (next states, rewards, terminated)
    observe: Callable  # states -> observations
    low: torch.Tensor
    high: torch.Tensor
    clip: tuple[float, float] | None  # a continuous action's bounds
    gymnax: object

    @classmethod
    def make(cls, env_id: str, gymnax_env, env_params, device) -> "TorchEnv":
        """The torch twin of a Gymnax env (its id in ENVS; KeyError if it has none)."""
        dynamics, observe, low, high = ENVS[env_id]
        space = gymnax_env.action_space(env_params)
        clip = (float(space.low), float(space.high)) if hasattr(space, "low") else None  # a Box's
        low, high = torch.tensor(low, device=device), torch.tensor(high, device=device)
        return cls(dynamics, observe, low, high, clip, gymnax_env)

    def action_space(self, params):
        return self.gymnax.action_space(params)

    def observation_space(self, params):
        return self.gymnax.observation_space(params)

    def fresh(self, num_envs: int, generator=None):
        """num_envs fresh states, as Gymnax's reset_env draws them (another stream: torch's generator, or this one)."""
        # passed only when given: torch.rand with a generator takes no symbolic sizes, which torch.compile may make
        mine = {} if generator is None else {"generator": generator}
        draw = torch.rand(num_envs, len(self.low), device=self.low.device, **mine)
        return torch.lerp(self.low, self.high, draw)

    def normalizer(self, num_envs: int, saved: dict | None = None) -> Normalizer:
        """Fresh statistics for normalizing this env's observations and rewards (or a saved model's)."""
        return Normalizer.start(self.observe(self.low[None]).shape[-1], num_envs, saved, self.low.device)

    def reset(self, num_envs: int, norm: Normalizer | None = None, learn=True, generator=None):
        """Fresh envs: (observations, EnvState)."""
        physics = self.fresh(num_envs, generator)
        obs = self.observe(physics)
        zeros = lambda dtype=torch.float32: torch.zeros(num_envs, dtype=dtype, device=physics.device)
        if norm is not None:
            norm, obs = norm.observe(obs, learn)
        # three tensors, not one three times: torch.compile would guard on the aliasing and compile again
        return obs, EnvState(None, (physics, zeros(torch.int32)), zeros(), zeros(), norm)

    def step(self, state: EnvState, action, env_params, gamma=None, fresh=None):
        """The scripts' env_step in torch: every env steps, one that ended (terminated, or reached the time
        limit) starts a fresh episode in the same step, and the episode statistics (of the raw rewards) are
        kept on device. gamma: the discount of the returns that scale the rewards (None: the normalization's
        statistics stay frozen). fresh: the states new episodes start from (default: drawn now)."""
        physics, elapsed = state.env
        if self.clip is not None:  # the env gets the sampled action clipped to its bounds
            action = torch.clamp(action, *self.clip)
        physics, reward, terminated = self.dynamics(physics, action)
        elapsed = elapsed + 1
        truncated = elapsed >= env_params.max_steps_in_episode
        done = terminated | truncated
        final_obs = self.observe(physics)
        fresh = self.fresh(len(physics)) if fresh is None else fresh
        physics, elapsed = torch.where(done[:, None], fresh, physics), torch.where(done, 0, elapsed)
        obs = self.observe(physics)
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        norm = state.norm
        if norm is not None:
            norm, obs = norm.observe(obs, learn=gamma is not None)
            final_obs = norm.observe(final_obs, learn=False)[1]  # scaled as this step's observations, not learned from
            if gamma is not None:
                norm, reward = norm.scale(reward, terminated, gamma)
        step = EnvStep(obs, reward, terminated, truncated, final_obs,
                       torch.where(done, episode_return, 0.0), torch.where(done, episode_length, 0.0))
        state = EnvState(None, (physics, elapsed), torch.where(done, 0.0, episode_return),
                         torch.where(done, 0.0, episode_length), norm)
        return state, step
