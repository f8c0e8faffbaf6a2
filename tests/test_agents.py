"""The agent scripts (ppo_*_agents.py: N agents in one process) keep the contract per agent:
- agent i of an N-agent run computes what the single-agent script computes with seed + i and
  agent i's learning rate, entropy and clipping coefficients (a population sweep's): the same
  returns, lengths, losses and learning rate in every iteration (float tolerance: the agents'
  matmuls are batched), so every agent draws its own init, environments, actions and shuffles, and
  the same evaluation returns (what test_evaluation proves of the single-agent script's);
- from identical weights and a batch of its own each, consecutive update() calls leave each
  agent's weights where the NumPy reference leaves that agent alone: one agent's gradient never
  clips another's, nor do its advantages normalize another's, nor its Adam moments step another;
- a saved run goes on where each agent stopped (its weights and Adam state), reloads with its
  num_agents and evaluates every agent alike; seeds past what every framework takes refused."""

import dataclasses

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import AGENT_SCRIPTS, TINY, load, ran_in_process, read_json, run, scalars
from test_equivalence import ATOL_WEIGHTS, EPOCHS, STEPS, UPDATES, minibatches_of, random_batch, update_args
from test_saving import update_args as saving_args

SINGLE = {"ppo_linen_agents.py": "ppo_linen.py", "ppo_nnx_agents.py": "ppo_nnx.py",
          "ppo_torch_agents.py": "ppo_torch.py"}  # the single-agent script each one batches
# the Gaussian head and the normalization, per agent; Pendulum's episodes last 200 steps: 320 end one per env
CONTINUOUS = ("--env-id", "Pendulum-v1", "--num-steps", "32")
CASES = [(s, ()) for s in AGENT_SCRIPTS] + [("ppo_torch_agents.py", ("--compile",))]
# what the agents' runs are compared on; the env in torch draws each agent's fresh states from its generator
RUN_CASES = CASES + [(s, CONTINUOUS) for s in AGENT_SCRIPTS] + [("ppo_torch_agents.py", ("--torch-env", *CONTINUOUS))]
IDS = [" ".join((s, *t)) for s, t in CASES]
SEED, NUM_AGENTS = 5, 3
EVAL = ("--eval-episodes", "3")  # each agent's evaluation is the single-agent script's, proven in test_evaluation
RUN_AGENTS = 2  # agents of the runs compared with the single-agent script (each agent costs a single-agent run)
# each agent's learning rate, entropy and clipping coefficients, as a population sweep sets them
HYPER = {"learning_rate": (2.5e-4, 5e-4), "ent_coef": (0.01, 0.0), "clip_coef": (0.2, 0.3)}


def hyper_flags(agent: int | None = None) -> tuple[str, ...]:
    """Every agent's values as the agent scripts take them, or agent i's as the single-agent script does."""
    out = []
    for name, values in HYPER.items():
        flag = "--" + name.replace("_", "-")
        out += [f"{flag}s", *map(str, values)] if agent is None else [flag, str(values[agent])]
    return tuple(out)


PER_AGENT_TAGS = ["charts/learning_rate", "charts/episodic_return", "charts/episodic_length", *(
    f"losses/{name}" for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac",
                                  "explained_variance"))]


def test_every_agent_script_has_its_single_agent_script():
    assert set(AGENT_SCRIPTS) == set(SINGLE)


@pytest.fixture(scope="module")
def single_runs(tmp_path_factory):
    """The single-agent scripts with seeds SEED, SEED + 1, ...: made once, read by every case."""
    made = {}

    def get(script, seed, env=()):
        if (script, seed, env) not in made:
            log_dir = tmp_path_factory.mktemp(f"{script[4:-3]}-s{seed}")
            run_dir = ran_in_process(script, *TINY, "--seed", str(seed), *hyper_flags(seed - SEED), *env, *EVAL,
                                     log_dir=log_dir)
            made[script, seed, env] = scalars(run_dir), read_json(run_dir / "summary.json")
        return made[script, seed, env]

    return get


@pytest.fixture(scope="module")
def agent_runs(tmp_path_factory):
    """get(script, toggles): the run directory of a saved RUN_AGENTS-agent run with seed SEED, made once."""
    made = {}

    def get(script, toggles):
        if (script, toggles) not in made:
            made[script, toggles] = ran_in_process(script, *TINY, "--seed", str(SEED), "--num-agents",
                                                   str(RUN_AGENTS), *hyper_flags(), *toggles, *EVAL, "--save-model",
                                                   log_dir=tmp_path_factory.mktemp("agents"))
        return made[script, toggles]

    return get


@pytest.mark.parametrize("script,toggles", RUN_CASES, ids=[" ".join((s, *t)) for s, t in RUN_CASES])
def test_agent_i_is_the_single_agent_script_with_seed_plus_i(script, toggles, single_runs, agent_runs):
    run_dir = agent_runs(script, toggles)
    env = tuple(t for t in toggles if t != "--compile")  # the single-agent script it is compared with is eager
    summary, logged = read_json(run_dir / "summary.json"), scalars(run_dir)
    assert len(summary["charts/episodic_return_final_per_agent"]) == RUN_AGENTS
    for agent in range(RUN_AGENTS):
        alone, alone_summary = single_runs(SINGLE[script], SEED + agent, env)
        for tag in PER_AGENT_TAGS:
            ours = logged[f"{tag}/agent{agent}"]
            assert [s for s, _ in ours] == [s for s, _ in alone[tag]], (agent, tag)
            # explained variance is 1 - a ratio near 1: its rounding is the ratio's, relative to 1, not to itself
            tolerance = dict(rel=1e-4, abs=1e-4 if tag.endswith("explained_variance") else 1e-6)
            assert [v for _, v in ours] == pytest.approx([v for _, v in alone[tag]], **tolerance), (agent, tag)
        # a Gaussian's greedy action is its mean, a float: the batched matmuls' rounding grows over a
        # 200-step pendulum episode (4e-5 seen); an argmax stays exact
        assert summary["eval/episodic_returns"][agent] == pytest.approx(
            alone_summary["eval/episodic_returns"], rel=1e-3 if CONTINUOUS[1] in env else 0), (agent, "evaluation")
    # the mean tags are the means over agents
    for tag in ("charts/learning_rate", "losses/value_loss", "losses/entropy"):
        means = np.mean([[v for _, v in logged[f"{tag}/agent{a}"]] for a in range(RUN_AGENTS)], axis=0)
        assert [v for _, v in logged[tag]] == pytest.approx(means, rel=1e-5), tag


def agent_batches(rng, weights, size=None) -> list[list[dict]]:
    """Per agent, per update() call, a batch of its own: agent 0's gradient norms are above
    max_grad_norm, then below; agent 1's the other way round; agent 2's advantages sit far
    from the others' (a normalization over all agents' rows would move every agent's)."""
    errors = [(4.0, 0.05), (0.05, 4.0), (4.0, 4.0)]
    batches = [[random_batch(rng, weights, e, **({"size": size} if size else {})) for e in errors[a]]
               for a in range(NUM_AGENTS)]
    for batch in batches[2]:
        batch["advantages"] = batch["advantages"] * 3 + 5
    return batches


@pytest.mark.parametrize("script,toggles", CASES, ids=IDS)
def test_each_agent_updates_as_the_reference_alone(script, toggles):
    rng = np.random.default_rng(0)
    weights = ref.random_weights(rng, 6, (64, 64), 3)
    batches = agent_batches(rng, weights)
    args = dataclasses.replace(update_args(script), num_agents=NUM_AGENTS)
    adapter = adapter_for(script, compiled=bool(toggles))(script, weights, args)
    with adapter.drawn_permutations() as perms:
        after = [adapter.update([batches[a][u] for a in range(NUM_AGENTS)], iteration=u) for u in range(UPDATES)][-1]
    # drawn per epoch, agent after agent: each agent's own permutations
    assert len(perms) == UPDATES * EPOCHS * NUM_AGENTS
    for a in range(NUM_AGENTS):
        expected = ref.optimizer_steps(weights, minibatches_of(batches[a], perms[a::NUM_AGENTS]), args, STEPS)[-1].weights
        np.testing.assert_allclose(ref.flat(after[a]), ref.flat(expected), rtol=0, atol=ATOL_WEIGHTS,
                                   err_msg=f"{script}: agent {a} after {UPDATES} update() calls")


@pytest.mark.parametrize("script", AGENT_SCRIPTS)
def test_a_saved_run_goes_on_where_each_agent_stopped(script, tmp_path):
    """Saved after one update, loaded into other weights: the next update leaves each agent where
    the reference leaves it when that agent's Adam moments and step count go on and the schedule
    starts again (one full-batch step per update, as in test_saving.py)."""
    rng = np.random.default_rng(0)
    weights = ref.random_weights(rng, 4, (64, 64), 2)
    batches = agent_batches(rng, weights, size=256)
    args = dataclasses.replace(saving_args(script), num_agents=NUM_AGENTS)
    saving = adapter_for(script)(script, weights, args)
    saving.update([batches[a][0] for a in range(NUM_AGENTS)], iteration=0)
    saving.save(tmp_path)
    loading = adapter_for(script)(script, ref.random_weights(np.random.default_rng(99), 4, (64, 64), 2), args)
    loading.load(tmp_path)
    after = loading.update([batches[a][1] for a in range(NUM_AGENTS)], iteration=0)
    for a in range(NUM_AGENTS):
        first = ref.optimizer_steps(weights, batches[a][:1], args, total_steps=2)[0]
        second = ref.optimizer_steps(first.weights, batches[a][1:], args, total_steps=2, adam=first.adam)[0]
        np.testing.assert_allclose(ref.flat(after[a]), ref.flat(second.weights), rtol=0, atol=ATOL_WEIGHTS,
                                   err_msg=f"{script}: agent {a}, the first update after loading")


@pytest.mark.parametrize("script", AGENT_SCRIPTS)
def test_save_then_load_and_evaluate_every_agent(script, agent_runs, tmp_path):
    trained = agent_runs(script, ())
    summary = read_json(trained / "summary.json")
    returns = summary["eval/episodic_returns"]
    assert np.shape(returns) == (RUN_AGENTS, 3) and summary["eval/episodic_return"] == pytest.approx(np.mean(returns))
    loaded = ran_in_process(script, *TINY, "--seed", str(SEED), "--num-agents", str(RUN_AGENTS), "--num-iterations",
                            "0", *hyper_flags(), "--load-model", str(trained), *EVAL, log_dir=tmp_path / "eval")
    # the same greedy policies on the same fresh envs: the same returns, only if every agent's weights came back
    assert read_json(loaded / "summary.json")["eval/episodic_returns"] == returns
    logged = scalars(loaded)
    assert [[v for _, v in logged[f"eval/episodic_return/agent{a}"]] for a in range(RUN_AGENTS)] == returns
    proc = run(script, *TINY, "--num-agents", "3", "--load-model", str(trained), log_dir=tmp_path / "refused")
    assert proc.returncode == 2 and f"saved with num_agents {RUN_AGENTS}; this run has 3" in proc.stderr, \
        proc.stderr[-2000:]
    assert not (tmp_path / "refused").exists()
    if script == "ppo_torch_agents.py":  # rates per agent are Adam's param groups, one per agent
        proc = run(script, *TINY, "--num-agents", str(RUN_AGENTS), "--load-model", str(trained),
                   log_dir=tmp_path / "no")
        assert proc.returncode == 2 and "saved with rates_per_agent True; this run has False" in proc.stderr, \
            proc.stderr[-2000:]


@pytest.mark.parametrize("script", AGENT_SCRIPTS)
def test_agents_a_framework_cannot_seed_and_values_per_agent_it_cannot_use_are_refused(script, capsys):
    """check_args, which main() calls before anything is written: one line, exit 2."""
    m = load(script)
    for changes, words in (({"seed": 2**31 - 2, "num_agents": 3}, ["seed + num_agents - 1", "2147483648"]),
                           ({"num_agents": 0}, ["num_agents", "positive"]),
                           ({"num_agents": 2, "learning_rates": (1e-3,)}, ["learning_rates", "one value per agent",
                                                                          "1 given for 2 agents"]),
                           ({"num_agents": 2, "clip_coefs": (0.2, -0.1)}, ["clip_coef", "> 0", "-0.1"])):
        with pytest.raises(SystemExit) as exit_info:
            m.check_args(dataclasses.replace(m.RunArgs(), **changes))
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and all(w in err for w in words), err
    m.check_args(dataclasses.replace(m.RunArgs(), seed=2**31 - 3, num_agents=3))  # the last seed that fits


@pytest.mark.parametrize("script", AGENT_SCRIPTS)
def test_every_agent_evaluates_a_gaussian_beyond_the_bounds_as_the_single_agent_script(script, tmp_path):
    """A Gaussian whose mean is 3 at every observation (beyond Pendulum's bounds of 2), saved for every agent,
    loaded with no iteration: agent i evaluates to the returns the single-agent script gets from the same model
    with seed + i, which hands the env the mean itself (test_evaluation.py). A greedy action squeezed into
    a range changes the env's torque, and the returns."""
    weights = ref.random_weights(np.random.default_rng(0), 3, (64, 64), 1, continuous=True)
    kernel, bias = weights["actor"][-1]
    weights["actor"][-1] = (np.zeros_like(kernel), np.full_like(bias, 3.0))
    flags = ("--env-id", "Pendulum-v1", "--no-normalize", "--num-iterations", "0", *EVAL)
    returns = []
    for name, changes, seeds in ((script, dict(num_agents=RUN_AGENTS), [SEED]),
                                 (SINGLE[script], {}, [SEED + a for a in range(RUN_AGENTS)])):
        m, folder = load(name), tmp_path / name
        folder.mkdir()
        args = m.with_defaults(m.RunArgs(env_id="Pendulum-v1", normalize=False, **changes), True)
        saved = folder / adapter_for(name)(name, weights, args).save(folder)
        for seed in seeds:
            more = ("--num-agents", str(RUN_AGENTS)) if name == script else ()
            run_dir = ran_in_process(name, *TINY, *flags, *more, "--seed", str(seed), "--load-model", str(saved),
                                     log_dir=tmp_path / f"{name}-s{seed}")
            returns.append(read_json(run_dir / "summary.json")["eval/episodic_returns"])
    agents, singles = returns[0], returns[1:]
    for a in range(RUN_AGENTS):
        assert agents[a] == pytest.approx(singles[a], rel=1e-3), f"agent {a}"
