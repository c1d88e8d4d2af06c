"""`onednn_linears`: a model's Linears through oneDNN's inner product at CPU inference, the same outputs."""

import copy

import pytest
import torch
from torch import nn

from attnkit.nn import MultiHeadAttention, onednn_linear
from attnkit.nn.onednn_linear import OneDnnLinear, onednn_linears

pytestmark = pytest.mark.skipif(not onednn_linear.onednn_available(), reason="this PyTorch has no oneDNN")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 91, bias=False))


def test_the_linears_compute_what_pytorchs_do_and_keep_their_state_dict(monkeypatch):
    reference = _model()
    model = onednn_linears(copy.deepcopy(reference))
    assert [type(m) for m in model] == [OneDnnLinear, nn.ReLU, OneDnnLinear]
    assert model.state_dict().keys() == reference.state_dict().keys()
    calls = []
    original = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(onednn_linear.torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(1) or original(*a))
    x = torch.randn(2, 3, 200, 256)  # 1,200 rows: 157M and 56M multiply-adds, both past ONEDNN_PAYS
    with torch.inference_mode():
        out = model(x)
        torch.testing.assert_close(out, reference(x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 2 and out.shape == (2, 3, 200, 91)
    with torch.inference_mode():
        model(torch.randn(4, 256))  # a small product (524k and 186k multiply-adds): PyTorch's own
    assert len(calls) == 2


def test_changed_weights_are_read_as_they_are_and_training_uses_pytorchs_product():
    reference = _model()
    model = onednn_linears(copy.deepcopy(reference))
    x = torch.randn(1000, 256)
    with torch.no_grad():
        model(x)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, reference)]
    for m, optimizer in zip((model, reference), optimizers):
        m(x).square().mean().backward()  # with gradients: the module's usual product, which backpropagates
        optimizer.step()
    torch.testing.assert_close(model[0].weight, reference[0].weight)
    with torch.no_grad():
        torch.testing.assert_close(model(x), reference(x), rtol=1e-5, atol=1e-5)  # the stepped weights
        model.load_state_dict(_model().state_dict())
        torch.testing.assert_close(model(x), _model()(x), rtol=1e-5, atol=1e-5)  # the loaded ones


def test_attentions_packed_projections_go_through_onednn_and_compute_the_same(monkeypatch):
    torch.manual_seed(0)
    reference = MultiHeadAttention(256, 8, batch_first=True).eval()
    attention = onednn_linears(copy.deepcopy(reference))
    assert type(attention.out_proj) is OneDnnLinear
    calls = []
    original = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(onednn_linear.torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(1) or original(*a))
    x, memory = torch.randn(2, 100, 256), torch.randn(2, 625, 256)
    with torch.inference_mode():
        for query, key in ((x, x), (x, memory)):  # self-attention (W^Q|W^K|W^V), and W^Q then W^K|W^V
            torch.testing.assert_close(attention(query, key, key)[0], reference(query, key, key)[0], rtol=1e-5,
                                       atol=1e-5)
    assert len(calls) == 2 + 3  # the packed products and the output projection


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.ao's deprecation of its quantized tensors
def test_other_dtypes_and_quantized_linears_are_left_as_they_are():
    model = nn.Sequential(nn.Linear(256, 256), torch.ao.nn.quantized.dynamic.Linear(256, 256))
    onednn_linears(model)
    assert type(model[1]) is torch.ao.nn.quantized.dynamic.Linear
    model = nn.Sequential(nn.Linear(256, 256)).to(torch.bfloat16)
    onednn_linears(model)
    with torch.inference_mode():
        assert model(torch.randn(1000, 256, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_a_model_built_under_inference_mode_reads_its_changed_weights():
    with torch.inference_mode():  # its parameters are inference tensors
        model = onednn_linears(_model())
        x = torch.randn(1000, 256)
        first = model(x)
        model[0].weight.add_(1.0)
        assert not torch.allclose(model(x), first)
