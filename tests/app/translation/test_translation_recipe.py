"""Training through attnkit.training: a stopped run resumed continues with identical losses."""

from __future__ import annotations

import dataclasses

from attnkit.app.translation.recipe import TranslationTask, prepare
from attnkit.storage import RunFolder
from attnkit.training import Budget, LoopConfig, Trainer
from attnkit.translation.config import TranslationConfig, override, preset
from attnkit.translation.numbers import NumbersSpec, numbers_splits
from attnkit.translation.translator import Translator

SPEC = NumbersSpec(max_number=200, valid_size=8, test_size=8)


def tiny_config() -> TranslationConfig:
    return override(preset("tiny"), ["model.d_model=32", "model.num_heads=2", "model.d_ff=64", "vocab_size=200",
                                     "max_tokens=200", "max_length=64", "warmup_steps=20", "eval_sentences=8",
                                     "model.num_encoder_layers=1", "model.num_decoder_layers=1"])


def train(out, steps: int, resume: bool = False) -> RunFolder:
    splits = numbers_splits(SPEC)
    prepared = prepare(tiny_config(), splits, tokenizer_folder=out if resume else None)
    run = RunFolder.create(out, "translation", prepared.config.to_dict(), resume=resume)
    if not resume:
        prepared.tokenizer.save(run.path)
    task = TranslationTask(prepared.config, prepared.tokenizer, prepared.train, splits["valid"])
    loop = LoopConfig(log_every_steps=1, eval_every_steps=None, checkpoint_every_minutes=None, average_last=2)
    Trainer(task, run, Budget(steps=steps), loop, progress=False).fit(resume=resume)
    return run


def train_losses(run: RunFolder) -> list[float]:
    return [record["loss"] for record in run.metrics() if record["split"] == "train"]


def test_resume_continues_with_identical_losses(tmp_path):
    straight = train_losses(train(tmp_path / "straight", steps=8))
    train(tmp_path / "stopped", steps=4)
    resumed = train_losses(train(tmp_path / "stopped", steps=8, resume=True))
    assert len(straight) == 8
    assert resumed == straight  # bit for bit on CPU


def test_run_folder_reloads_as_translator(tmp_path):
    run = train(tmp_path / "run", steps=3)
    assert (run.path / "tokenizer.json").is_file() and run.best_weights.is_file()
    config = TranslationConfig.from_dict(run.config)
    assert config.model.source_vocab_size > 4 and dataclasses.asdict(config) == dataclasses.asdict(
        TranslationConfig.from_dict(config.to_dict()))
    translator = Translator.from_run(run.path)
    out = translator.translate(["seventy-one", "twelve"], beam_size=2)
    assert len(out) == 2 and all(isinstance(line, str) for line in out)
    assert translator.translate(["seventy-one", "twelve"], beam_size=1) == \
        translator.translate(["seventy-one", "twelve"], beam_size=1)


def test_separate_vocabularies_give_separate_source_embedding():
    splits = numbers_splits(SPEC)
    prepared = prepare(override(tiny_config(), ["joint_vocab=false"]), splits)
    assert not prepared.tokenizer.joint and not prepared.config.model.share_embeddings
    task = TranslationTask(prepared.config, prepared.tokenizer, prepared.train[:4], splits["valid"])
    assert task.model.source_embedding is not task.model.target_embedding
    assert task.model.source_embedding.num_embeddings == prepared.tokenizer.source_vocab_size
