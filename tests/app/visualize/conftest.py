"""Tiny translation and detection run folders with random weights, built in the test (no training)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from attnkit.storage import RunFolder, save_weights


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory) -> Path:
    from attnkit.translation.config import TranslationConfig
    from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
    from attnkit.translation.tokenizer import SubwordTokenizer

    sources = ["one two three", "four five six", "seven eight nine", "ten eleven twelve"] * 3
    targets = ["eins zwei drei", "vier fuenf sechs", "sieben acht neun", "zehn elf zwoelf"] * 3
    tokenizer = SubwordTokenizer.train(sources, targets, vocab_size=60)
    torch.manual_seed(0)
    model_config = Seq2SeqConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                                 source_vocab_size=tokenizer.source_vocab_size,
                                 target_vocab_size=tokenizer.target_vocab_size)
    config = TranslationConfig(preset="tiny", model=model_config, vocab_size=60, max_length=16, max_tokens=64,
                               beam_size=2)
    run = RunFolder.create(tmp_path_factory.mktemp("runs") / "translation", "translation", config.to_dict())
    tokenizer.save(run.path)
    save_weights(run.best_weights, Seq2SeqTransformer(model_config).state_dict(),
                 {"kind": "translation", "step": 1, "chrf": 20.5})  # as the loop writes it: the best metric's value
    run.log({"step": 1, "split": "train", "epoch": 0, "elapsed_s": 1.5, "loss": 4.0, "lr": 1e-3, "tokens_per_s": 100.0})
    run.log({"step": 1, "split": "valid", "epoch": 0, "loss": 3.5, "bleu": 1.25, "chrf": 20.5})
    return run.path


@pytest.fixture(scope="module")
def detection_run(tmp_path_factory) -> Path:
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import DetectionConfig, preset

    model_config, train_config = preset("tiny")
    config = DetectionConfig(model=model_config.__class__(**{**model_config.__dict__, "num_classes": 2}),
                             train=train_config, preset="tiny", data="explicit", class_names=("disc", "square"),
                             category_ids=(1, 2))
    run = RunFolder.create(tmp_path_factory.mktemp("runs") / "detection", "detection", config.to_dict())
    torch.manual_seed(0)
    save_weights(run.best_weights, build_model(config.model).state_dict(), {"kind": "detection", "step": 1})
    return run.path


@pytest.fixture(scope="module")
def fast_detection_run(tmp_path_factory) -> Path:
    """`detection_run` as `fast` (deformable attention, two-stage), its ResNet stopping after C4 (as `small`'s)."""
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import DetectionConfig, preset, with_arch

    model_config, train_config = preset("tiny")
    model_config = with_arch(model_config, "fast", num_classes=2, last_stage=4)
    config = DetectionConfig(model=model_config, train=train_config, preset="tiny", data="explicit",
                             class_names=("disc", "square"), category_ids=(1, 2))
    run = RunFolder.create(tmp_path_factory.mktemp("runs") / "fast", "detection", config.to_dict())
    torch.manual_seed(0)
    save_weights(run.best_weights, build_model(config.model).state_dict(), {"kind": "detection", "step": 1})
    return run.path


@pytest.fixture(scope="module")
def image_file(tmp_path_factory) -> Path:
    generator = torch.Generator().manual_seed(0)
    pixels = (torch.rand(80, 96, 3, generator=generator) * 255).to(torch.uint8).numpy()
    path = tmp_path_factory.mktemp("images") / "picture.png"
    Image.fromarray(pixels).save(path)
    return path
