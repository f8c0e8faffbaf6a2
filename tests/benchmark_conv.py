"""Benchmark (not a test: run it by hand, on a quiet machine): why the JAX scripts convolve as patches
times the kernel on a CPU. One minibatch's forward pass and gradient of each CNN's convolutions,
several minibatches in a row: in JAX as a lax.scan over them (how the scripts' update runs), with
XLA's convolution and with the scripts' patches, and in PyTorch. Prints milliseconds per minibatch,
the median of a few calls; with --out FILE, also adds them to FILE's list of sessions (what analyze.py
reads from results/conv.json: run it three times, back to back).

    python tests/benchmark_conv.py [--out results/conv.json]
"""

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ppo_linen import conv_general_dilated as patches_conv  # noqa: E402  the scripts' CPU convolution
from reference import CNNS  # noqa: E402

CASES = {"minatar": ((10, 10, 4), 1024, 8), "nature": ((84, 84, 4), 256, 4)}  # image, minibatch, minibatches
NHWC = ("NHWC", "HWIO", "NHWC")


def xla_conv(x, kernel, strides, padding):
    return jax.lax.conv_general_dilated(x, kernel, strides, padding, dimension_numbers=NHWC)


def jax_ms(conv, kernels, strides, images) -> float:
    def loss(kernels, x):
        for kernel, stride in zip(kernels, strides):
            x = jax.nn.relu(conv(x, kernel, (stride, stride), "VALID"))
        return x.sum()

    grads = jax.grad(loss)
    step = jax.jit(lambda ks, xs: jax.lax.scan(lambda acc, x: (jax.tree.map(jnp.add, acc, grads(ks, x)), None),
                                               jax.tree.map(jnp.zeros_like, ks), xs)[0])
    jax.block_until_ready(step(kernels, images))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(step(kernels, images))
        times.append(time.perf_counter() - start)
    return statistics.median(times) / len(images) * 1e3


def torch_ms(kernels, strides, images) -> float:
    weights = [torch.tensor(np.asarray(k).transpose(3, 2, 0, 1).copy(), requires_grad=True) for k in kernels]
    batches = [torch.tensor(np.asarray(x)).movedim(-1, 1).contiguous() for x in images]

    def step():
        for x in batches:
            for w, stride in zip(weights, strides):
                x = torch.relu(torch.nn.functional.conv2d(x, w, stride=stride))
            x.sum().backward()

    step()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / len(batches) * 1e3


def cpu_name() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())


def main():
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else None
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__}, torch {torch.__version__}: ms per minibatch (forward and gradient of the convolutions)")
    session = {"time": time.time(), "cpu": cpu_name(), "cores": os.cpu_count(), "load": os.getloadavg()[0],
               "versions": {"jax": jax.__version__, "torch": torch.__version__}, "cases": {}}
    for cnn, ((h, w, c), size, count) in CASES.items():
        strides, kernels, channels = [], [], c
        for filters, k, stride in CNNS[cnn]["convs"]:
            kernels.append(jnp.asarray(rng.normal(0, 0.05, (k, k, channels, filters)), jnp.float32))
            strides.append(stride)
            channels = filters
        images = jnp.asarray(rng.random((count, size, h, w, c)), jnp.float32)
        ms = {"xla": jax_ms(xla_conv, kernels, strides, images), "patches": jax_ms(patches_conv, kernels, strides, images),
              "torch": torch_ms(kernels, strides, images)}
        session["cases"][cnn] = {"minibatch": size, "minibatches": count, **ms}
        print(f"{cnn}: minibatch of {size}, {count} in a scan: XLA's convolution {ms['xla']:.1f}, "
              f"the scripts' patches {ms['patches']:.1f}, PyTorch {ms['torch']:.1f}")
    if out:  # one more session in the file's list: a rerun adds to it, never overwrites
        sessions = json.loads(out.read_text()) if out.exists() else []
        out.write_text(json.dumps(sessions + [session], indent=1) + "\n")


if __name__ == "__main__":
    main()
