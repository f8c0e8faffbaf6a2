"""Craftax through the Gymnax scripts' environment helpers (one section, the same text in every
Gymnax script, so one script's helpers stand for all): what ends an episode, and which world an
env that finished starts next. tests/test_rollout.py checks whole rollouts of every script."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import GYMNAX_SCRIPTS, ROOT, load

ENV_ID = "Craftax-Classic-Symbolic-v1"


def helpers_section(script: str) -> str:
    """The Gymnax environment helpers: the section, up to make_torch_env (the envs in torch) where a torch script has it."""
    source = (ROOT / script).read_text()
    end = source.index("def make_torch_env") if "def make_torch_env" in source else source.index("# %% model")
    return source[source.index("# %% environment helpers"):end]


def test_gymnax_scripts_share_one_environment_helpers():
    """The same env, resets and statistics for every framework: the section is one text."""
    first = helpers_section(GYMNAX_SCRIPTS[0])
    for script in GYMNAX_SCRIPTS[1:]:
        assert helpers_section(script) == first, f"{script}'s environment helpers differ from {GYMNAX_SCRIPTS[0]}'s"


@pytest.fixture(scope="module")
def one_step():
    """Four envs, two fresh worlds per step (reset ratio 2), after one step from a reset where
    env 0 is at its time limit, env 1 has no health, env 2 is untouched, env 3 both."""
    m = load("ppo_linen.py", fresh=True)
    m.CRAFTAX_RESET_RATIO = 2
    env, env_params = m.make_env(ENV_ID)
    obs, state = jax.jit(lambda key: m.env_reset(key, env, env_params, 4))(jax.random.key(0))
    last_step = jnp.array([True, False, False, True])
    no_health = jnp.array([False, True, False, True])
    before = state.env.replace(
        timestep=jnp.where(last_step, env_params.max_timesteps - 1, state.env.timestep),
        player_health=jnp.where(no_health, 0, state.env.player_health).astype(state.env.player_health.dtype))
    step = jax.jit(lambda s: m.craftax_step(jax.random.key(1), s, jnp.zeros(4, jnp.int32), env, env_params, 4))
    return before, step(before)


def test_time_limit_truncates_and_death_terminates(one_step):
    _, (_, _, _, terminated, truncated, _) = one_step
    np.testing.assert_array_equal(terminated, [False, True, False, True])  # death wins over the time limit
    np.testing.assert_array_equal(truncated, [True, False, False, False])


def test_finished_envs_start_fresh_worlds(one_step):
    """The k-th env that finished gets world k mod 2: envs 0 and 1 start distinct fresh worlds,
    env 3 (the third to finish, more than the worlds made) starts env 0's; env 2 plays on."""
    before, (obs, after, _, _, _, final_obs) = one_step
    np.testing.assert_array_equal(after.timestep, [0, 0, before.timestep[2] + 1, 0])
    np.testing.assert_array_equal(after.player_health[np.array([0, 1, 3])], 9)  # a new game's full health
    assert not np.array_equal(after.map[0], before.map[0]) and not np.array_equal(after.map[1], before.map[1])
    assert not np.array_equal(after.map[0], after.map[1]), "two envs finishing together got the same world"
    np.testing.assert_array_equal(after.map[3], after.map[0])  # what the reset pool cannot avoid
    np.testing.assert_array_equal(obs[3], obs[0])
    np.testing.assert_array_equal(obs[2], final_obs[2])  # no reset: the observation is the step's own
    assert not np.array_equal(obs[0], final_obs[0])  # the final observation is the old world's
