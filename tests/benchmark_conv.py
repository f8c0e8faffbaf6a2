"""Benchmark (not a test: run it by hand, on a quiet machine): why the JAX scripts convolve as patches
times the kernel on a CPU. One minibatch's forward pass and gradient of each CNN's convolutions,
several minibatches in a row: in JAX as a lax.scan over them (how the scripts' update runs), with
XLA's convolution and with the scripts' patches, and in PyTorch. Prints milliseconds per minibatch,
the median of a few calls.

    python tests/benchmark_conv.py
"""

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


def main():
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__}, torch {torch.__version__}: ms per minibatch (forward and gradient of the convolutions)")
    for cnn, ((h, w, c), size, count) in CASES.items():
        strides, kernels, channels = [], [], c
        for filters, k, stride in CNNS[cnn]["convs"]:
            kernels.append(jnp.asarray(rng.normal(0, 0.05, (k, k, channels, filters)), jnp.float32))
            strides.append(stride)
            channels = filters
        images = jnp.asarray(rng.random((count, size, h, w, c)), jnp.float32)
        print(f"{cnn}: minibatch of {size}, {count} in a scan: "
              f"XLA's convolution {jax_ms(xla_conv, kernels, strides, images):.1f}, "
              f"the scripts' patches {jax_ms(patches_conv, kernels, strides, images):.1f}, "
              f"PyTorch {torch_ms(kernels, strides, images):.1f}")


if __name__ == "__main__":
    main()
