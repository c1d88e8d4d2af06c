"""ONNX export: the graphs pass onnx.checker, and ONNX Runtime gives PyTorch's detections (within 1e-4)
and PyTorch's greedy token ids, through the library and through `--backend onnxruntime`."""

from __future__ import annotations

import json

import pytest

onnx = pytest.importorskip("onnx", reason="the optional extra `onnx` is not installed")
import torch
from PIL import Image
from typer.testing import CliRunner

from attnkit.app.cli import load_commands
from attnkit.app.export.onnx_export import MANIFEST, OPSET, export_run


@pytest.fixture(scope="module")
def detector_export(detection_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx") / "detector"
    export_run(detection_run, folder)
    return folder


@pytest.fixture(scope="module")
def translator_export(translation_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("onnx") / "translator"
    export_run(translation_run, folder)
    return folder


def _image(width: int, height: int, seed: int) -> Image.Image:
    generator = torch.Generator().manual_seed(seed)
    return Image.fromarray((torch.rand(height, width, 3, generator=generator) * 255).to(torch.uint8).numpy())


def test_detector_graph_is_checked_and_records_its_opset(detector_export):
    manifest = json.loads((detector_export / MANIFEST).read_text())
    model = onnx.load(str(detector_export / manifest["graphs"][0]))
    onnx.checker.check_model(model, full_check=True)
    assert manifest["opset"] == OPSET
    assert any(entry.domain in ("", "ai.onnx") and entry.version == OPSET for entry in model.opset_import)
    batch = {tuple(d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim) for i in model.graph.input}
    assert all(not isinstance(shape[0], int) for shape in batch)  # a dynamic batch axis on every input


def test_onnxruntime_detections_match_pytorch(detection_run, detector_export):
    from attnkit.app.export.ort_detector import OrtDetector
    from attnkit.detection.detector import Detector

    reference, runtime = Detector.from_run(detection_run, device="cpu"), OrtDetector(detector_export)
    for width, height, seed in ((96, 80, 0), (64, 120, 1)):  # two image sizes: dynamic height and width
        expected = reference.predict(_image(width, height, seed), 0.0)[0]
        got = runtime.predict(_image(width, height, seed), 0.0)[0]
        torch.testing.assert_close(got.scores, expected.scores, atol=1e-4, rtol=0)
        torch.testing.assert_close(got.boxes, expected.boxes, atol=1e-4 * max(width, height), rtol=1e-4)
        assert got.names == expected.names


def test_the_detector_session_does_not_spin_idle_threads(detector_export):
    """Its torch preprocessing's threads spin when idle; ONNX Runtime's spinning too made calls up to 3.4x slower."""
    from attnkit.app.export.ort_detector import OrtDetector

    options = OrtDetector(detector_export, threads=2).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.intra_op_num_threads == 2


def test_onnxruntime_greedy_tokens_equal_pytorch(translation_run, translator_export):
    from attnkit.app.export.ort_translator import OrtTranslator
    from attnkit.translation.decoding import greedy_decode
    from attnkit.translation.translator import Translator

    reference, runtime = Translator.from_run(translation_run, device="cpu"), OrtTranslator(translator_export)
    for name in ("encoder.onnx", "decoder_step.onnx"):
        onnx.checker.check_model(str(translator_export / name), full_check=True)
    source = torch.tensor([[7, 8, 9, 10, 11, 2], [12, 13, 2, 0, 0, 0]])  # (batch, source), padded
    assert greedy_decode(runtime.model, source) == greedy_decode(reference.model, source)
    texts = ["one two three", "seven eight", "ten"]
    assert runtime.translate(texts, beam_size=1) == reference.translate(texts, beam_size=1)
    assert runtime.translate(texts, beam_size=2) == reference.translate(texts, beam_size=2)


def test_detect_command_with_onnxruntime(detection_run, detector_export, tmp_path):
    image = tmp_path / "picture.png"
    _image(96, 80, 0).save(image)
    runner = CliRunner()
    outputs = {}
    for backend, run in (("pytorch", detection_run), ("onnxruntime", detector_export)):
        result = runner.invoke(load_commands(), ["detect", str(run), str(image), "--out", str(tmp_path / backend),
                                                 "--threshold", "0", "--json", "--backend", backend, "--device", "cpu"])
        assert result.exit_code == 0, result.output
        outputs[backend] = json.loads((tmp_path / backend / "detections.json").read_text())
    for got, expected in zip(outputs["onnxruntime"], outputs["pytorch"]):
        assert got["category_id"] == expected["category_id"]
        torch.testing.assert_close(torch.tensor(got["bbox"]), torch.tensor(expected["bbox"]), atol=0.02, rtol=0)


def test_export_refuses_what_is_not_a_run(tmp_path):
    result = CliRunner().invoke(load_commands(), ["export", "onnx", str(tmp_path), "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "error:" in result.output


def test_fast_detector_exports_and_matches_pytorch_on_a_padded_batch(tmp_path):
    """`fast` (deformable attention, two-stage, kept geometry) through ONNX Runtime, padding included."""
    import onnxruntime

    from attnkit.app.export.detector_graph import DetectorGraph
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import DetectionConfig, preset, with_arch
    from attnkit.storage import RunFolder, save_weights

    model_config, train_config = preset("tiny")
    config = DetectionConfig(model=with_arch(model_config, "fast", num_classes=2, last_stage=4), train=train_config,
                             preset="tiny", data="explicit", class_names=("disc", "square"), category_ids=(1, 2))
    run = RunFolder.create(tmp_path / "fast", "detection", config.to_dict())
    torch.manual_seed(0)
    model = build_model(config.model).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # the zero-started box heads move too
            parameter.add_(torch.randn_like(parameter) * 0.02)
    save_weights(run.best_weights, model.state_dict(), {"kind": "detection", "step": 1})
    export_run(run.path, tmp_path / "onnx")
    graph = tmp_path / "onnx" / json.loads((tmp_path / "onnx" / MANIFEST).read_text())["graphs"][0]
    session = onnxruntime.InferenceSession(str(graph))
    images, mask = torch.randn(2, 3, 64, 96), torch.zeros(2, 64, 96, dtype=torch.bool)
    sizes = torch.tensor([[64, 96], [40, 60]])
    for padded in (False, True):
        mask[1, 40:], mask[1, :, 60:] = padded, padded  # the second image smaller: padded below and right
        got = session.run(None, {"images": images.numpy(), "mask": mask.numpy(), "image_sizes": sizes.numpy()})
        with torch.no_grad():
            expected = DetectorGraph(model)(images, mask, sizes)
        torch.testing.assert_close(torch.from_numpy(got[0]), expected[0], atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.from_numpy(got[2]), expected[2], atol=1e-2, rtol=1e-4)
