"""No recompilation after the first iteration (benchback-rl's NNX code recompiled in its
second iteration because its accumulators changed shape between calls), and
torch.compile's mode none is the eager script."""

import collections

import pytest
from helpers import (COMPILED_TWINS, GYMNASIUM_SCRIPTS, ROOT, SCRIPTS, TINY, TINY_ARGS, load, refused_in_process, run_ok,
                     scalars, train_in_process)

JAX_SCRIPTS = [s for s in SCRIPTS if "torch" not in s]
GYMNAX_SCRIPTS = [s for s in SCRIPTS if s not in GYMNASIUM_SCRIPTS]


@pytest.fixture(scope="module")
def backend_compiles():
    """How many XLA compilations so far, from JAX's own monitoring events."""
    import jax

    count = [0]

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    return lambda: count[0]


def compiles_per_iteration(script, log_dir, count, **extra) -> list[int]:
    """Trains in this process; returns the compilation count at the end of each iteration."""
    seen = []

    def counting(m):
        class CountingLog(m.RunLog):
            def iteration(self, iteration, times, stats):
                seen.append(count())
                return super().iteration(iteration, times, stats)
        return CountingLog

    train_in_process(script, log_dir, counting, **extra)
    return seen


# DiscountingChain's reset state has weakly typed fields, which once made iteration 1 compile again
@pytest.mark.parametrize("script, env_id", [(s, "CartPole-v1") for s in JAX_SCRIPTS] + [
    (s, "DiscountingChain-bsuite") for s in JAX_SCRIPTS if s in GYMNAX_SCRIPTS])
def test_no_recompilation_after_first_iteration(script, env_id, tmp_path, backend_compiles):
    seen = compiles_per_iteration(script, tmp_path, backend_compiles, env_id=env_id)
    assert len(seen) == TINY_ARGS["num_iterations"]
    assert seen[0] > 0, "the listener saw no compilation at all"  # so the test can fail
    assert seen == [seen[0]] * len(seen), f"compilations counted at the end of each iteration: {seen}"


@pytest.mark.parametrize("script", GYMNAX_SCRIPTS)
def test_reset_state_is_strongly_typed(script):
    """A weakly typed field in the reset state comes back strongly typed from a step, so the jitted
    rollout (JAX) or env step (torch) would compile a second time; every supported env, traced only."""
    import jax

    m = load(script)
    for env_id in m.supported_env_ids():
        env, env_params = m.make_env(env_id)
        _, state = jax.eval_shape(lambda key: m.env_reset(key, env, env_params, 4), jax.random.key(0))
        weak = [jax.tree_util.keystr(path) for path, leaf in jax.tree_util.tree_leaves_with_path(state)
                if leaf.weak_type]
        assert not weak, f"{script} on {env_id}: weakly typed after reset: {weak}"


@pytest.fixture
def dynamo_graphs(monkeypatch, tmp_path):
    """How many graphs torch.compile has compiled so far (dynamo's own counter), from a cold cache."""
    import torch._dynamo

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()  # graph breaks counted by an earlier test are not this one's
    return lambda: torch._dynamo.utils.counters["stats"]["unique_graphs"]


TORCH_COMPILED = [("ppo_torch_compile.py", {"compile_mode": "default", "compile_scope": "grads"}, 2),
                  ("ppo_torch_compile.py", {"compile_mode": "default", "compile_scope": "grads+policy"}, 3),
                  ("ppo_torch_compile_gymnasium.py", {"compile_mode": "default", "compile_scope": "grads+policy"}, 3),
                  ("ppo_torch_agents.py", {"compile": True, "num_agents": 2}, 3),
                  # the Gaussian head: its sampling, log-probabilities and entropy compile as one graph too
                  ("ppo_torch_compile.py", {"compile_mode": "default", "compile_scope": "grads+policy",
                                            "env_id": "Pendulum-v1"}, 3),
                  ("ppo_torch_agents.py", {"compile": True, "num_agents": 2, "env_id": "Pendulum-v1"}, 3),
                  # the env in torch: the policy and env steps compile as one graph (Pendulum's with its normalization)
                  *(("ppo_torch_compile.py", {"compile_mode": "default", "compile_scope": "grads+policy", "env_id": e,
                                              "torch_env": True}, 3) for e in ("CartPole-v1", "Pendulum-v1"))]


@pytest.mark.parametrize("script, toggle, graphs", TORCH_COMPILED, ids=lambda x: str(x))
def test_torch_compile_no_graph_break_no_recompilation(script, toggle, graphs, tmp_path, dynamo_graphs):
    """What is compiled is each one graph (fullgraph: a break would be an error; none is counted
    either) and nothing compiles again after iteration 0."""
    import torch._dynamo

    seen = compiles_per_iteration(script, tmp_path, dynamo_graphs, **toggle)
    assert seen[0] == graphs, f"expected {graphs} graphs (GAE, the gradients, the policy (and env) step), got {seen[0]}"
    assert seen == [seen[0]] * len(seen), f"graphs compiled by the end of each iteration: {seen}"
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])


def test_torch_compile_whole_update_breaks_only_in_torch_optim(tmp_path, dynamo_graphs):
    """--compile-scope update compiles the whole minibatch step, which torch.optim breaks on purpose
    (zero_grad is skipped by dynamo; step's no_grad region): those breaks and no other, and no new
    graph after iteration 0."""
    import torch._dynamo

    seen = compiles_per_iteration("ppo_torch_compile.py", tmp_path, dynamo_graphs, compile_mode="default",
                                  compile_scope="update+policy")
    assert seen == [seen[0]] * len(seen), f"graphs compiled by the end of each iteration: {seen}"
    breaks = torch._dynamo.utils.counters["graph_break"]
    assert breaks and all("Optimizer.zero_grad" in why or "graph_break()" in why for why in breaks), dict(breaks)


@pytest.mark.parametrize("eager_script, compiled_script", COMPILED_TWINS.items())
def test_compile_mode_none_is_the_eager_script(eager_script, compiled_script, tmp_path):
    eager = scalars(run_ok(eager_script, *TINY, log_dir=tmp_path / "eager"))
    none = scalars(run_ok(compiled_script, *TINY, "--compile-mode", "none", log_dir=tmp_path / "none"))
    for tag in ("charts/episodic_return", "charts/episodic_length", "losses/value_loss", "losses/entropy",
                "losses/policy_loss", "losses/approx_kl", "losses/explained_variance"):
        assert [s for s, _ in eager[tag]] == [s for s, _ in none[tag]], tag
        # the same code and seed; only the learning rate's float32 tensor rounds differently
        assert [v for _, v in none[tag]] == pytest.approx([v for _, v in eager[tag]], rel=1e-3, abs=1e-6), tag


# %% the compiled off-policy scripts (issue 85): the policy step, each loss with its gradients and each optimizer's
# Adam step are each one graph (fullgraph: a break is an error), all compiled in iteration 0, where learning starts
# (learning-starts 40 of its 100 steps; DQN updates every 10 env steps), and nothing compiles again after it. Their
# host reads after iteration 0, counted as test_guards.py counts PPO's: the statistics' one fetch (a float() of each
# tensor or JAX array among them) and, with Gymnax's env, the action handed to JAX as a NumPy view at each step
# script: (env, graphs: the policy step's (DQN's greedy action; TD3's and SAC's: uniform, the actor's), the losses'
# (SAC's critics' and actor's twice: before log alpha has a gradient and after), Adam's (one per optimizer))
OFFPOLICY_COMPILED = {
    "dqn_torch_compile.py": ("CartPole-v1", 1 + 1 + 1), "td3_torch_compile.py": ("Pendulum-v1", 2 + 2 + 2),
    "sac_torch_compile.py": ("Pendulum-v1", 2 + 5 + 3)}
OFFPOLICY_TINY = dict(total_timesteps=400, log_frequency=100, learning_starts=40, buffer_size=400, batch_size=32,
                      compile_mode="default")


def offpolicy_compiled_run(script: str, log_dir, graphs, **changes) -> list:
    """Trains the script in this process (a private copy) with its host reads counted; per iteration: the graphs
    compiled by its end, its host reads (RunLog's own left out) and how many statistics it fetched."""
    from test_guards import counting_host_reads

    m = load(script, fresh=True)
    env_id, _ = OFFPOLICY_COMPILED[script]
    frequencies = {"train_frequency": 10, "target_network_frequency": 50} if script.startswith("dqn") else {}
    args = m.RunArgs(**{**OFFPOLICY_TINY, **frequencies, "env_id": env_id, **changes}, log_dir=str(log_dir))
    env = m.make_torch_env(env_id, m.torch_device()) if args.torch_env else m.make_env(env_id)
    seen, counts, active = [], collections.Counter(), [True]

    class Watching(m.RunLog):
        def iteration(self, iteration, times, stats):
            seen.append((graphs(), collections.Counter(counts), len(stats)))
            counts.clear()
            active[0] = False
            try:
                return super().iteration(iteration, times, stats)
            finally:
                active[0] = True

    writer = m.Writer(str(log_dir))
    with counting_host_reads(counts, active):
        m.train(args, *env, Watching(writer, args, "in-process", str(log_dir)))
    writer.close()
    return seen


@pytest.mark.parametrize("script, torch_env", [("dqn_torch_compile.py", True), ("td3_torch_compile.py", False),
                                               ("sac_torch_compile.py", True)], ids=lambda x: str(x))
def test_offpolicy_compiled_one_graph_each_no_break_no_new_graph(script, torch_env, tmp_path, dynamo_graphs):
    import torch._dynamo

    seen = offpolicy_compiled_run(script, tmp_path, dynamo_graphs, torch_env=torch_env)
    graphs = OFFPOLICY_COMPILED[script][1] + torch_env  # with the env in torch, its step too
    assert [g for g, _, _ in seen] == [graphs] * len(seen), f"graphs compiled by the end of each iteration: {seen}"
    assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
    steps = OFFPOLICY_TINY["log_frequency"]
    handover = collections.Counter({} if torch_env else {"numpy": steps})
    if script.startswith("dqn"):  # and DQN's each step: does every env explore? (then the network is skipped)
        handover["__bool__"] += steps
    for i, (_, reads, statistics) in enumerate(seen[1:], 1):
        fetch = reads - handover
        assert set(fetch) <= {"__float__", "jax array"} and fetch.total() <= statistics, f"iteration {i}: {dict(reads)}"
        assert reads - fetch == handover, f"iteration {i}: host reads {dict(reads)}"


OFFPOLICY_COMPILED_SCRIPTS = sorted(p.name for p in ROOT.glob("*_torch_compile*.py") if not p.name.startswith("ppo"))


@pytest.mark.parametrize("script", OFFPOLICY_COMPILED_SCRIPTS)
def test_cuda_graphs_without_cuda_are_refused(script, tmp_path, monkeypatch, capsys):
    """--compile-mode reduce-overhead replays CUDA graphs: where torch has no CUDA device (here), a compiled
    off-policy script says so in one line, exit 2, nothing written, rather than run another mode under its name. (A
    run of no env steps: one that is not refused ends at once, and fails here.)"""
    assert len(OFFPOLICY_COMPILED_SCRIPTS) == 6
    args = ["--compile-mode", "reduce-overhead", "--total-timesteps", "0"]
    line = refused_in_process(script, args, tmp_path / "runs", monkeypatch, capsys)
    assert "reduce-overhead replays CUDA graphs, and torch has no CUDA device here" in line
