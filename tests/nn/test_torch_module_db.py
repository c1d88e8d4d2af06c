"""attnkit's drop-ins against torch.nn's own, on the sample inputs of PyTorch's module tests.

The installed wheel ships PyTorch's ModuleInfo database (`torch.testing._internal.common_modules.
module_db`): for each module, the constructor arguments and forward inputs its test suite runs
(test/test_modules.py). Every sample of the five attention modules is run here through torch's
module and attnkit's side by side, in float64 on the CPU:

- state dicts: the same keys in the same order with the same shapes; attnkit loads torch's strictly
  (torch's parameters first drawn at random, so that biases and norms matter too);
- "train" and "eval", with autograd: the same outputs (assert_close's float64 tolerance) and the
  same gradients for every input and parameter, within 1e-5, after the outputs are multiplied by
  one fixed random tensor and summed;
- "inference", eval without autograd, where torch takes its fused kernels
  (`_transformer_encoder_layer_fwd`, nested tensors): the same outputs. The one sample kind that
  is skipped: torch's TransformerEncoder turns a padded batch into a nested tensor and returns
  zeros at the padded positions (attnkit computes them like the others); there the unpadded
  positions are compared first, and a Transformer's decoder, which reads the whole memory, not at all.

Every sample of the database has dropout 0, so train mode is compared exactly; no sample is
skipped for dropout. Counts per module and mode: `pytest tests/nn/test_torch_module_db.py -rs -q`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import types
import unittest
import warnings

import pytest
import torch
from torch.testing import assert_close

import attnkit.nn

MODULES = {"nn.MultiheadAttention": "MultiHeadAttention", "nn.TransformerEncoderLayer": "TransformerEncoderLayer",
           "nn.TransformerDecoderLayer": "TransformerDecoderLayer", "nn.TransformerEncoder": "TransformerEncoder",
           "nn.Transformer": "Transformer"}
MODES = ("train", "eval", "inference")
GRADIENT_TOL = {"atol": 1e-5, "rtol": 1e-5}
NESTED_TENSOR = ("torch's TransformerEncoder in eval without autograd turns the padded batch into a nested tensor "
                 "and returns zeros at the padded positions; attnkit computes them")
NESTED_MEMORY = NESTED_TENSOR + " (and the Transformer's decoder then attends to the zeros)"

pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
              pytest.mark.filterwarnings("ignore:Support for mismatched:UserWarning"),
              pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")]


def import_module_db() -> list:
    """torch's module_db, imported without leaving its test-suite settings behind.

    torch.testing._internal.common_utils imports `expecttest` (a test-only package, only for its
    TestCase base class) and, on import, freezes torch.backends' flags, patches TorchScript calls,
    adds warning filters and an environment variable; all are undone here, and a stand-in is
    registered for a missing expecttest.
    """
    if importlib.util.find_spec("expecttest") is None:
        sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False)
    frozen, environment, path = torch.backends.flags_frozen(), dict(os.environ), list(sys.path)
    script_calls = torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__
    try:
        with warnings.catch_warnings():
            from torch.testing._internal.common_modules import module_db
    finally:
        setattr(torch.backends, "__allow_nonbracketed_mutation_flag", not frozen)
        torch._C.ScriptFunction.__call__, torch._C.ScriptMethod.__call__ = script_calls
        os.environ.clear()
        os.environ.update(environment)
        sys.path[:] = path
    return [info for info in module_db if info.name in MODULES]


@functools.cache
def samples(info, mode: str) -> list:
    """The ModuleInputs of one module for one mode (the same each time: the inputs are drawn after a seed)."""
    torch.manual_seed(0)
    return info.module_inputs_func(info, device="cpu", dtype=torch.float64, requires_grad=True,
                                   training=mode == "train")


def sample_params() -> list:
    params = []
    for info in import_module_db():
        for mode in MODES:
            for index, sample in enumerate(samples(info, mode)):
                name = f"{info.name.removeprefix('nn.')}-{mode}-{index}-{sample.desc or 'sample'}"
                params.append(pytest.param(info, mode, index, id=name))
    return params


def attnkit_twin(info, args: tuple, kwargs: dict) -> torch.nn.Module:
    """attnkit's module built from the sample's constructor arguments (TransformerEncoder's layer rebuilt too)."""
    cls = getattr(attnkit.nn, MODULES[info.name])
    if cls is attnkit.nn.TransformerEncoder:
        layer, *rest = args
        return cls(encoder_layer_like(layer), *rest, **kwargs)
    return cls(*args, **kwargs)


def encoder_layer_like(layer: torch.nn.TransformerEncoderLayer) -> attnkit.nn.TransformerEncoderLayer:
    attention = layer.self_attn
    return attnkit.nn.TransformerEncoderLayer(
        attention.embed_dim, attention.num_heads, layer.linear1.out_features, layer.dropout.p, layer.activation,
        layer.norm1.eps, attention.batch_first, layer.norm_first, layer.linear1.bias is not None,
        dtype=layer.linear1.weight.dtype)


def fresh(x):
    """A leaf copy of a tensor input (its own .grad), anything else as it is."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    return x


def run(module: torch.nn.Module, args: tuple, kwargs: dict, grad: bool):
    """(outputs, tensor inputs): outputs a tuple of tensors (MultiheadAttention's weights included)."""
    args, kwargs = tuple(fresh(x) for x in args), {k: fresh(x) for k, x in kwargs.items()}
    with torch.set_grad_enabled(grad):
        outputs = module(*args, **kwargs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    tensors = [x for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
    return tuple(x for x in outputs if x is not None), tensors


def gradients(module: torch.nn.Module, outputs: tuple, inputs: list, weights: tuple) -> dict:
    """d(sum of outputs * weights) by input position and by parameter name."""
    sum((output * weight).sum() for output, weight in zip(outputs, weights)).backward()
    found = {f"input {i}": x.grad for i, x in enumerate(inputs) if x.requires_grad}
    return found | {name: parameter.grad for name, parameter in module.named_parameters()}


def uses_nested_tensor(theirs: torch.nn.Module, args: tuple, kwargs: dict) -> bool:
    """Whether torch's encoder (or a Transformer's) takes its nested-tensor path for this batch."""
    encoder = theirs.encoder if isinstance(theirs, torch.nn.Transformer) else theirs
    if not isinstance(encoder, torch.nn.TransformerEncoder) or not encoder.use_nested_tensor:
        return False
    mask = kwargs.get("src_mask", kwargs.get("mask"))
    return args[0].dim() == 3 and kwargs.get("src_key_padding_mask") is not None and mask is None


@pytest.mark.parametrize(("info", "mode", "index"), sample_params())
def test_sample_matches_torch(info, mode: str, index: int) -> None:
    sample = samples(info, mode)[index]
    constructor, forward = sample.constructor_input, sample.forward_input
    torch.manual_seed(index)
    theirs = info.module_cls(*constructor.args, **constructor.kwargs).to(torch.float64)
    ours = attnkit_twin(info, constructor.args, constructor.kwargs).to(torch.float64)
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0.0, 0.3)
    shapes = [[(key, value.shape) for key, value in module.state_dict().items()] for module in (ours, theirs)]
    assert shapes[0] == shapes[1]
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.train(mode == "train")
    ours.train(mode == "train")
    grad = mode != "inference"
    expected, their_inputs = run(theirs, forward.args, forward.kwargs, grad)
    actual, our_inputs = run(ours, forward.args, forward.kwargs, grad)
    assert len(actual) == len(expected)
    if not grad and uses_nested_tensor(theirs, forward.args, forward.kwargs):
        if isinstance(theirs, torch.nn.TransformerEncoder):  # the unpadded positions still agree
            kept = ~forward.kwargs["src_key_padding_mask"]  # (batch, length)
            kept = kept if theirs.layers[0].self_attn.batch_first else kept.T
            assert_close(actual[0][kept], expected[0][kept])
            pytest.skip(NESTED_TENSOR)
        pytest.skip(NESTED_MEMORY)
    for ours_out, theirs_out in zip(actual, expected):
        assert_close(ours_out, theirs_out)
    if not grad:
        return
    weights = tuple(torch.randn_like(output) for output in expected)
    expected_grads = gradients(theirs, expected, their_inputs, weights)
    actual_grads = gradients(ours, actual, our_inputs, weights)
    assert actual_grads.keys() == expected_grads.keys()
    for name, expected_grad in expected_grads.items():
        assert_close(actual_grads[name], expected_grad, **GRADIENT_TOL, msg=lambda m, name=name: f"{name}: {m}")
