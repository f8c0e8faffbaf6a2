#!/usr/bin/env bash
# bench.sh: benchback-rl's experiments, and ours, as one resumable sweep, every run in a fresh process.
set -euo pipefail
cd "$(dirname "$0")"

usage() {
  cat <<'EOF'
Usage: bash bench.sh [PRESET] [OPTIONS] [-- SCRIPT ARGS...]

Presets (default: sweep)
  sweep        warm-up, Experiments 1, 2 and 3 (benchback-rl's whole schedule with our variants),
               then the CPU-environment, env-scaling, many-agents and expensive-env experiments
  quick        exp1 on CartPole-v1 and Acrobot-v1, exp2 and cpuenv on CartPole-v1, small model,
               18 iterations, and envscale on CartPole-v1 at 16 and 128 envs (61 runs); then
               analyze.py
  warmup|exp1|exp2|exp3|cpuenv|envscale|agents|expensive|torchenv|cpucompile|tuning|continuous|continuous-learning|pixels|pixels-learning|dqn|dqn-learning|offpolicy|offpolicy-learning|offpolicy-cleanrl|tunesweep|profile|gpu|gpuscale
               one part of the schedule alone (tuning, the continuous, pixel, off-policy and GPU ones are not
               part of sweep, nor are tunesweep and profile)
    warmup   Acrobot-v1, small, one fully compiled run per framework (not analysed)
    exp1     every env x the frameworks as meant to run x 3 model sizes, timed asynchronously
    exp2     every env x every compile mode, small model, --sync-timing
    exp3     Acrobot-v1 x every compile mode x 3 model sizes, --sync-timing
    cpuenv   the envs with a CPU twin x {torch, linen} x {Gymnax, and Gymnasium stepped by each
             --vectorization that offers the env} x small and medium, --sync-timing, at the
             scripts' defaults and at CleanRL's (4 envs x 128 steps, 4 epochs of 4 minibatches,
             in subfolder cleanrl): is it the framework or the environment?
    envscale CartPole-v1 and Breakout-MinAtar x the cpuenv variants x --num-envs 8..2048, small,
             --sync-timing, 128 steps, one epoch of minibatches of 1024, 4 iterations: rollout
             throughput against the number of environments; and each env alone (env_alone.py:
             Gymnax, and the CPU twin stepped each way) with the same steps and counts
    agents   CartPole-v1 and Breakout-MinAtar x N agents in one process (--num-agents N for
             linen_agents, nnx_agents, torch_agents, torch_agents_compile; N from --agent-counts,
             in subfolder n<N>) x small, --sync-timing; and the baseline a user has today, one
             agent per process (linen, nnx, torch, torch_compile, in subfolder single): N of
             them one after another cost N times one
    expensive Craftax-Classic-Symbolic-v1 and Craftax-Symbolic-v1, and beside them in the same
             shuffled session three cheap envs (CartPole-v1, Breakout-MinAtar, Asterix-MinAtar),
             x the frameworks as meant to run x small and medium, --sync-timing, 20 iterations
             (or --iterations): does the framework still matter when the env dominates?
    torchenv the env in each framework's own language: CartPole-v1, Acrobot-v1 and Pendulum-v1 x
             linen and nnx on Gymnax, torch and torch_compile on Gymnax (through DLPack) and on the
             env written in torch (-torchenv), x small and medium, --sync-timing, 20 iterations (or
             --iterations); and each env alone (env_alone.py, in subfolder alone/envs<N>): Gymnax
             in one scan, Gymnax a call per step through DLPack, the torch env eager and compiled,
             at --num-envs 32, 256, 1024 and 4096 (or --env-counts)
    cpucompile the CPU-env regimes with compiled PyTorch beside eager: {torch, torch_compile,
             linen}_gymnasium, and torch_compile_gymnasium at --compile-scope update (-update: the
             policy step eager), on CartPole-v1 and Acrobot-v1 in Gymnasium's loop and through
             EnvPool (-envpool), on Pendulum-v1, HalfCheetah-v5 and Hopper-v5 (MuJoCo) in the loop,
             small, and on Atari's Breakout-v5 and Pong-v5 through EnvPool with the CNN at CleanRL's
             Atari batch (subfolder atari); --sync-timing, 20 iterations (or --iterations)
    tuning   the evidence for the scripts' defaults: CartPole-v1 x small and medium, --sync-timing,
             20 iterations (or --iterations); Linen and eager torch with XLA's CPU threading on and
             off, torch on one intra-op thread and with a passive OpenMP wait, and torch_compile at
             each --compile-scope: each setting in its own subfolder (see Settings)
    continuous  continuous actions: Pendulum-v1 and MountainCarContinuous-v0 x the frameworks as
             meant to run, and Pendulum-v1 and HalfCheetah-v5 x {torch, linen}_gymnasium stepped
             sync, async and by EnvPool, x small and medium, --sync-timing, 20 iterations (or
             --iterations); and both envs alone (env_alone.py), stepped each way, HalfCheetah also
             in MJX (MuJoCo in JAX)
    continuous-learning  the learning runs behind the continuous charts: Pendulum-v1 x the
             frameworks as meant to run, 100 iterations, and HalfCheetah-v5 x {torch,
             linen}_gymnasium for 1M env steps (122 iterations), small; --repeats 3
    pixels   learning from images: Breakout-MinAtar and Asterix-MinAtar x the frameworks as meant to
             run and {torch, linen}_gymnasium (sync) x cnn and small (the same env, CNN against MLP),
             and Atari's Breakout-v5 x {torch, linen}_gymnasium-envpool x cnn at CleanRL's Atari batch
             (8 envs x 128 steps, 4 epochs of 4 minibatches, in subfolder atari); --sync-timing, 20
             iterations (or --iterations)
    pixels-learning  the learning runs behind the pixel charts: Breakout-MinAtar x {linen, torch} x
             cnn, 300 iterations (2.5M env steps); --repeats 3
    dqn      DQN (docs/offpolicy.md): CartPole-v1 x every DQN script, the torch ones and the CPU-env
             twins with their buffer on the device and on the host (-host, CleanRL's NumPy buffer),
             the torch ones also on the env in torch (-torchenv), x an update every 1, 4 and 10 env steps
             (subfolders tf1, tf4, tf10) and 10 envs with an update per vector step (envs10), small, 25,000 env
             steps of which 10,000 before learning starts: time per 1,000 env steps with and
             without updates
    dqn-learning  the learning runs behind DQN's table: CartPole-v1 x every DQN script at CleanRL's
             defaults (500,000 env steps), small, and Breakout-MinAtar x {dqn_linen, dqn_torch} x cnn
             at CleanRL's Atari settings for 500,000 env steps (in subfolder breakout); --repeats 3
    offpolicy  TD3 and SAC (docs/offpolicy.md): Pendulum-v1 x every TD3 and SAC script, the torch ones
             with their buffer on the device and on the host (-host, CleanRL's NumPy buffer) and on the
             env in torch (-torchenv), small, 25,000 env steps of which 5,000 before learning starts
             (SAC's default): time per 1,000 env steps with and without updates, and the learning
             curves; --repeats 3
    offpolicy-learning  TD3 and SAC on MuJoCo: HalfCheetah-v5 x their CPU-env twins ({td3, sac} x
             {torch, linen}_gymnasium), small, at CleanRL's defaults for 200,000 env steps (TD3's
             first 25,000 and SAC's first 5,000 fill the buffer): the learning curves and the time per
             1,000 env steps; --repeats 3; with --cleanrl, CleanRL's td3_continuous_action.py,
             td3_continuous_action_jax.py and sac_continuous_action.py in the same shuffled repeats
    offpolicy-cleanrl  the same twins beside CleanRL's own three scripts in each shuffled repeat, 50,000
             env steps: each one's time per 1,000 env steps against its CleanRL counterpart's, pairs
             from one session; needs --cleanrl
    tunesweep a hyperparameter sweep as tune.py runs it (docs/tuning.md): CartPole-v1 and Pendulum-v1,
             small, 20 iterations (or --iterations) a trial, learning rate, entropy and clipping coefficients
             sampled at random (the sampler seeded by the repeat: every way runs the same configurations);
             N configurations (N from --agent-counts, default 16,64, in subfolder n<N>) as one process of
             N agents (tune.py --population N: linen_agents, nnx_agents, torch_agents,
             torch_agents_compile) and, for the largest N only, one process per trial (linen, nnx, torch:
             a smaller sweep is its first trials); a unit is one tune.py call into a folder named after the
             session, done once tune.py wrote its summary.json there
    profile  where the time goes (docs/profiling.md): the headline workloads with --profile, 6 iterations
             (3 and 4 traced): CartPole-v1 small x Linen, NNX, Equinox, PyTorch eager and compiled, each
             through Gymnax and with its env in torch (-torchenv); CartPole-v1 medium and Pendulum-v1
             small x Linen and PyTorch eager, compiled, and compiled with its env in torch;
             Breakout-MinAtar cnn x Linen and PyTorch eager and compiled; and CartPole-v1 on Gymnasium x
             {linen, torch, torch_compile}_gymnasium, small; and TD3 and SAC, 2,000 env steps learning from
             1,000 (the last 200 traced) on Pendulum-v1 x Linen and PyTorch eager, compiled, compiled with
             its env in torch, and on HalfCheetah-v5 x {linen, torch}_gymnasium; analyze.py reads their
             traces, not their times
    gpu      on a GPU: CartPole-v1 and Breakout-MinAtar x the frameworks as meant to run x 3 model
             sizes, the large model again at --matmul-precision tf32 (in subfolder tf32), and
             Craftax-Classic-Symbolic-v1, Pendulum-v1 (small) and Breakout-MinAtar (cnn) likewise;
             --sync-timing, 20 iterations (or --iterations)
    gpuscale the GPU's own regime: CartPole-v1, small, at --num-envs 32, 512 and 4096 (or --env-counts, in
             subfolder envs<N>) x Linen, and PyTorch with the env in torch compiled with it (CUDA graphs
             per step), compiled without CUDA graphs (-default-torchenv) and eager, and compiled
             through Gymnax; --sync-timing, 18 iterations (or --iterations)
  hosts        the answer on another CPU (docs/benchmark.md): one setup per regime of the decision table that
               decides something, each framework's pick there and its closest rival, --sync-timing, 20
               iterations (or --iterations) for PPO; in subfolders named after the regime: jax-env (CartPole-v1,
               Breakout-MinAtar), own-env (CartPole-v1, Pendulum-v1, PyTorch's env in torch), loop and envpool
               (CartPole-v1, Acrobot-v1 on Gymnasium and EnvPool), mujoco (HalfCheetah-v5), craftax
               (Craftax-Classic-Symbolic-v1), many-agents (16 agents on CartPole-v1), minatar-cnn
               (Breakout-MinAtar, the CNN), atari (Breakout-v5 at CleanRL's Atari batch), dqn-jax and dqn-cpu
               (CartPole-v1, an update every 10 env steps), td3 and sac (Pendulum-v1, 12,000 env steps that
               train); --repeats 3: about an hour and a half on 2 cores; analyze.py adds the decision table by host
  gpucheck     a smoke test of every CUDA path on any GPU machine, a few minutes (gpucheck.py:
               one line per check, into DIR/gpucheck.json too); exit 1 if a check fails

Options
  --out DIR          where runs go: DIR/<experiment>/r<repeat>/<run dir> (default: runs)
  --repeats N        repeat the schedule N times; repeat r runs with seed r (default: 1)
  --iterations N     --num-iterations for every run but envscale's (default: each script's, 100)
  --envs LIST        the envs of exp1 and exp2: a comma list of env ids, or benchback-rl (its 12,
                     default), extra (the Gymnax 1.0 envs it lacked), all; exp3 runs
                     only if the list has Acrobot-v1; cpuenv and envscale keep the listed
                     envs that have a CPU twin, expensive its listed envs; the warm-up always
                     runs
  --variants LIST    comma list of variants (see below) to run instead of each experiment's own;
                     agents, tuning and the continuous presets keep the listed ones of their own
  --models LIST      comma list of small,medium,large: keeps those of each experiment's sizes
  --experiments LIST comma list of experiments (a subset of the preset's)
  --env-counts LIST  envscale's --num-envs values, multiples of 8 (default: 8,16,...,2048); torchenv's
                     env-alone counts (default: 32,256,1024,4096); gpuscale's --num-envs (default: 32,512,4096)
  --agent-counts LIST agents' --num-agents values (default: 1,4,16,64); tunesweep's sweep sizes (default: 16,64)
  --order-seed N     the seed of the run order: each repeat runs its warm-up, then the rest of
                     its plan in a shuffled order, so that a drift of the machine's speed is not
                     confounded with the variant; same seed, same order, on any machine (default 0)
  --dry-run          print one line per planned run, the exact command, in the order they
                     would run; run nothing
  --resume           skip runs that already have a summary.json (a half-finished run is
                     rerun in a new directory, never overwritten); keep the same --order-seed
  --shard I/N        run only shard I of N (N GPUs or a SLURM job array); a shard takes whole
                     groups of runs that analyze.py pairs (an experiment's repeat on one env)
  --warm-cache       keep torch.compile's on-disk cache between runs (default: every run
                     compiles cold, in an empty TORCHINDUCTOR_CACHE_DIR)
  --cleanrl DIR      a CleanRL checkout (git clone https://github.com/vwxyzjn/cleanrl): dqn-learning,
                     offpolicy-learning and offpolicy-cleanrl run CleanRL's own scripts at the same
                     settings and seeds in each repeat's shuffled order (variants cleanrl_<script>:
                     cleanrl_dqn cleanrl_dqn_jax cleanrl_td3_continuous_action
                     cleanrl_td3_continuous_action_jax cleanrl_sac_continuous_action), their run
                     folders as CleanRL writes them, moved once they end into
                     <out>/<experiment>/r<repeat>/cleanrl-runs/<session>/
  --no-calibrate     skip the session's calibration (calibrate.py: a layer and a minibatch step
                     in each framework, timed in a few seconds, into DIR/sessions/<session>.json)
  --slurm N          submit the plan to SLURM instead of running it: a job array of N tasks
                     (task i runs --shard i/N with all the other options), then an analysis
                     job that starts once all of them have ended (analyze.py -> DIR/results);
                     task logs in DIR/slurm/; with --dry-run, print the two sbatch commands
  --sbatch "ARGS"    sbatch options for both jobs, e.g. "--partition=gpu --gpus=1 --time=24:00:00"
  -h, --help         this text
Everything after -- goes to every script, e.g. -- --num-envs 64

Variants: dqn_linen dqn_nnx dqn_equinox dqn_torch dqn_torch-host dqn_torch_compile dqn_torch_compile-host
  dqn_torch-torchenv dqn_torch_compile-torchenv dqn_torch_gymnasium dqn_torch_gymnasium-host
  dqn_torch_compile_gymnasium dqn_torch_compile_gymnasium-host dqn_linen_gymnasium
  dqn_linen_gymnasium-host (DQN)
  td3_linen td3_nnx td3_equinox td3_torch td3_torch-host td3_torch-torchenv td3_torch_compile
  td3_torch_compile-host td3_torch_compile-torchenv td3_torch_gymnasium td3_torch_gymnasium-host
  td3_torch_compile_gymnasium td3_torch_compile_gymnasium-host td3_linen_gymnasium
  td3_linen_gymnasium-host, and sac_ the same (TD3 and SAC)
  linen linen-nojit nnx nnx-nojit nnx_cached equinox equinox-nojit torch
  torch-nojitenv torch-torchenv torch_compile torch_compile-default torch_compile-reduce-overhead
  torch_compile-default-torchenv
  torch_compile-max-autotune torch_compile-torchenv torch_gymnasium torch_gymnasium-vector
  torch_gymnasium-envpool torch_gymnasium-async torch_compile_gymnasium torch_compile_gymnasium-vector
  torch_compile_gymnasium-envpool torch_compile_gymnasium-async torch_compile_gymnasium-update
  torch_compile_gymnasium-envpool-update linen_gymnasium linen_gymnasium-vector
  linen_gymnasium-envpool linen_gymnasium-async linen_gymnasium-nojit
  linen_agents nnx_agents torch_agents torch_agents_compile (with --num-agents: agents)
  env-gymnax env-sync env-async env-vector env-envpool env-mjx env-torch env-torch-compile
  env-gymnax-dlpack (env_alone.py: the env alone, no model)
  torch_compile-grads torch_compile-grads+policy torch_compile-update torch_compile-update+policy
Settings (tuning's subfolders: the environment each run starts with)
  xla-n        XLA_FLAGS=--xla_cpu_multi_thread_eigen=true   XLA's matrix library on every core
  xla-1        XLA_FLAGS=--xla_cpu_multi_thread_eigen=false  on the calling thread only
  torch-1      OMP_NUM_THREADS=1                             torch on one intra-op thread
  omp-passive  OMP_WAIT_POLICY=PASSIVE                       OpenMP threads sleep instead of spinning
Each invocation is a session: its runs record BENCHBACK_SESSION (set it to join an earlier
one), and it first runs the calibration, so that analyze.py pairs runs of one session only and
shows what the machine was in each.
The plan, in the order it runs, goes to DIR/plan.txt (with its seed) before the first run.
Failures are logged to DIR/failures.log and the sweep goes on; the exit code is 1 if any
run failed, 130 if interrupted.
EOF
}

BENCHBACK_RL_ENVS=(CartPole-v1 Acrobot-v1 MountainCar-v0 DiscountingChain-bsuite MemoryChain-bsuite
                   UmbrellaChain-bsuite BernoulliBandit-misc GaussianBandit-misc Asterix-MinAtar
                   Breakout-MinAtar Freeway-MinAtar SpaceInvaders-MinAtar)
EXTRA_ENVS=(Seaquest-MinAtar Catch-bsuite DeepSea-bsuite SimpleBandit-bsuite FourRooms-misc
            MetaMaze-misc Pong-misc)
TWIN_ENVS=(CartPole-v1 Acrobot-v1 MountainCar-v0 Asterix-MinAtar Breakout-MinAtar Freeway-MinAtar
           SpaceInvaders-MinAtar Seaquest-MinAtar)                    # those with a Gymnasium twin
MODELS=(small medium large)
FRAMEWORKS=(linen nnx_cached equinox torch_compile)                  # warm-up: each fully compiled
AS_MEANT=(linen nnx nnx_cached equinox torch torch_compile)          # Experiment 1
COMPILE_MODES=(linen-nojit linen nnx-nojit nnx nnx_cached equinox     # Experiments 2 and 3
               torch-nojitenv torch torch_compile torch_compile-default)
CPU_ENV_VARIANTS=(torch_gymnasium torch_gymnasium-vector torch_gymnasium-envpool torch                # cpuenv and
                  linen_gymnasium linen_gymnasium-vector linen_gymnasium-envpool linen)                # envscale
ENV_ALONE=(env-gymnax env-sync env-vector env-envpool)  # envscale: each env alone, stepped each way
CONTINUOUS_ENVS=(Pendulum-v1 MountainCarContinuous-v0)  # continuous actions in Gymnax, twinned in Gymnasium
MUJOCO_ENVS=(HalfCheetah-v5 Hopper-v5 Walker2d-v5)       # MuJoCo's C engine: the CPU-env scripts only
VECTOR_ENVS=(CartPole-v1)  # the scripts' VECTORIZATIONS (async: every env)
ENVPOOL_ENVS=(CartPole-v1 Acrobot-v1 MountainCar-v0 Pendulum-v1 MountainCarContinuous-v0 HalfCheetah-v5 Hopper-v5 Walker2d-v5 Breakout-v5 Pong-v5)
ATARI_ENVS=(Breakout-v5 Pong-v5)  # EnvPool only
CONTINUOUS_CPU=(torch_gymnasium torch_gymnasium-async torch_gymnasium-envpool                # continuous
                linen_gymnasium linen_gymnasium-async linen_gymnasium-envpool)
HALFCHEETAH_ITERATIONS=122  # continuous-learning: 1M env steps of 32 envs x 256 steps
PIXEL_ENVS=(Breakout-MinAtar Asterix-MinAtar)  # pixels: MinAtar's images, in JAX and on the CPU
PIXELS_CPU=(torch_gymnasium linen_gymnasium)
ATARI_ARGS="--num-envs,8,--num-steps,128,--num-minibatches,4,--update-epochs,4"  # CleanRL ppo_atari_envpool.py's
PIXELS_LEARNING_ITERATIONS=300  # pixels-learning: 2.5M env steps of 32 envs x 256 steps
CLEANRL_ARGS="--num-envs,4,--num-steps,128,--num-minibatches,4,--update-epochs,4"  # CleanRL ppo.py's defaults
ENV_COUNTS=(8 16 32 64 128 256 512 1024 2048)                             # envscale
AGENT_VARIANTS=(linen_agents nnx_agents torch_agents torch_agents_compile)  # agents: N in one process
ONE_AGENT=(linen nnx torch torch_compile)                                   # agents: one per process
AGENT_COUNTS=(1 4 16 64)
SWEEP_ONE_BY_ONE=(linen nnx torch)  # tunesweep: a process per trial; and AGENT_VARIANTS, a process per sweep
SWEEP_SIZES=(16 64)
SWEEP_ENVS=(CartPole-v1 Pendulum-v1)
SWEEP_SPACE=(learning_rate=log:1e-4:3e-3 ent_coef=float:0:0.02 clip_coef=float:0.1:0.3)  # each agent's own values
SWEEP_ITERATIONS=20
TORCH_ENV_ENVS=(CartPole-v1 Acrobot-v1 MountainCar-v0 Pendulum-v1 MountainCarContinuous-v0)  # --torch-env's
OWN_ENV_ENVS=(CartPole-v1 Acrobot-v1 Pendulum-v1)                                          # torchenv
OWN_ENV_VARIANTS=(linen nnx torch torch_compile torch-torchenv torch_compile-torchenv)
OWN_ENV_ALONE=(env-gymnax env-gymnax-dlpack env-torch env-torch-compile)
OWN_ENV_COUNTS=(32 256 1024 4096)
GPU_SCALE=(linen torch_compile-torchenv torch_compile-default-torchenv torch-torchenv torch_compile)  # gpuscale
GPU_COUNTS=(32 512 4096)
COMPILED_CPU=(torch_gymnasium torch_compile_gymnasium torch_compile_gymnasium-update linen_gymnasium)  # cpucompile
COMPILED_ENVPOOL=(torch_gymnasium-envpool torch_compile_gymnasium-envpool torch_compile_gymnasium-envpool-update
                  linen_gymnasium-envpool)
CRAFTAX_ENVS=(Craftax-Classic-Symbolic-v1 Craftax-Symbolic-v1)
EXPENSIVE_ENVS=(CartPole-v1 Breakout-MinAtar Asterix-MinAtar "${CRAFTAX_ENVS[@]}")  # cheap ones as the yardstick
TUNING=(linen:xla-n linen:xla-1 torch:xla-n torch:xla-1 torch:torch-1 torch:omp-passive    # tuning: variant:setting
        torch_compile-grads:xla-n torch_compile-grads+policy:xla-n torch_compile-update:xla-n
        torch_compile-update+policy:xla-n torch_compile-grads:xla-1)
DQN=(dqn_linen dqn_nnx dqn_equinox dqn_torch dqn_torch-host dqn_torch_compile dqn_torch_compile-host  # dqn
     dqn_torch-torchenv dqn_torch_compile-torchenv
     dqn_torch_gymnasium dqn_torch_gymnasium-host dqn_torch_compile_gymnasium dqn_torch_compile_gymnasium-host
     dqn_linen_gymnasium dqn_linen_gymnasium-host)
DQN_LEARNING=(dqn_linen dqn_nnx dqn_equinox dqn_torch dqn_torch_compile dqn_torch_gymnasium    # dqn-learning
              dqn_linen_gymnasium)
TRAIN_FREQUENCIES=(1 4 10)   # dqn: the update-to-data ratio, one update every k env steps
DQN_STEPS=25000              # dqn: 10,000 steps of filling the buffer, then 15 iterations that train
DQN_ENVS=10                  # dqn: envs stepped at once (PureJaxRL's DQN), an update per vector step
DQN_PIXELS=(dqn_linen dqn_torch)  # dqn-learning on Breakout-MinAtar's CNN, at CleanRL's Atari settings
OFFPOLICY=(td3_linen td3_nnx td3_equinox td3_torch td3_torch-host td3_torch-torchenv                # offpolicy
           td3_torch_compile td3_torch_compile-host td3_torch_compile-torchenv
           sac_linen sac_nnx sac_equinox sac_torch sac_torch-host sac_torch-torchenv
           sac_torch_compile sac_torch_compile-host sac_torch_compile-torchenv)
OFFPOLICY_ARGS="--total-timesteps,25000,--learning-starts,5000"  # 20 iterations that train, 4 that fill
OFFPOLICY_LEARNING=(td3_torch_gymnasium td3_torch_compile_gymnasium td3_linen_gymnasium    # on MuJoCo
                    sac_torch_gymnasium sac_torch_compile_gymnasium sac_linen_gymnasium)
OFFPOLICY_LEARNING_ARGS="--total-timesteps,200000"  # the issue's least; each script's CleanRL learning-starts
OFFPOLICY_CLEANRL_ARGS="--total-timesteps,50000"  # offpolicy-cleanrl: TD3 trains for 25 iterations, SAC for 45
OFFPOLICY_LEARNING_CLEANRL=(cleanrl_td3_continuous_action cleanrl_td3_continuous_action_jax  # with --cleanrl
                            cleanrl_sac_continuous_action)
DQN_LEARNING_CLEANRL=(cleanrl_dqn cleanrl_dqn_jax)  # with --cleanrl, on CartPole-v1
CLEANRL_RUNS=cleanrl-runs  # analyze.py reads CleanRL's run folders below a folder of this name
PROFILE_ARGS="--profile,--num-iterations,6"  # profile: iterations 3 and 4 traced, 5 and 6 untraced beside them
PROFILE_TORCH=(torch torch_compile torch_compile-torchenv)  # profile: PyTorch eager and compiled, and on its own env
PROFILE_OFFPOLICY=(linen torch torch_compile torch_compile-torchenv)  # profile: TD3's and SAC's on Gymnax's Pendulum
PROFILE_OFFPOLICY_ARGS="--profile,--total-timesteps,2000,--learning-starts,1000,--log-frequency,100"  # 2 of 20 traced
DQN_PIXELS_ARGS="--total-timesteps,500000,--learning-rate,1e-4,--buffer-size,100000,--batch-size,32,--train-frequency,4,--target-network-frequency,1000,--learning-starts,20000,--end-e,0.01,--exploration-fraction,0.1"
MIN_ITERATIONS=18  # analyze.py's steady state: iterations 8..end, at least 10 of them
# hosts: per regime, each framework's pick in the decision table and its closest rival (issue 90)
HOSTS_JAX_ENV=(linen nnx torch_compile)
HOSTS_OWN_ENV=(linen nnx torch-torchenv torch_compile-torchenv)
HOSTS_LOOP=(linen_gymnasium torch_gymnasium torch_compile_gymnasium)
HOSTS_ENVPOOL=(linen_gymnasium-envpool torch_gymnasium-envpool torch_compile_gymnasium-envpool-update)
HOSTS_MUJOCO=(linen_gymnasium torch_gymnasium torch_compile_gymnasium-update)
HOSTS_CRAFTAX=(linen torch_compile)
HOSTS_AGENTS=(nnx_agents linen_agents torch_agents_compile)
HOSTS_CNN=(nnx_cached linen torch_compile)
HOSTS_ATARI=(linen_gymnasium-envpool torch_gymnasium-envpool)
HOSTS_DQN=(dqn_linen dqn_torch-host dqn_torch_compile)
HOSTS_DQN_CPU=(dqn_linen_gymnasium-host dqn_torch_gymnasium-host)
HOSTS_TD3=(td3_linen td3_nnx td3_torch_compile)
HOSTS_SAC=(sac_linen sac_torch_compile sac_torch-host)
HOSTS_AGENT_COUNT=16
HOSTS_OFFPOLICY_ARGS="--total-timesteps,17000,--learning-starts,5000"  # 12 iterations that train: a steady state
PYTHON=${PYTHON:-python}

setting_env() {  # the environment assignments of a tuning setting
  case $1 in
    xla-n) echo "XLA_FLAGS=--xla_cpu_multi_thread_eigen=true" ;;
    xla-1) echo "XLA_FLAGS=--xla_cpu_multi_thread_eigen=false" ;;
    torch-1) echo "OMP_NUM_THREADS=1" ;;
    omp-passive) echo "OMP_WAIT_POLICY=PASSIVE" ;;
    *) return 1 ;;
  esac
}

# the script and flags of a variant; the scripts name their run directories after it
variant_command() {
  case $1 in
    linen) echo "ppo_linen.py" ;;
    linen-nojit) echo "ppo_linen.py --no-jit" ;;
    nnx) echo "ppo_nnx.py" ;;
    nnx-nojit) echo "ppo_nnx.py --no-jit" ;;
    nnx_cached) echo "ppo_nnx_cached.py" ;;
    equinox) echo "ppo_equinox.py" ;;
    equinox-nojit) echo "ppo_equinox.py --no-jit" ;;
    torch) echo "ppo_torch.py" ;;
    torch-nojitenv) echo "ppo_torch.py --no-jit-env" ;;
    torch-torchenv) echo "ppo_torch.py --torch-env" ;;
    torch_compile-torchenv) echo "ppo_torch_compile.py --torch-env" ;;
    torch_compile-default-torchenv) echo "ppo_torch_compile.py --compile-mode default --torch-env" ;;
    torch_compile) echo "ppo_torch_compile.py" ;;
    torch_compile-default|torch_compile-reduce-overhead|torch_compile-max-autotune)
      echo "ppo_torch_compile.py --compile-mode ${1#torch_compile-}" ;;
    torch_compile-grads|torch_compile-grads+policy|torch_compile-update|torch_compile-update+policy)
      echo "ppo_torch_compile.py --compile-scope ${1#torch_compile-}" ;;
    torch_gymnasium) echo "ppo_torch_gymnasium.py" ;;
    torch_gymnasium-vector|torch_gymnasium-envpool|torch_gymnasium-async) echo "ppo_torch_gymnasium.py --vectorization ${1#*-}" ;;
    torch_compile_gymnasium) echo "ppo_torch_compile_gymnasium.py" ;;
    torch_compile_gymnasium-vector|torch_compile_gymnasium-envpool|torch_compile_gymnasium-async)
      echo "ppo_torch_compile_gymnasium.py --vectorization ${1#*-}" ;;
    torch_compile_gymnasium-update) echo "ppo_torch_compile_gymnasium.py --compile-scope update" ;;
    torch_compile_gymnasium-envpool-update)
      echo "ppo_torch_compile_gymnasium.py --vectorization envpool --compile-scope update" ;;
    linen_gymnasium) echo "ppo_linen_gymnasium.py" ;;
    linen_gymnasium-vector|linen_gymnasium-envpool|linen_gymnasium-async) echo "ppo_linen_gymnasium.py --vectorization ${1#*-}" ;;
    linen_gymnasium-nojit) echo "ppo_linen_gymnasium.py --no-jit" ;;
    env-gymnax|env-sync|env-async|env-vector|env-envpool|env-mjx|env-torch|env-torch-compile|env-gymnax-dlpack)
      echo "env_alone.py --backend ${1#env-}" ;;
    linen_agents|nnx_agents|torch_agents) echo "ppo_$1.py" ;;
    dqn_linen|dqn_nnx|dqn_equinox|dqn_torch|dqn_torch_compile|dqn_torch_gymnasium|dqn_torch_compile_gymnasium|dqn_linen_gymnasium) echo "$1.py" ;;
    td3_linen|td3_nnx|td3_equinox|td3_torch|td3_torch_compile|td3_torch_gymnasium|td3_torch_compile_gymnasium|td3_linen_gymnasium) echo "$1.py" ;;
    sac_linen|sac_nnx|sac_equinox|sac_torch|sac_torch_compile|sac_torch_gymnasium|sac_torch_compile_gymnasium|sac_linen_gymnasium) echo "$1.py" ;;
    dqn_*-host|td3_*-host|sac_*-host) echo "${1%-host}.py --buffer host" ;;
    dqn_*-torchenv|td3_*-torchenv|sac_*-torchenv) echo "${1%-torchenv}.py --torch-env" ;;
    torch_agents_compile) echo "ppo_torch_agents.py --compile" ;;
    cleanrl_*) [[ -f $cleanrl/cleanrl/${1#cleanrl_}.py ]] && echo "$cleanrl/cleanrl/${1#cleanrl_}.py" ;;  # its own
    *) return 1 ;;
  esac
}

die() { echo "bench.sh: $*" >&2; exit 2; }
offers() {  # whether variant $1 can step env $2: a vectorization offers only some envs
  case $1 in
    *-vector) contains "$2" "${VECTOR_ENVS[@]}" ;;
    *-envpool|*-envpool-*) contains "$2" "${ENVPOOL_ENVS[@]}" ;;
    env-mjx) [[ $2 == HalfCheetah-v5 ]] ;;  # env_alone.py's MJX line
    *-torchenv|env-torch|env-torch-compile) contains "$2" "${TORCH_ENV_ENVS[@]}" ;;  # the envs written in torch
    env-gymnax|env-gymnax-dlpack) ! contains "$2" "${MUJOCO_ENVS[@]}" "${ATARI_ENVS[@]}" ;;
    dqn_*) ! contains "$2" "${CONTINUOUS_ENVS[@]}" "${MUJOCO_ENVS[@]}" "${ATARI_ENVS[@]}" ;;  # discrete, a Gymnax id
    td3_*_gymnasium*|sac_*_gymnasium*) contains "$2" Pendulum-v1 "${MUJOCO_ENVS[@]}" ;;  # a Gymnasium (MuJoCo) id
    td3_*|sac_*) contains "$2" "${CONTINUOUS_ENVS[@]}" ;;  # continuous, a Gymnax id
    *) ! contains "$2" "${ATARI_ENVS[@]}" ;;
  esac
}
split() { tr ',' ' ' <<<"$1"; }
contains() { local x=$1; shift; for y in "$@"; do [[ $x == "$y" ]] && return 0; done; return 1; }

preset=sweep out=runs repeats=1 iterations="" envs_opt="" variants_opt="" models_opt=""
experiments_opt="" counts_opt="" agent_counts_opt="" order_seed=0 dry_run=0 resume=0 shard="0/1" warm_cache=0 extra=() slurm_tasks="" sbatch_args=""
calibrate=1 cleanrl=""
if [[ $# -gt 0 && $1 != -* ]]; then preset=$1; shift; fi
argv=("$@")  # what each SLURM task is given again
while [[ $# -gt 0 ]]; do
  case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --repeats) repeats=${2:-}; shift 2 ;;
    --iterations) iterations=${2:-}; shift 2 ;;
    --envs) envs_opt=${2:?--envs needs a list}; shift 2 ;;
    --variants) variants_opt=${2:?--variants needs a list}; shift 2 ;;
    --models) models_opt=${2:?--models needs a list}; shift 2 ;;
    --experiments) experiments_opt=${2:?--experiments needs a list}; shift 2 ;;
    --env-counts) counts_opt=${2:?--env-counts needs a list}; shift 2 ;;
    --agent-counts) agent_counts_opt=${2:?--agent-counts needs a list}; shift 2 ;;
    --order-seed) order_seed=${2:-}; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --resume) resume=1; shift ;;
    --shard) shard=${2:-}; shift 2 ;;
    --warm-cache) warm_cache=1; shift ;;
    --no-calibrate) calibrate=0; shift ;;
    --cleanrl) cleanrl=${2:?--cleanrl needs the folder of a CleanRL checkout}; shift 2 ;;
    --slurm) slurm_tasks=${2:-}; shift 2 ;;
    --sbatch) sbatch_args=${2?--sbatch needs its options in one argument}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

[[ $order_seed =~ ^[0-9]+$ ]] || die "--order-seed must be a non-negative integer, got '$order_seed'"
[[ $repeats =~ ^[1-9][0-9]*$ ]] || die "--repeats must be a positive integer, got '$repeats'"
[[ -z $iterations || $iterations =~ ^[1-9][0-9]*$ ]] || die "--iterations must be a positive integer, got '$iterations'"
[[ $shard =~ ^([0-9]+)/([1-9][0-9]*)$ ]] || die "--shard must be I/N with 0 <= I < N, got '$shard'"
shard_i=${BASH_REMATCH[1]} shard_n=${BASH_REMATCH[2]}
((shard_i < shard_n)) || die "--shard must be I/N with 0 <= I < N, got '$shard'"
[[ $preset != offpolicy-cleanrl || -n $cleanrl ]] ||
  die "offpolicy-cleanrl runs CleanRL's own scripts beside ours: give --cleanrl DIR (a CleanRL checkout)"
if [[ -n $cleanrl ]]; then  # absolute: its runs start in a folder of their own
  [[ -f $cleanrl/cleanrl/dqn.py ]] ||
    die "--cleanrl: no $cleanrl/cleanrl/dqn.py: give the folder of a CleanRL checkout (github.com/vwxyzjn/cleanrl)"
  cleanrl=$(cd "$cleanrl" && pwd)
fi
if [[ -n $slurm_tasks ]]; then
  [[ $slurm_tasks =~ ^[1-9][0-9]*$ ]] || die "--slurm must be a positive number of tasks, got '$slurm_tasks'"
  ((shard_n == 1)) || die "--slurm makes its own shards: drop --shard"
  ((dry_run)) || command -v sbatch >/dev/null ||
    die "--slurm needs sbatch on PATH: run bench.sh on a SLURM cluster's login node"
fi

case $preset in
  sweep) experiments=(warmup exp1 exp2 exp3 cpuenv envscale agents expensive torchenv cpucompile) ;;
  quick) experiments=(exp1 exp2 cpuenv envscale); [[ -n $iterations ]] || iterations=$MIN_ITERATIONS ;;
  warmup|exp1|exp2|exp3|cpuenv|envscale|agents|expensive|torchenv|cpucompile|tuning|continuous|continuous-learning|pixels|pixels-learning|dqn|dqn-learning|offpolicy|offpolicy-learning|offpolicy-cleanrl|tunesweep|profile|gpu|gpuscale|hosts) experiments=("$preset") ;;
  gpucheck) mkdir -p "$out"; exec "$PYTHON" gpucheck.py --log-dir "$out/gpucheck" --out "$out/gpucheck.json" ;;
  *) die "unknown preset '$preset': sweep, quick, warmup, exp1, exp2, exp3, cpuenv, envscale, agents, expensive, torchenv, cpucompile, tuning, continuous, continuous-learning, pixels, pixels-learning, dqn, dqn-learning, offpolicy, offpolicy-learning, offpolicy-cleanrl, tunesweep, profile, gpu, gpuscale, hosts or gpucheck" ;;
esac
if [[ -n $iterations ]] && ((iterations < MIN_ITERATIONS)); then
  echo "bench.sh: warning: with --iterations $iterations < $MIN_ITERATIONS, analyze.py finds no steady state" \
       "(it reads iterations 8..end, at least 10 of them)" >&2
fi
if [[ -n $experiments_opt ]]; then
  for e in $(split "$experiments_opt"); do
    contains "$e" "${experiments[@]}" || die "experiment '$e' is not part of preset '$preset' (${experiments[*]})"
  done
  experiments=($(split "$experiments_opt"))
fi

env_filter=()
case $envs_opt in
  "") ;;
  benchback-rl) env_filter=("${BENCHBACK_RL_ENVS[@]}") ;;
  extra) env_filter=("${EXTRA_ENVS[@]}") ;;
  all) env_filter=("${BENCHBACK_RL_ENVS[@]}" "${EXTRA_ENVS[@]}") ;;
  *) env_filter=($(split "$envs_opt")) ;;
esac
for e in "${env_filter[@]}"; do
  contains "$e" "${BENCHBACK_RL_ENVS[@]}" "${EXTRA_ENVS[@]}" "${CRAFTAX_ENVS[@]}" "${CONTINUOUS_ENVS[@]}" "${MUJOCO_ENVS[@]}" "${ATARI_ENVS[@]}" ||
    die "unknown env '$e': ${BENCHBACK_RL_ENVS[*]} ${EXTRA_ENVS[*]} ${CRAFTAX_ENVS[*]} ${CONTINUOUS_ENVS[*]} ${MUJOCO_ENVS[*]} ${ATARI_ENVS[*]} (or benchback-rl, extra, all)"
done
variant_filter=($(split "$variants_opt"))
for v in "${variant_filter[@]}"; do
  [[ $v != cleanrl_* || -n $cleanrl ]] || die "variant '$v' is CleanRL's own script: give --cleanrl DIR"
  variant_command "$v" >/dev/null || die "unknown variant '$v' (see --help)"
done
model_filter=($(split "$models_opt"))
for m in "${model_filter[@]}"; do contains "$m" "${MODELS[@]}" cnn || die "unknown model '$m': small, medium, large, cnn"; done

# ---- the plan: one line per run, "experiment repeat env variant model sync subfolder args"
# (args: the run's own script arguments, comma-separated, or -)
plan=()
add() {  # experiment repeat sync subfolder args envs... -- variants... -- models...
  local exp=$1 r=$2 sync=$3 sub=$4 args=$5; shift 5
  local envs=() variants=() models=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  while [[ $1 != -- ]]; do variants+=("$1"); shift; done; shift
  models=("$@")
  if [[ ${#env_filter[@]} -gt 0 && $exp == exp3 ]]; then  # exp3 is Acrobot-v1's: kept only if listed
    contains Acrobot-v1 "${env_filter[@]}" || return 0
  elif [[ ${#env_filter[@]} -gt 0 && ($exp == cpuenv || $exp == envscale || $exp == expensive || $exp == continuous* || $exp == pixels* || $exp == gpu* || $exp == torchenv || $exp == cpucompile || $exp == dqn* || $exp == offpolicy* || $exp == tunesweep || $exp == profile || $exp == hosts) ]]; then
    local own=("${TWIN_ENVS[@]}") kept=()  # the listed twins, or the listed envs of expensive's and continuous's
    [[ $exp == expensive ]] && own=("${EXPENSIVE_ENVS[@]}")
    [[ $exp == continuous* || $exp == pixels* || $exp == gpu* || $exp == torchenv || $exp == cpucompile || $exp == dqn* || $exp == offpolicy* || $exp == tunesweep || $exp == profile || $exp == hosts ]] && own=("${envs[@]}")
    for e in "${env_filter[@]}"; do contains "$e" "${own[@]}" && kept+=("$e"); done
    envs=("${kept[@]}")
  elif [[ ${#env_filter[@]} -gt 0 && $exp != warmup && $exp != tuning ]]; then
    envs=("${env_filter[@]}")
  fi
  if [[ ${#variant_filter[@]} -gt 0 && ($exp == agents || $exp == tuning || $exp == continuous* || $exp == pixels* || $exp == gpu* || $exp == torchenv || $exp == cpucompile || $exp == dqn* || $exp == offpolicy* || $exp == tunesweep || $exp == profile || $exp == hosts) ]]; then  # each list keeps its listed variants
    local kept=(); for v in "${variant_filter[@]}"; do contains "$v" "${variants[@]}" && kept+=("$v"); done
    variants=("${kept[@]}")
  elif [[ ${#variant_filter[@]} -gt 0 ]]; then variants=("${variant_filter[@]}"); fi
  if [[ ${#model_filter[@]} -gt 0 && $exp != warmup && ${models[*]} != none ]]; then
    local kept=(); for m in "${model_filter[@]}"; do contains "$m" "${models[@]}" && kept+=("$m"); done
    models=("${kept[@]}")
  fi
  for env in "${envs[@]}"; do for variant in "${variants[@]}"; do for model in "${models[@]}"; do
    if offers "$variant" "$env"; then plan+=("$exp $r $env $variant $model $sync $sub $args"); fi
  done; done; done
}
# Fisher-Yates over plan[first..end], from a linear congruential generator seeded by a checksum
# of the given text: the same order for the same seed on any machine, another for each repeat.
shuffle_from() {
  local first=$1 i j swap state
  state=$(cksum <<<"$2") && state=${state%% *}
  for ((i = ${#plan[@]} - 1; i > first; i--)); do
    state=$(((state * 1103515245 + 12345) % 2147483648))
    j=$((first + (state >> 16) % (i - first + 1)))
    swap=${plan[i]} plan[i]=${plan[j]} plan[j]=$swap
  done
}
exp1_envs=("${BENCHBACK_RL_ENVS[@]}") exp1_models=("${MODELS[@]}") exp2_envs=("${BENCHBACK_RL_ENVS[@]}") modes=("${COMPILE_MODES[@]}")
cpuenv_envs=() scale_envs=(CartPole-v1 Breakout-MinAtar) counts=("${ENV_COUNTS[@]}")
for e in "${BENCHBACK_RL_ENVS[@]}"; do contains "$e" "${TWIN_ENVS[@]}" && cpuenv_envs+=("$e"); done
cpuenv_models=(small medium) agent_envs=(CartPole-v1 Breakout-MinAtar) agent_counts=("${AGENT_COUNTS[@]}")
sweep_sizes=("${SWEEP_SIZES[@]}")
own_counts=("${OWN_ENV_COUNTS[@]}") gpu_counts=("${GPU_COUNTS[@]}")
tuning_envs=(CartPole-v1); ((${#env_filter[@]})) && tuning_envs=("${env_filter[@]}")
if [[ $preset == quick ]]; then  # minutes on a CPU: two envs, small models, no mode that equals another there
  exp1_envs=(CartPole-v1 Acrobot-v1) exp1_models=(small) exp2_envs=(CartPole-v1)
  modes=(linen-nojit linen nnx-nojit nnx nnx_cached equinox torch-nojitenv torch torch_compile)
  cpuenv_envs=(CartPole-v1) cpuenv_models=(small) scale_envs=(CartPole-v1) counts=(16 128)
fi
if [[ -n $counts_opt ]]; then
  counts=($(split "$counts_opt")) own_counts=("${counts[@]}") gpu_counts=("${counts[@]}")
  for n in "${counts[@]}"; do  # minibatches of 1024 from 128 steps: a multiple of 8 envs
    [[ $n =~ ^[1-9][0-9]*$ ]] && ((n % 8 == 0)) || die "--env-counts must be multiples of 8, got '$n'"
  done
fi
if [[ -n $agent_counts_opt ]]; then
  agent_counts=($(split "$agent_counts_opt")) sweep_sizes=($(split "$agent_counts_opt"))
  for n in "${agent_counts[@]}"; do
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "--agent-counts must be positive integers, got '$n'"
  done
fi
largest_sweep=$(printf '%s\n' "${sweep_sizes[@]}" | sort -n | tail -n 1)
# Repeat by repeat: the warm-up first, then every other run of the repeat in a shuffled order,
# so that a drift of the machine's speed spreads over all variants instead of favouring one.
for r in $(seq 1 "$repeats"); do
  [[ " ${experiments[*]} " == *" warmup "* ]] && add warmup "$r" async - - Acrobot-v1 -- "${FRAMEWORKS[@]}" -- small
  first=${#plan[@]}
  for exp in "${experiments[@]}"; do
    case $exp in
      exp1) add exp1 "$r" async - - "${exp1_envs[@]}" -- "${AS_MEANT[@]}" -- "${exp1_models[@]}" ;;
      exp2) add exp2 "$r" sync - - "${exp2_envs[@]}" -- "${modes[@]}" -- small ;;
      exp3) add exp3 "$r" sync - - Acrobot-v1 -- "${modes[@]}" -- "${MODELS[@]}" ;;
      cpuenv)
        add cpuenv "$r" sync - - "${cpuenv_envs[@]}" -- "${CPU_ENV_VARIANTS[@]}" -- "${cpuenv_models[@]}"
        add cpuenv "$r" sync cleanrl "$CLEANRL_ARGS" "${cpuenv_envs[@]}" -- "${CPU_ENV_VARIANTS[@]}" -- "${cpuenv_models[@]}" ;;
      envscale)  # 128 steps, minibatches of 1024, one epoch: only the rollout is measured
        for n in "${counts[@]}"; do
          add envscale "$r" sync "envs$n" "--num-envs,$n,--num-steps,128,--num-minibatches,$((n / 8)),--update-epochs,1,--num-iterations,4" \
            "${scale_envs[@]}" -- "${CPU_ENV_VARIANTS[@]}" -- small
          add envscale "$r" async "envs$n" "--num-envs,$n,--num-steps,128,--num-iterations,4" \
            "${scale_envs[@]}" -- "${ENV_ALONE[@]}" -- none
        done ;;
      agents)
        for n in "${agent_counts[@]}"; do
          add agents "$r" sync "n$n" "--num-agents,$n" "${agent_envs[@]}" -- "${AGENT_VARIANTS[@]}" -- small
        done
        add agents "$r" sync single - "${agent_envs[@]}" -- "${ONE_AGENT[@]}" -- small ;;
      expensive) add expensive "$r" sync - "--num-iterations,${iterations:-20}" "${EXPENSIVE_ENVS[@]}" -- "${AS_MEANT[@]}" -- small medium ;;
      continuous)
        add continuous "$r" sync - "--num-iterations,${iterations:-20}" "${CONTINUOUS_ENVS[@]}" -- "${AS_MEANT[@]}" -- small medium
        add continuous "$r" sync - "--num-iterations,${iterations:-20}" Pendulum-v1 HalfCheetah-v5 -- "${CONTINUOUS_CPU[@]}" -- small medium
        add continuous "$r" async - "--num-steps,128,--num-iterations,4" Pendulum-v1 HalfCheetah-v5 -- \
          env-gymnax env-sync env-async env-envpool env-mjx -- none ;;  # each env alone, stepped each way
      continuous-learning)
        add continuous-learning "$r" async - - Pendulum-v1 -- "${AS_MEANT[@]}" -- small
        add continuous-learning "$r" async - "--num-iterations,$HALFCHEETAH_ITERATIONS" HalfCheetah-v5 -- linen_gymnasium torch_gymnasium -- small ;;
      pixels)
        add pixels "$r" sync - "--num-iterations,${iterations:-20}" "${PIXEL_ENVS[@]}" -- "${AS_MEANT[@]}" "${PIXELS_CPU[@]}" -- cnn small
        add pixels "$r" sync atari "$ATARI_ARGS,--num-iterations,${iterations:-20}" Breakout-v5 -- \
          torch_gymnasium-envpool linen_gymnasium-envpool -- cnn ;;
      profile)
        add profile "$r" async - "$PROFILE_ARGS" CartPole-v1 -- linen nnx equinox "${PROFILE_TORCH[@]}" torch-torchenv -- small
        add profile "$r" async - "$PROFILE_ARGS" CartPole-v1 -- linen "${PROFILE_TORCH[@]}" -- medium
        add profile "$r" async - "$PROFILE_ARGS" Pendulum-v1 -- linen "${PROFILE_TORCH[@]}" -- small
        add profile "$r" async - "$PROFILE_ARGS" Breakout-MinAtar -- linen torch torch_compile -- cnn
        add profile "$r" async - "$PROFILE_ARGS" CartPole-v1 -- linen_gymnasium torch_gymnasium torch_compile_gymnasium -- small
        for alg in td3 sac; do  # and where an off-policy step's time goes (issue 53)
          add profile "$r" async - "$PROFILE_OFFPOLICY_ARGS" Pendulum-v1 -- "${PROFILE_OFFPOLICY[@]/#/${alg}_}" -- small
          add profile "$r" async - "$PROFILE_OFFPOLICY_ARGS" HalfCheetah-v5 -- "${alg}"_{linen,torch}_gymnasium -- small
        done ;;
      gpu)
        gpu_args="--num-iterations,${iterations:-20}"
        add gpu "$r" sync - "$gpu_args" CartPole-v1 Breakout-MinAtar -- "${AS_MEANT[@]}" -- "${MODELS[@]}"
        add gpu "$r" sync tf32 "--matmul-precision,tf32,$gpu_args" CartPole-v1 Breakout-MinAtar -- "${AS_MEANT[@]}" -- large
        add gpu "$r" sync - "$gpu_args" Craftax-Classic-Symbolic-v1 Pendulum-v1 -- "${AS_MEANT[@]}" -- small
        add gpu "$r" sync - "$gpu_args" Breakout-MinAtar -- "${AS_MEANT[@]}" -- cnn ;;
      gpuscale)
        for n in "${gpu_counts[@]}"; do
          add gpuscale "$r" sync "envs$n" "--num-envs,$n,--num-iterations,${iterations:-$MIN_ITERATIONS}" CartPole-v1 -- \
            "${GPU_SCALE[@]}" -- small
        done ;;
      torchenv)
        add torchenv "$r" sync - "--num-iterations,${iterations:-20}" "${OWN_ENV_ENVS[@]}" -- "${OWN_ENV_VARIANTS[@]}" -- small medium
        for n in "${own_counts[@]}"; do
          add torchenv "$r" async "alone/envs$n" "--num-envs,$n,--num-steps,128,--num-iterations,4" \
            "${OWN_ENV_ENVS[@]}" -- "${OWN_ENV_ALONE[@]}" -- none
        done ;;
      cpucompile)
        add cpucompile "$r" sync - "--num-iterations,${iterations:-20}" CartPole-v1 Acrobot-v1 Pendulum-v1 HalfCheetah-v5 Hopper-v5 -- \
          "${COMPILED_CPU[@]}" -- small
        add cpucompile "$r" sync - "--num-iterations,${iterations:-20}" CartPole-v1 Acrobot-v1 -- "${COMPILED_ENVPOOL[@]}" -- small
        add cpucompile "$r" sync atari "$ATARI_ARGS,--num-iterations,${iterations:-20}" Breakout-v5 Pong-v5 -- \
          "${COMPILED_ENVPOOL[@]}" -- cnn ;;
      dqn)
        for k in "${TRAIN_FREQUENCIES[@]}"; do
          add dqn "$r" async "tf$k" "--total-timesteps,$DQN_STEPS,--train-frequency,$k" CartPole-v1 -- "${DQN[@]}" -- small
        done  # and PureJaxRL's way: many envs per step, an update per vector step
        add dqn "$r" async "envs$DQN_ENVS" "--total-timesteps,$DQN_STEPS,--num-envs,$DQN_ENVS,--train-frequency,$DQN_ENVS" \
          CartPole-v1 -- "${DQN[@]}" -- small ;;
      dqn-learning)
        add dqn-learning "$r" async - - CartPole-v1 -- "${DQN_LEARNING[@]}" ${cleanrl:+"${DQN_LEARNING_CLEANRL[@]}"} \
          -- small
        add dqn-learning "$r" async breakout "$DQN_PIXELS_ARGS" Breakout-MinAtar -- "${DQN_PIXELS[@]}" -- cnn ;;
      tunesweep)  # command_of makes each a tune.py call
        for n in "${sweep_sizes[@]}"; do
          add tunesweep "$r" async "n$n" - "${SWEEP_ENVS[@]}" -- "${AGENT_VARIANTS[@]}" -- small
        done  # one process per trial: the largest sweep only, as its first trials are each smaller one's
        add tunesweep "$r" async "n$largest_sweep" - "${SWEEP_ENVS[@]}" -- "${SWEEP_ONE_BY_ONE[@]}" -- small ;;
      offpolicy) add offpolicy "$r" async - "$OFFPOLICY_ARGS" Pendulum-v1 -- "${OFFPOLICY[@]}" -- small ;;
      offpolicy-learning)
        add offpolicy-learning "$r" async - "$OFFPOLICY_LEARNING_ARGS" HalfCheetah-v5 -- "${OFFPOLICY_LEARNING[@]}" \
          ${cleanrl:+"${OFFPOLICY_LEARNING_CLEANRL[@]}"} -- small ;;
      offpolicy-cleanrl) add offpolicy-cleanrl "$r" async - "$OFFPOLICY_CLEANRL_ARGS" HalfCheetah-v5 \
          -- "${OFFPOLICY_LEARNING[@]}" "${OFFPOLICY_LEARNING_CLEANRL[@]}" -- small ;;
      hosts)  # one setup per regime; PPO's at 20 iterations, the steady state's least and a few more
        ppo="--num-iterations,${iterations:-20}"
        add hosts "$r" sync jax-env "$ppo" CartPole-v1 Breakout-MinAtar -- "${HOSTS_JAX_ENV[@]}" -- small
        add hosts "$r" sync own-env "$ppo" CartPole-v1 Pendulum-v1 -- "${HOSTS_OWN_ENV[@]}" -- small
        add hosts "$r" sync loop "$ppo" CartPole-v1 Acrobot-v1 -- "${HOSTS_LOOP[@]}" -- small
        add hosts "$r" sync envpool "$ppo" CartPole-v1 Acrobot-v1 -- "${HOSTS_ENVPOOL[@]}" -- small
        add hosts "$r" sync mujoco "$ppo" HalfCheetah-v5 -- "${HOSTS_MUJOCO[@]}" -- small
        add hosts "$r" sync craftax "$ppo" Craftax-Classic-Symbolic-v1 -- "${HOSTS_CRAFTAX[@]}" -- small
        add hosts "$r" sync many-agents "--num-agents,$HOSTS_AGENT_COUNT,$ppo" CartPole-v1 -- "${HOSTS_AGENTS[@]}" -- small
        add hosts "$r" sync minatar-cnn "$ppo" Breakout-MinAtar -- "${HOSTS_CNN[@]}" -- cnn
        add hosts "$r" sync atari "$ATARI_ARGS,$ppo" Breakout-v5 -- "${HOSTS_ATARI[@]}" -- cnn
        add hosts "$r" async dqn-jax "--total-timesteps,$DQN_STEPS,--train-frequency,10" CartPole-v1 -- "${HOSTS_DQN[@]}" -- small
        add hosts "$r" async dqn-cpu "--total-timesteps,$DQN_STEPS,--train-frequency,10" CartPole-v1 -- "${HOSTS_DQN_CPU[@]}" -- small
        add hosts "$r" async td3 "$HOSTS_OFFPOLICY_ARGS" Pendulum-v1 -- "${HOSTS_TD3[@]}" -- small
        add hosts "$r" async sac "$HOSTS_OFFPOLICY_ARGS" Pendulum-v1 -- "${HOSTS_SAC[@]}" -- small ;;
      pixels-learning) add pixels-learning "$r" async - "--num-iterations,$PIXELS_LEARNING_ITERATIONS" Breakout-MinAtar -- linen torch -- cnn ;;
      tuning)
        for pair in "${TUNING[@]}"; do
          add tuning "$r" sync "${pair#*:}" "--num-iterations,${iterations:-20}" "${tuning_envs[@]}" -- "${pair%%:*}" -- small medium
        done ;;
    esac
  done
  shuffle_from "$first" "$order_seed $r"
done

# ---- --slurm N: the plan as a job array of N shards, then the analysis once every shard has ended
if [[ -n $slurm_tasks ]]; then
  forward=() i=0  # every option but --slurm, --sbatch and --dry-run, then the task's shard, -- and the rest
  while ((i < ${#argv[@]})); do
    case ${argv[i]} in
      --slurm|--sbatch) i=$((i + 2)) ;;
      --dry-run) i=$((i + 1)) ;;
      --) break ;;
      *) forward+=("${argv[i]}"); i=$((i + 1)) ;;
    esac
  done
  here=$(pwd) logs="$out/slurm"
  task="$(printf '%q ' bash "$here/bench.sh" "$preset" "${forward[@]}")--shard \$SLURM_ARRAY_TASK_ID/$slurm_tasks"
  ((${#extra[@]})) && task+=" --$(printf ' %q' "${extra[@]}")"
  analysis="$(printf '%q ' "$PYTHON" "$here/analyze.py" "$out" --out "$out/results")"
  analysis="if [ -s $(printf %q "$out/failures.log") ]; then cat $(printf %q "$out/failures.log"); fi; $analysis"
  read -ra sbatch_opts <<<"$sbatch_args"
  array_cmd=(sbatch --parsable --job-name=benchback --array="0-$((slurm_tasks - 1))" --chdir="$here"
             --output="$logs/task_%a.out" "${sbatch_opts[@]}" --wrap="$task")
  analysis_cmd=(sbatch --parsable --job-name=benchback-analysis --chdir="$here" --output="$logs/analysis.out"
                "${sbatch_opts[@]}" --wrap="$analysis")
  if ((dry_run)); then
    printf '%q ' "${array_cmd[@]}"; echo
    printf '%q ' "${analysis_cmd[@]:0:2}" --dependency=afterany:ARRAY_ID "${analysis_cmd[@]:2}"; echo
    echo "${#plan[@]} planned runs in $slurm_tasks tasks (dry run: nothing submitted)"
    exit 0
  fi
  mkdir -p "$logs"
  array_id=$("${array_cmd[@]}") || die "sbatch refused the job array (see above)"
  array_id=${array_id%%;*}  # --parsable prints id;cluster on a federation
  analysis_id=$("${analysis_cmd[@]:0:2}" --dependency="afterany:$array_id" "${analysis_cmd[@]:2}") ||
    die "sbatch refused the analysis job (the array $array_id is queued: scancel $array_id)"
  analysis_id=${analysis_id%%;*}
  echo "bench.sh: submitted job array $array_id (${#plan[@]} planned runs in $slurm_tasks tasks) and analysis job $analysis_id"
  echo "  runs:     $out/<experiment>/r<repeat>/  (resubmit with --resume to finish an interrupted sweep)"
  echo "  logs:     $logs/task_<i>.out, $logs/analysis.out; failed runs in $out/failures.log"
  echo "  report:   $out/results/REPORT.md, once job $analysis_id has run (squeue -j $array_id,$analysis_id)"
  exit 0
fi

# A session: this sitting's runs on this machine, as it is now. Each run records the id; the
# calibration records what the machine was, so that analyze.py pairs runs of one session only.
session=${BENCHBACK_SESSION:-$(date -u +%Y%m%dT%H%M%SZ)-$(hostname -s 2>/dev/null || echo host)-$$}

# the command line of planned run $1, into cmd (and its fields into exp r env variant model slot)
command_of() {
  local sync sub args
  read -r exp r env variant model sync sub args <<<"${plan[$1]}"
  read -ra script <<<"$(variant_command "$variant")"
  slot="$out/$exp/r$r"
  [[ $sub == - ]] || slot="$slot/$sub"
  local model_args=(--model "$model")
  [[ $model == none ]] && model_args=()  # env_alone.py: the env alone has no model
  cmd=("$PYTHON" "${script[@]}" --env-id "$env" "${model_args[@]}" --seed "$r" --log-dir "$slot")
  [[ $exp == tuning ]] && cmd=(env $(setting_env "$sub") "${cmd[@]}")  # the setting: its environment
  if [[ $exp == tunesweep ]]; then  # a sweep of ${sub#n} trials, the script's own flags after --
    local population=(); [[ $variant == *_agents* ]] && population=(--population "${sub#n}")
    cmd=("$PYTHON" tune.py "${script[0]}" --env-ids "$env" --seeds "$r" --trials "${sub#n}" "${population[@]}"
         --sampler random --sampler-seed "$r" --pruner none --space "${SWEEP_SPACE[@]}"
         --out "$slot/${env}__${variant}__${model}__s${r}__$session" -- "${script[@]:1}" --model "$model"
         --num-iterations "${iterations:-$SWEEP_ITERATIONS}")
  fi
  if [[ $variant == cleanrl_* ]]; then  # CleanRL's own script: its flags, its run folder in the folder it starts in
    cmd=(env "PYTHONPATH=$cleanrl${PYTHONPATH:+:$PYTHONPATH}"  # its cleanrl_utils
         "$(abs_python)" "${script[@]}" --env-id "$env" --seed "$r")
    [[ $args == - ]] || cmd+=($(split "$args"))  # the presets' args are CleanRL's names
    return 0
  fi
  [[ $sync == sync ]] && cmd+=(--sync-timing)
  [[ $args == - ]] || cmd+=($(split "$args"))
  [[ -n $iterations && $exp != envscale && $exp != expensive && $exp != tuning && $exp != continuous && $exp != pixels && $exp != torchenv && $exp != cpucompile && $exp != dqn* && $exp != offpolicy* && $exp != tunesweep && $exp != profile && $exp != gpu* && $exp != hosts ]] && cmd+=(--num-iterations "$iterations")  # in args there
  cmd+=("${extra[@]}")
}
abs_python() { [[ $PYTHON == */* && $PYTHON != /* ]] && echo "$PWD/$PYTHON" || echo "$PYTHON"; }
# whether the run command_of set up has ended before (--resume): our run's summary.json, or CleanRL's run folder,
# moved there only once it ended
ended() {
  if [[ $variant == cleanrl_* ]]; then
    compgen -G "$slot/$CLEANRL_RUNS/*/${env}__${variant#cleanrl_}__${r}__*" >/dev/null
  else
    compgen -G "$slot/${env}__${variant}__${model}__s${r}__*/summary.json" >/dev/null
  fi
}
plan_header() { echo "# bench.sh $preset, order seed $order_seed: each repeat's runs in a shuffled order, its warm-up first"; }
plan_line() { command_of "$1"; printf '[%s r%s]' "$exp" "$r"; printf ' %q' "${cmd[@]}"; echo; }

# Shards take whole pairing groups (one experiment's runs of one repeat on one env): the runs that
# analyze.py compares run in one shard, so on one machine, in one session, back to back. The
# largest group goes to the emptiest shard first, which keeps the shards' run counts close.
declare -A size=() home=(); groups=()
for i in "${!plan[@]}"; do
  read -r exp r env _ <<<"${plan[$i]}"
  [[ -n ${size["$exp $r $env"]:-} ]] || groups+=("$exp $r $env")
  size["$exp $r $env"]=$((${size["$exp $r $env"]:-0} + 1))
done
load=(); for ((s = 0; s < shard_n; s++)); do load[s]=0; done
while IFS=$'\t' read -r n key; do
  best=0; for ((s = 1; s < shard_n; s++)); do ((load[s] < load[best])) && best=$s; done
  home[$key]=$best load[best]=$((load[best] + n))
done < <(for key in "${groups[@]}"; do printf '%s\t%s\n' "${size[$key]}" "$key"; done | sort -s -t$'\t' -k1,1nr)
shard_of=(); for i in "${!plan[@]}"; do read -r exp r env _ <<<"${plan[$i]}"; shard_of[i]=${home["$exp $r $env"]}; done
mine() { ((shard_of[$1] == shard_i)); }

if ((dry_run)); then
  plan_header
  planned=0
  for i in "${!plan[@]}"; do mine "$i" && plan_line "$i" && planned=$((planned + 1)); done
  echo "$planned planned runs (dry run: nothing executed)"
  exit 0
fi

# ---- run it
mkdir -p "$out"
{ plan_header; for i in "${!plan[@]}"; do plan_line "$i"; done; } >"$out/plan.txt.$$"
mv "$out/plan.txt.$$" "$out/plan.txt"  # the whole plan, in the order it runs: every shard writes the same
failures="$out/failures.log"
ran=0 skipped=0 failed=0 interrupted=0
planned=0; for i in "${!plan[@]}"; do mine "$i" && planned=$((planned + 1)); done
# Ctrl-C reaches the run too (it is in our process group): it closes its logs and exits, then
# the sweep stops. A run still alive after that (one that ignores SIGINT) is interrupted
# again, then terminated, then killed: a sweep never leaves one behind.
trap 'interrupted=1' INT TERM
stop_run() {
  local signal
  for signal in INT TERM KILL; do
    for _ in {1..20}; do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done
    kill -"$signal" "$1" 2>/dev/null || true
  done
}

export BENCHBACK_SESSION=$session
if ((calibrate)); then
  mkdir -p "$out/sessions"
  echo "session $session: calibrating (calibrate.py, a few seconds)"
  set +e
  calibrate_args=(--out "$out/sessions/$session.json")
  [[ $preset == tuning ]] && calibrate_args+=(--gemm-options)  # also each framework's other ways to run a layer
  ( trap - INT TERM; exec "$PYTHON" calibrate.py "${calibrate_args[@]}" ) >"$out/sessions/$session.log" 2>&1 &
  wait $!
  code=$?
  ((interrupted)) && stop_run $! && wait $! 2>/dev/null
  set -e
  ((code == 0 || interrupted)) ||
    echo "bench.sh: warning: the calibration failed (exit $code, see $out/sessions/$session.log); the runs go on" >&2
fi

for i in "${!plan[@]}"; do
  mine "$i" || continue
  ((interrupted)) && break
  command_of "$i"
  if ((resume)) && ended; then
    skipped=$((skipped + 1)); continue
  fi
  mkdir -p "$slot/logs"
  log="$slot/logs/${env}__${variant}__${model}__s${r}.log"
  echo "[$((i + 1))/${#plan[@]}] $exp r$r $env $variant $model"
  cache=$(mktemp -d)  # an empty inductor cache: torch.compile pays its whole compile time
  start_in=.; [[ $variant == cleanrl_* ]] && start_in=$(mktemp -d "$slot/.cleanrl.XXXXXX")  # CleanRL writes runs/
  ((warm_cache)) && cache_env=() || cache_env=(TORCHINDUCTOR_CACHE_DIR="$cache")
  set +e
  # In the background, so that the trap runs at once rather than when the run exits; a
  # background job ignores SIGINT unless it restores it, as this subshell does.
  ( trap - INT TERM; cd "$start_in" || exit 1; exec env "${cache_env[@]}" "${cmd[@]}" ) >"$log" 2>&1 &
  wait $!
  code=$?
  ((interrupted)) && stop_run $! && wait $! 2>/dev/null
  set -e
  rm -rf "$cache"
  if [[ $start_in != . ]]; then  # CleanRL's run folder, once it ended, into its session's folder; a cut one is lost
    if ((code == 0 && !interrupted)); then
      mkdir -p "$slot/$CLEANRL_RUNS/$session"
      mv "$start_in"/runs/* "$slot/$CLEANRL_RUNS/$session/" 2>>"$log" || code=1  # it wrote no run folder
    fi
    rm -rf "$start_in"
  fi
  if ((interrupted)); then
    echo "interrupted during $exp r$r $env $variant $model: its run directory has no summary.json" >&2
    break
  fi
  if ((code == 0)); then
    ran=$((ran + 1))
  else
    failed=$((failed + 1))
    { echo "=== $(date -Is) exit $code: ${cmd[*]}"; echo "log: $log"; tail -n 20 "$log"; echo; } >>"$failures"
    echo "  failed (exit $code), see $failures" >&2
  fi
done

echo "bench.sh: $ran ran, $skipped skipped, $failed failed of $planned planned (shard $shard_i/$shard_n)"
((interrupted)) && exit 130
if [[ $preset == quick && $failed -eq 0 && $shard_n -eq 1 && -f analyze.py ]]; then
  $PYTHON analyze.py "$out" --out "${QUICK_RESULTS:-$out/results}"
fi
((failed == 0)) || exit 1
