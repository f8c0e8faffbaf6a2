"""The machine as each framework sees it, measured in seconds (benchback).

bench.sh runs this at the start of every session and analyze.py shows it beside that session's
runs, so that a machine that changed between sessions (another CPU, a busier host) shows up as
a change here rather than as a change of one framework's speed. It times, with the scripts'
own code where there is any:

- a float32 layer, x @ W + b, at the model sizes' shapes (a minibatch of 1024 rows through a
  256- and a 1024-wide layer): PyTorch's (torch.nn.functional.linear, what nn.Linear runs)
  against JAX's (jnp.dot and the add, jitted, what a Dense layer runs);
- one PPO minibatch step of the small model (loss, gradients, clip, Adam) on 1024 CartPole
  transitions: ppo_torch.py's minibatch_step, and ppo_linen.py's jitted.

With --gemm-options it also times what each framework offers for that layer on a CPU: PyTorch
with oneDNN off and with torch.compile's max-autotune; XLA with its Eigen on one thread and with
XNNPACK (each in a fresh process, since XLA reads its flags once).

    python calibrate.py --out runs/sessions/now.json
    python calibrate.py --gemm-options --out gemm.json
"""

import time

START_TIME = time.time()

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import tyro

ROOT = Path(__file__).resolve().parent
LAYERS = {"medium": 256, "large": 1024}  # the hidden width of each model size's layers
ROWS = 1024  # a minibatch
XLA_OPTIONS = {"xla-1-thread": "--xla_cpu_multi_thread_eigen=false", "xla-xnnpack": "--xla_cpu_use_xnnpack=true"}


@dataclass
class Args:
    out: str | None = None
    """where to write the measurements (JSON); also printed"""
    gemm_options: bool = False
    """also time each framework's other ways to run the layer on a CPU"""
    seconds: float = 0.5
    """how long each measurement runs (its median call is kept)"""
    jax_layers_only: bool = False
    """(internal) only JAX's layers, printed as JSON: what --gemm-options runs under other XLA flags"""


def script(name: str):
    """One of the PPO scripts as a module: its model and minibatch step are what is timed."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile looks functions up by their module
    spec.loader.exec_module(module)
    return module


def median_call(fn, seconds: float) -> float:
    """The median time of one call of fn (which waits for its result), after a warm-up call."""
    fn()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def jax_layers(seconds: float) -> dict:
    import jax
    import jax.numpy as jnp

    layer = jax.jit(lambda x, w, b: jnp.dot(x, w) + b)
    out = {}
    for size, width in LAYERS.items():
        x, w, b = (jnp.asarray(a) for a in layer_inputs(width))
        out[size] = median_call(lambda: layer(x, w, b).block_until_ready(), seconds)
    return out


def layer_inputs(width: int):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((ROWS, width), np.float32), rng.standard_normal((width, width), np.float32),
            rng.standard_normal(width, np.float32))


def torch_on(device):
    """A call on device that returns once its kernels have run: a CUDA launch returns before."""
    import torch

    if device.type != "cuda":
        return lambda fn: fn
    return lambda fn: lambda: (fn(), torch.cuda.synchronize(device))


def torch_layers(seconds: float, device, compile_mode: str | None = None) -> dict:
    import torch

    linear = torch.nn.functional.linear if compile_mode is None else torch.compile(
        torch.nn.functional.linear, mode=compile_mode, fullgraph=True)
    out = {}
    for size, width in LAYERS.items():
        x, w, b = (torch.from_numpy(a).to(device) for a in layer_inputs(width))
        w = w.T.contiguous()  # nn.Linear keeps its weight as (out, in)
        with torch.no_grad():
            out[size] = median_call(torch_on(device)(lambda: linear(x, w, b)), seconds)
    return out


def minibatch_steps(seconds: float, torch_ppo) -> dict:
    """One minibatch step of the small model in each framework, with the scripts' own code."""
    import jax
    import torch

    linen, device = script("ppo_linen.py"), torch_ppo.torch_device()
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((ROWS, 4), np.float32), rng.integers(0, 2, ROWS).astype(np.int32),
            *rng.standard_normal((4, ROWS)).astype(np.float32))  # obs, actions, logprobs, values, advantages, returns

    args = linen.with_defaults(linen.Args(), continuous_actions=False)
    train_state = linen.make_train_state(jax.random.key(0), (4,), 2, False, args)
    mb = linen.Batch(*map(jax.numpy.asarray, data))
    step = jax.jit(partial(linen.minibatch_step, args=args))

    def jax_step():
        nonlocal train_state
        train_state, stats = step(train_state, mb)
        jax.block_until_ready(stats)

    torch.manual_seed(0)
    torch_args = torch_ppo.with_defaults(torch_ppo.Args(), continuous_actions=False)
    agent, optimizer = torch_ppo.make_agent((4,), 2, False, torch_args, device)
    torch_mb = torch_ppo.Batch(*(torch.from_numpy(a).to(device) for a in data))
    torch_step = torch_on(device)(lambda: torch_ppo.minibatch_step(agent, optimizer, torch_mb, torch_args))
    return {"jax": median_call(jax_step, seconds), "torch": median_call(torch_step, seconds)}


def main():
    args = tyro.cli(Args, description=__doc__)
    if args.jax_layers_only:
        print(json.dumps(jax_layers(args.seconds)))
        return
    import torch

    torch_ppo = script("ppo_torch.py")
    device = torch_ppo.torch_device()  # JAX's: both frameworks timed on one device
    layers = {"torch": torch_layers(args.seconds, device), "jax": jax_layers(args.seconds)}
    if args.gemm_options:
        with torch.backends.mkldnn.flags(enabled=False):
            layers["torch-onednn-off"] = torch_layers(args.seconds, device)
        layers["torch-max-autotune"] = torch_layers(args.seconds, device, "max-autotune")
        for name, flags in XLA_OPTIONS.items():
            child = subprocess.run([sys.executable, __file__, "--jax-layers-only", "--seconds", str(args.seconds)],
                                   env={**os.environ, "XLA_FLAGS": flags}, capture_output=True, text=True, check=True)
            layers[name] = json.loads(child.stdout.splitlines()[-1])
    machine = torch_ppo.machine()  # the versions are part of it
    result = {
        "session": os.environ.get("BENCHBACK_SESSION"), "start_time": START_TIME, "machine": machine,
        "versions": machine.pop("versions"), "layer_rows": ROWS, "layer_widths": LAYERS,
        "device": str(device), "layer_seconds": layers,
        "minibatch_step_seconds": minibatch_steps(args.seconds, torch_ppo),
    }
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
