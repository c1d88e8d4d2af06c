"""int8 through ONNX Runtime and the command line: `export onnx --int8` writes graphs with integer MatMuls that
ONNX Runtime runs near float32; `--quantize int8` works in translate and detect, `--quantize int4` is refused."""

from __future__ import annotations

import json

import pytest

onnx = pytest.importorskip("onnx", reason="the optional extra `onnx` is not installed")
import numpy as np
import torch
from PIL import Image
from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.app.export.onnx_export import MANIFEST


@pytest.fixture(scope="module")
def translator_int8_export(translation_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx") / "translator"
    result = CliRunner().invoke(load_commands(), ["export", "onnx", str(translation_run), "--out", str(folder),
                                                  "--int8"])
    assert result.exit_code == 0, result.output
    return folder


def test_export_int8_writes_integer_graphs_beside_the_float_ones(translator_int8_export):
    manifest = json.loads((translator_int8_export / MANIFEST).read_text())
    assert manifest["int8_graphs"] == ["encoder.int8.onnx", "decoder_step.int8.onnx"]
    for float_name, int8_name in zip(manifest["graphs"], manifest["int8_graphs"]):
        ops = {node.op_type for node in onnx.load(str(translator_int8_export / int8_name)).graph.node}
        float_ops = {node.op_type for node in onnx.load(str(translator_int8_export / float_name)).graph.node}
        assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops, ops
        assert "MatMulInteger" not in float_ops


def test_every_weight_product_of_a_decoder_step_is_integer_the_tied_output_projection_too(translator_int8_export):
    graph = onnx.load(str(translator_int8_export / "decoder_step.int8.onnx")).graph
    layers = json.loads((translator_int8_export / MANIFEST).read_text())["layers"]
    integer = [node for node in graph.node if node.op_type == "MatMulInteger"]
    # per layer W^Q W^K W^V (packed), W^O, cross-attention's W^Q and W^O, W1, W2; then the output projection
    assert len(integer) == 6 * layers + 1
    initializers = {tensor.name: tuple(tensor.dims) for tensor in graph.initializer}
    vocab = initializers["embed.table.weight"][0]
    assert any(initializers.get(node.input[1], ())[-1:] == (vocab,) for node in integer)  # (d_model, vocab) int8
    assert all(node.input[1] not in initializers for node in graph.node if node.op_type == "MatMul")  # Q K^T, A V


def test_int8_decoder_step_runs_near_float(translator_int8_export):
    from attnkit.app.export.ort_translator import OrtTranslator

    reference, quantized = OrtTranslator(translator_int8_export), OrtTranslator(translator_int8_export, quantize="int8")
    source = torch.tensor([[7, 8, 9, 10, 2], [11, 12, 2, 0, 0]])  # (batch, source), padded
    prefix = torch.tensor([[1, 7], [1, 9]])  # (batch, target so far)
    logits = [model.model.decode_step(prefix, model.model.encode(source, source == 0), None)
              for model in (reference, quantized)]  # (batch, vocab) each
    assert not torch.equal(logits[0], logits[1])
    torch.testing.assert_close(logits[1], logits[0], atol=0.1, rtol=0)
    assert len(quantized.translate(["one two three", "ten"], beam_size=2)) == 2


@pytest.mark.parametrize("backend", ["pytorch", "onnxruntime"])
def test_translate_command_quantize_int8(translation_run, translator_int8_export, backend):
    run = translation_run if backend == "pytorch" else translator_int8_export
    result = CliRunner().invoke(load_commands(), ["translate", str(run), "one two", "ten", "--beam-size", "2",
                                                  "--backend", backend, "--quantize", "int8"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 2


def test_detect_command_quantize_int8_through_both_backends(detection_run, tmp_path):
    image = tmp_path / "picture.png"
    Image.fromarray((np.random.default_rng(0).random((80, 96, 3)) * 255).astype(np.uint8)).save(image)
    runner = CliRunner()
    for backend in ("pytorch", "onnxruntime"):
        out = tmp_path / backend
        result = runner.invoke(load_commands(), ["detect", str(detection_run), str(image), "--out", str(out),
                                                 "--threshold", "0", "--backend", backend, "--quantize", "int8"])
        assert result.exit_code == 0, result.output
        assert (out / "picture.png").is_file()
    manifest = json.loads((detection_run / "onnx" / MANIFEST).read_text())
    assert manifest["int8_graphs"] == ["detector.int8.onnx"]  # written on first use


@pytest.mark.parametrize("command", ["translate", "detect"])
def test_an_unknown_quantize_value_exits_2_with_a_message(translation_run, detection_run, tmp_path, command):
    args = ["translate", str(translation_run), "ten"] if command == "translate" else \
        ["detect", str(detection_run), str(tmp_path / "x.png"), "--out", str(tmp_path)]
    result = CliRunner().invoke(load_commands(), [*args, "--quantize", "int4"])
    assert result.exit_code == 2
    assert "--quantize must be int8" in result.output and "'int4'" in result.output
    assert "Traceback" not in result.output
