"""`--arch rnn` in the translation system: the same config file, task, Trainer, run folder and Translator."""

import dataclasses

import pytest
import torch

from attnkit.app.translation.recipe import TranslationTask, prepare
from attnkit.baselines import BahdanauRNN, BahdanauRNNConfig
from attnkit.errors import CheckpointError, ConfigError
from attnkit.storage import RunFolder, save_weights
from attnkit.training import Budget, LoopConfig, Trainer
from attnkit.translation.config import TranslationConfig, build_model, preset, with_architecture
from attnkit.translation.data import Corpus, ReadReport, SentencePair
from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.translation.translator import Translator

WORDS = ["one", "two", "three", "four", "five", "six"]
PAIRS = [SentencePair(f"{a} {b}", f"{b} {a}") for a in WORDS for b in WORDS]  # swap two words


def splits() -> dict[str, Corpus]:
    return {"train": Corpus(PAIRS, ReadReport("train", len(PAIRS))), "valid": Corpus(PAIRS[:4], ReadReport("valid", 4))}


def tiny_rnn_config() -> TranslationConfig:
    model = BahdanauRNNConfig(embedding_dim=16, hidden_size=16, attention_dim=16, dropout=0.0)
    return dataclasses.replace(with_architecture(preset("tiny"), "rnn"), model=model, vocab_size=40, max_tokens=64,
                               max_length=16, warmup_steps=5, eval_sentences=4)


def test_rnn_recipe_has_the_transformers_parameter_count_and_round_trips():
    transformer = preset("tiny")
    rnn = with_architecture(transformer, "rnn")
    assert rnn.arch == "rnn" and isinstance(rnn.model, BahdanauRNNConfig)
    assert dataclasses.replace(rnn, arch="transformer", model=transformer.model) == transformer  # same recipe otherwise
    assert TranslationConfig.from_dict(rnn.to_dict()) == rnn
    vocab = {"source_vocab_size": 500, "target_vocab_size": 500}
    counts = [sum(p.numel() for p in build_model(dataclasses.replace(c, model=dataclasses.replace(c.model, **vocab)))
                  .parameters()) for c in (transformer, rnn)]
    assert abs(counts[1] - counts[0]) / counts[0] < 0.01
    with pytest.raises(ConfigError, match="unknown arch 'lstm'"):
        with_architecture(transformer, "lstm")
    with pytest.raises(ConfigError, match="unknown config key"):
        TranslationConfig.from_dict({**rnn.to_dict(), "arch": "transformer"})  # RNN sizes are not a Transformer's


def test_trainer_trains_the_rnn_and_the_translator_loads_it(tmp_path):
    torch.manual_seed(0)
    prepared = prepare(tiny_rnn_config(), splits())
    run = RunFolder.create(tmp_path / "run", "translation", prepared.config.to_dict())
    prepared.tokenizer.save(run.path)
    task = TranslationTask(prepared.config, prepared.tokenizer, prepared.train, splits()["valid"])
    assert isinstance(task.model, BahdanauRNN)
    result = Trainer(task, run, Budget(steps=4), LoopConfig(checkpoint_every_minutes=None), progress=False).fit()
    assert result.step == 4 and result.last_loss is not None
    translator = Translator.from_run(run.path, weights="last", device="cpu")
    assert isinstance(translator.model, BahdanauRNN)
    assert len(translator.translate(["one two", "three four"], beam_size=2)) == 2


def test_translator_refuses_weights_of_the_other_architecture(tmp_path):
    prepared = prepare(tiny_rnn_config(), splits())
    rnn_config = prepared.config
    transformer_model = Seq2SeqConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                                      source_vocab_size=rnn_config.model.source_vocab_size,
                                      target_vocab_size=rnn_config.model.target_vocab_size)
    transformer_config = dataclasses.replace(rnn_config, arch="transformer", model=transformer_model)
    for config, weights_of, found in ((transformer_config, BahdanauRNN(rnn_config.model), "an RNN encoder-decoder"),
                                      (rnn_config, Seq2SeqTransformer(transformer_model), "a Transformer")):
        run = RunFolder.create(tmp_path / config.arch, "translation", config.to_dict())
        prepared.tokenizer.save(run.path)
        save_weights(run.last_weights, weights_of.state_dict())
        expected = "a Transformer" if config.arch == "transformer" else "an RNN encoder-decoder"
        with pytest.raises(CheckpointError, match=rf"holds the weights of {found}.* but this model is {expected}"):
            Translator.from_run(run.path, weights="last", device="cpu")
