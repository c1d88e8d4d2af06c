"""`attnkit attention` and `attnkit report` write valid pictures and pages, and fail like a tool."""

from __future__ import annotations

import base64
import io
import re

import torch
from PIL import Image
from typer.testing import CliRunner

from attnkit.app.cli import load_commands

runner = CliRunner()


def invoke(*args):
    return runner.invoke(load_commands(), [str(a) for a in args])


def assert_png(path, min_width: int = 200, min_height: int = 150) -> Image.Image:
    assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    image = Image.open(path)
    image.load()
    assert image.width >= min_width and image.height >= min_height, (path, image.size)
    return image


def test_translation_attention_maps(translation_run, tmp_path):
    result = invoke("attention", translation_run, "--text", "one two three", "--text", "ten eleven",
                    "--out", tmp_path)
    assert result.exit_code == 0, result.output
    for sentence in (1, 2):
        for name in ("alignment", "cross_layer1", "encoder_layer1", "decoder_layer1"):
            assert_png(tmp_path / f"sentence{sentence}_{name}.png")
    # two heads side by side: wider than the single averaged map of the same sentence
    assert assert_png(tmp_path / "sentence1_encoder_layer1.png").width > \
        assert_png(tmp_path / "sentence1_alignment.png").width * 0.9


def test_detection_attention_maps(detection_run, image_file, tmp_path):
    result = invoke("attention", detection_run, "--image", image_file, "--threshold", "0", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    objects = assert_png(tmp_path / "picture_objects.png", min_width=800, min_height=400)  # 4 panels, 2 rows
    encoder = assert_png(tmp_path / "picture_encoder.png", min_width=800)
    assert encoder.width > 3 * encoder.height and objects.height > encoder.height


def test_fast_attention_draws_sampling_points(fast_detection_run, image_file, tmp_path):
    result = invoke("attention", fast_detection_run, "--image", image_file, "--threshold", "0", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    stems = ("objects", "encoder", "proposals")
    assert result.output.split() == [str(tmp_path / f"picture_{stem}.png") for stem in stems]
    objects = assert_png(tmp_path / "picture_objects.png", min_width=800, min_height=500)  # 8 panels, 2 rows
    encoder = assert_png(tmp_path / "picture_encoder.png", min_width=1000)  # the image and 4 pixels, 1 row
    assert encoder.width > 3 * encoder.height and objects.height > encoder.height
    assert_png(tmp_path / "picture_proposals.png", min_width=600)


def test_positional_pictures_from_the_command_line(tmp_path):
    for kind in ("sinusoidal", "sine2d"):
        result = invoke("attention", "--positional", kind, "--length", "10", "--d-model", "16", "--out", tmp_path)
        assert result.exit_code == 0, result.output
        assert assert_png(tmp_path / f"positional_{kind}.png").size == (1650, 500)


def test_report_is_one_self_contained_page(translation_run, tmp_path):
    out = tmp_path / "page.html"
    result = invoke("report", translation_run, "--text", "four five six", "--out", out)
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    for heading in ("Config", "Curves", "Final metrics", "Sample predictions", "Timing"):
        assert f"<h2>{heading}</h2>" in page
    assert "four five six" in page and "Best chrf: <b>20.5</b> at step 1" in page
    assert "src='http" not in page and "src=\"http" not in page  # nothing to fetch
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 3  # curves, the sentence's alignment and its last layer's heads
    for data in images:
        picture = Image.open(io.BytesIO(base64.b64decode(data)))
        assert picture.format == "PNG" and picture.width >= 200


def test_report_of_a_detection_run(detection_run, image_file, tmp_path):
    out = tmp_path / "page.html"
    result = invoke("report", detection_run, "--image", image_file, "--out", out)
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "Image 1: picture.png" in page and "No metrics were logged yet" in page
    assert len(re.findall(r"data:image/png;base64,", page)) == 2  # objects, encoder


def test_report_of_a_fast_run_shows_its_sampling(fast_detection_run, image_file, tmp_path):
    out = tmp_path / "page.html"
    result = invoke("report", fast_detection_run, "--image", image_file, "--out", out)
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "<h2>Sample predictions</h2>" in page and "Image 1: picture.png" in page
    assert "class='error'" not in page and "Zhu et al. 2021" in page
    assert len(re.findall(r"data:image/png;base64,", page)) == 3  # objects, encoder, proposals


def test_bad_input_exits_2_with_one_message(translation_run, detection_run, tmp_path):
    cases = [
        (["attention", "--positional", "spiral", "--out", tmp_path], "--positional must be one of"),
        (["attention", "--out", tmp_path], "give a RUN folder"),
        (["attention", translation_run, "--image", "x.png", "--out", tmp_path], "give sentences with --text"),
        (["attention", detection_run, "--image", tmp_path / "missing.png", "--out", tmp_path], "missing.png"),
        (["attention", "--positional", "learned", translation_run, "--out", tmp_path], "not a learned table"),
        (["report", tmp_path / "nothing"], "no run folder"),
        (["report", detection_run, "--image", tmp_path / "missing.png"], "missing.png"),
    ]
    for argv, message in cases:
        result = invoke(*argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "Traceback" not in result.output and message in result.output, (argv, result.output)


def test_learned_positions_of_a_run_are_drawn_from_its_weights(tmp_path):
    from attnkit.storage import RunFolder, save_weights
    from attnkit.translation.config import TranslationConfig
    from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
    from attnkit.translation.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.train(["a b c d"] * 4, ["e f g h"] * 4, vocab_size=30)
    torch.manual_seed(0)
    model_config = Seq2SeqConfig(d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16,
                                 positional_encoding="learned", max_positions=20,
                                 source_vocab_size=tokenizer.source_vocab_size,
                                 target_vocab_size=tokenizer.target_vocab_size)
    run = RunFolder.create(tmp_path / "run", "translation",
                           TranslationConfig(model=model_config, vocab_size=30, max_length=16, max_tokens=64).to_dict())
    tokenizer.save(run.path)
    save_weights(run.best_weights, Seq2SeqTransformer(model_config).state_dict())
    result = invoke("attention", "--positional", "learned", run.path, "--out", tmp_path / "pictures")
    assert result.exit_code == 0, result.output
    assert_png(tmp_path / "pictures" / "positional_learned.png")
