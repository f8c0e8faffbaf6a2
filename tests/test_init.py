"""Every framework's initial weights as documented (docs/method.md, "orthogonal init"): each layer's kernel
orthogonal over its output units with the stated gain (sqrt 2 for the hidden layers, the CNN's convolutions
and its dense layer, 0.01 for the policy's output, 1 for the value's), zero biases and a log-std of 0; the
MLP, MinAtar's CNN and the Gaussian head, in every single-agent script, each from its own init."""

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import ONE_AGENT_SCRIPTS, load, script_args

HIDDEN, POLICY, VALUE = np.sqrt(2), 0.01, 1.0


def gram_over_gain(kernel, gain):
    """A kernel as (fan in, output units): the Gram matrix of its shorter side, over gain squared, which
    orthogonal weights of that gain make the identity."""
    m = np.asarray(kernel, np.float64).reshape(-1, kernel.shape[-1])
    return (m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T) / gain**2


@pytest.mark.parametrize("case", ["mlp", "cnn", "gaussian"])
@pytest.mark.parametrize("script", ONE_AGENT_SCRIPTS)
def test_initial_weights_are_orthogonal_with_the_stated_gains(script, case):
    rng, m = np.random.default_rng(0), load(script)
    if case == "cnn":
        weights = ref.random_cnn_weights(rng, (10, 10, 4), "minatar", 3)
        args = script_args(m, model="cnn")
    else:
        weights = ref.random_weights(rng, 3, (64, 64), 1 if case == "gaussian" else 3, continuous=case == "gaussian")
        args = script_args(m, case == "gaussian")
    adapter = adapter_for(script)(script, weights, args)
    first, second = adapter.fresh(1), adapter.fresh(2)
    layers = [(f"{net} layer {i}", kernel, bias, HIDDEN if i < len(first[net]) - 1 else gain)
              for net, gain in (("actor", POLICY), ("critic", VALUE)) for i, (kernel, bias) in enumerate(first[net])]
    if case == "cnn":
        layers += [(f"conv {i}", kernel, bias, HIDDEN) for i, (kernel, bias) in enumerate(first["conv"])]
        layers += [("the CNN's dense layer", *first["torso"][0], HIDDEN)]
    for name, kernel, bias, gain in layers:
        gram = gram_over_gain(kernel, gain)
        np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-4, err_msg=f"{name}: not orthogonal at gain {gain:.3g}")
        assert not np.any(bias), f"{name}: biases not zero"
    if case == "gaussian":
        assert not np.any(first["actor_logstd"]), "the log-std starts at 0"
    assert not np.allclose(first["actor"][0][0], second["actor"][0][0]), "the seed draws the weights"
