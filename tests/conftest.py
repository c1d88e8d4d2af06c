"""Shared test setup, and tiny translation and detection run folders with random weights.

One intra-op thread: the tests use tiny tensors, where torch's thread pool costs more than it
saves, and on a busy machine its threads wait on each other (the suite ran about 4x slower).
"""

from pathlib import Path

import pytest
import torch

from attnkit.training import RunFolder, save_weights

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def translation_run(tmp_path_factory) -> Path:
    from attnkit.translation.config import TranslationConfig
    from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
    from attnkit.translation.tokenizer import SubwordTokenizer

    sources = ["one two three", "four five six", "seven eight nine", "ten eleven twelve"] * 3
    targets = ["eins zwei drei", "vier fuenf sechs", "sieben acht neun", "zehn elf zwoelf"] * 3
    tokenizer = SubwordTokenizer.train(sources, targets, vocab_size=60)
    torch.manual_seed(0)
    model_config = Seq2SeqConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=32,
                                 source_vocab_size=tokenizer.source_vocab_size,
                                 target_vocab_size=tokenizer.target_vocab_size)
    config = TranslationConfig(preset="tiny", model=model_config, vocab_size=60, max_length=16, max_tokens=64,
                               beam_size=2)
    run = RunFolder.create(tmp_path_factory.mktemp("runs") / "translation", "translation", config.to_dict())
    tokenizer.save(run.path)
    save_weights(run.best_weights, Seq2SeqTransformer(model_config).state_dict(), {"kind": "translation", "step": 1})
    return run.path


@pytest.fixture(scope="session")
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
