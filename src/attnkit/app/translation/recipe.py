"""Training a translation model: `train(TranslationRequest)`, the `TrainingTask` that `attnkit.training.Trainer` runs.

The recipe of Vaswani et al. 2017, section 5: batches of about `max_tokens` tokens grouped by
length, Adam(beta1 0.9, beta2 0.98, eps 1e-9), the inverse-square-root warm-up schedule (Eq. 3),
dropout, label smoothing 0.1; validation by BLEU of greedy translations (plus loss and chrF).
`train` resolves the config, reads the data, trains and scores the test split: the whole of
`attnkit train translation`; `train_run` trains a config on splits already read (the demo, benchmarks);
`prepare` turns a config and corpus splits into the tokenizer, the examples and the task's inputs.
With `init` (a translation run, a Marian folder or Hub id: `attnkit.app.interop.pretrained`) the run
starts from that model: its config, tokenizer (an opus-mt import keeps its SentencePiece
vocabularies) and weights; the corpus only supplies the data.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnkit.app.interop.pretrained import init_run
from attnkit.app.interop.weights_files import load_all_or_nothing
from attnkit.baselines.bahdanau_rnn import BahdanauRNNConfig
from attnkit.errors import ConfigError, refuse_changes
from attnkit.storage import RunFolder, read_weights
from attnkit.training import Budget, FitResult, LoopConfig, Trainer, distributed, plot_curves
from attnkit.training.fused_optimizer import fused_options
from attnkit.training.messages import note
from attnkit.training.precision import resolve_amp
from attnkit.translation.batching import (
    Batch,
    Example,
    TokenBatches,
    collate,
    make_examples,
    padding_fraction,
    token_batches,
)
from attnkit.translation.config import (
    TranslationConfig,
    build_model,
    check_kept,
    default_preset_name,
    override,
    preset,
    with_architecture,
)
from attnkit.translation.data import Corpus, is_built_in, load_splits, split_paths
from attnkit.translation.encoded_pairs import EncodedPairs
from attnkit.translation.evaluate import score
from attnkit.translation.losses import label_smoothed_cross_entropy
from attnkit.translation.prepared_corpus import CorpusFiles, TokenizerSettings, prepare_corpus
from attnkit.translation.schedule import inverse_sqrt_lr
from attnkit.translation.tokenizer import SubwordTokenizer
from attnkit.translation.translator import Translator, translate_texts


@dataclass(frozen=True)
class TranslationRequest:
    """What `attnkit train translation` collected: where to write, for how long, which data, model and device."""

    out: Path
    budget: Budget
    data: str | None = None  # numbers:de, or a folder of train.*, valid.* (and test.*)
    train_file: Path | None = None  # --train, --valid, --test: split files instead of (or over) DATA's
    valid_file: Path | None = None
    test_file: Path | None = None
    preset: str | None = None  # default: tiny on a CPU, base on a GPU
    arch: str | None = None  # transformer, or rnn (the baseline)
    source_lang: str | None = None
    target_lang: str | None = None
    assignments: tuple[str, ...] = ()  # --set KEY=VALUE (and --amp, --accumulate)
    resume: bool = False
    device: torch.device = torch.device("cpu")
    skip_bad_lines: bool = False
    compile: bool = False
    progress: bool = True
    init: str | Path | None = None  # a model to fine-tune: a translation run, a Marian folder or Hub id


def train(request: TranslationRequest) -> FitResult:
    """Resolve the config, read the data, train in the run folder OUT and score the test split, if there is one."""
    init = None if request.resume or request.init is None else init_run(request.init, "translation")
    config = resolve_config(request, init)
    resolve_amp(config.amp, request.device)  # fp16 on a CPU: an error now, before the data is read
    files = {"train": request.train_file, "valid": request.valid_file, "test": request.test_file}
    data: Mapping[str, Corpus] | CorpusFiles
    if is_built_in(request.data):
        data = load_splits(request.data, files, config.source_lang, config.target_lang,
                           skip_bad=request.skip_bad_lines)
        for corpus in data.values():
            note(f"data: {corpus.report.summary()}")
    else:  # files: prepared once into token arrays (prepared_corpus.py)
        data = CorpusFiles(split_paths(request.data, files), config.source_lang, config.target_lang,
                           skip_bad=request.skip_bad_lines)
    run, result, evaluation = _train(config, data, request.out, request.budget, request.device, request.resume,
                                     request.progress, request.compile, init)
    if "test" in evaluation and distributed.is_main():
        _report_test(run.path, evaluation["test"], config.beam_size)
    note(f"run folder: {run.path}")
    return result


def resolve_config(request: TranslationRequest, init: Path | None = None) -> TranslationConfig:
    """The preset (or INIT's config) with the request's overrides; on resume, the run's config.json (ConfigError
    if asked to differ)."""
    languages = [f"source_lang={json.dumps(request.source_lang)}"] if request.source_lang else []
    languages += [f"target_lang={json.dumps(request.target_lang)}"] if request.target_lang else []
    assignments, out = list(request.assignments), request.out
    if request.resume and (out / "config.json").is_file():
        config = TranslationConfig.from_dict(RunFolder.open(out, "translation").config)
        note(f"preset: {config.preset} (from {out / 'config.json'})")
        refuse_changes(config.to_dict(), {"arch": request.arch}, ["arch"] if request.arch else [])  # sizes change
        named = [f"preset={request.preset}"] if request.preset else []
        check_kept(config, named + languages + assignments)  # no option may silently differ from config.json
        return config
    if init is not None:
        return _init_config(request, init, languages + assignments)
    name = request.preset
    if name is None:
        name = default_preset_name(request.device.type == "cuda")
        note(f"preset: {name} (the default on this machine, {request.device.type}; choose with --preset)")
    else:
        note(f"preset: {name}")
    config = override(with_architecture(preset(name), request.arch or "transformer"), languages + assignments)
    if assignments:
        note(f"overrides: {', '.join(assignments)}")
    return config


def _init_config(request: TranslationRequest, init: Path, assignments: list[str]) -> TranslationConfig:
    """INIT's config (model, vocabulary, decoding) with the request's overrides; --preset and --arch would
    contradict the model fine-tuned, so they are refused."""
    if request.preset or request.arch:
        raise ConfigError("--init gives the model: drop --preset and --arch (change other settings with --set)")
    config = override(TranslationConfig.from_dict(RunFolder.open(init, "translation").config), assignments)
    note(f"config: from {request.init} (model, vocabulary, decoding)"
         + (f"; overrides: {', '.join(assignments)}" if assignments else ""))
    return config


class TranslationTask:
    """Model, optimizer, schedule and data of one run; an `attnkit.training.TrainingTask`."""

    items_name = "tokens"

    def __init__(self, config: TranslationConfig, tokenizer: SubwordTokenizer, train: EncodedPairs | Sequence[Example],
                 valid: Corpus, device: torch.device | str = "cpu") -> None:
        if not isinstance(train, EncodedPairs):  # examples' sources end with </s>, which EncodedPairs adds itself
            train = EncodedPairs.from_lists([e.source[:-1] for e in train], [e.target for e in train])
        self.config, self.tokenizer, self.examples, self.device = config, tokenizer, train, torch.device(device)
        self.best_metric = (config.best_metric, "min" if config.best_metric == "loss" else "max")
        torch.manual_seed(config.seed)
        self.model = build_model(config).to(self.device)
        # lr 1.0: `lr_factor` is the rate itself
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=config.adam_betas, eps=config.adam_eps,
                                          **fused_options(self.device))
        self.lengths = train.lengths  # (pairs, 2), a byte or two each: no object per pair
        self.valid = Corpus(valid.pairs[:config.eval_sentences], valid.report)
        sources = tokenizer.encode_source([p.source for p in self.valid.pairs])
        targets = tokenizer.encode_target([p.target for p in self.valid.pairs])
        self.valid_examples, _ = make_examples(sources, targets, config.max_length)

    def lr_factor(self, step: int, budget_spent: float) -> float:
        """Eq. 3 at the next update, step + 1 (it follows the steps, not the budget)."""
        config = self.config
        return inverse_sqrt_lr(step + 1, config.model.d_model, config.warmup_steps, config.lr_scale)

    def batches(self, epoch: int) -> TokenBatches:
        """The epoch's batches as example indices, the same in the same order for the same epoch (seeded)."""
        return token_batches(self.lengths, self.config.max_tokens, seed=self.config.seed * 100_003 + epoch)

    def load(self, batches: Sequence[np.ndarray]) -> Iterator[Batch]:
        for indices in batches:  # this process's batches only: their rows are read from the arrays' files
            yield self.examples.batch(indices).to(self.device)

    def train_step(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor | int]:
        logits = model(batch.source, batch.target_input)  # (batch, target_length, vocab)
        tokens = batch.target_tokens
        loss = label_smoothed_cross_entropy(logits, batch.target_output, self.config.label_smoothing) / tokens
        return {"loss": loss, "items": tokens + batch.source_tokens}

    def evaluate(self) -> dict[str, float]:
        """Validation loss per target token, and BLEU / chrF / exact match of greedy translations."""
        total, tokens = 0.0, 0
        lengths = [e.lengths for e in self.valid_examples]
        for indices in token_batches(lengths, self.config.max_tokens, shuffle=False):
            batch = collate([self.valid_examples[i] for i in indices]).to(self.device)
            logits = self.model(batch.source, batch.target_input)
            total += float(label_smoothed_cross_entropy(logits, batch.target_output, self.config.label_smoothing))
            tokens += batch.target_tokens
        hypotheses = translate_texts(self.model, self.tokenizer, [p.source for p in self.valid.pairs], beam_size=1,
                                     max_tokens=4 * self.config.max_tokens, max_length=self.config.max_length)
        scores = score(hypotheses, [p.target for p in self.valid.pairs],
                       self.config.target_lang or self.valid.target_lang)
        return {"loss": total / max(tokens, 1), "bleu": scores.bleu, "chrf": scores.chrf,
                "exact_match": scores.exact_match}

    def state(self) -> dict:
        return {}  # the batches follow from (seed, epoch): nothing else to resume

    def load_state(self, state: dict) -> None:
        pass


@dataclass
class Prepared:
    config: TranslationConfig  # with the vocabulary sizes filled in
    tokenizer: SubwordTokenizer
    train: EncodedPairs  # the pairs within max_length
    skipped_long: int
    padding: float  # padding fraction of the first epoch's batches
    evaluation: dict[str, Corpus] = dataclasses.field(default_factory=dict)  # valid (and test) as text


def prepare(config: TranslationConfig, splits: Mapping[str, Corpus] | CorpusFiles,
            tokenizer_folder: Path | None = None) -> Prepared:
    """The tokenizer (trained on train, or loaded from a run folder), the vocabulary sizes filled in, train tokenized.

    SPLITS in memory are tokenized here; split files (`CorpusFiles`) are prepared once into a cache beside them
    and read from it afterwards (`prepared_corpus.py`), resumes included.
    """
    tokenizer = SubwordTokenizer.load(tokenizer_folder) if tokenizer_folder is not None else None
    if isinstance(splits, CorpusFiles) and not isinstance(tokenizer, (SubwordTokenizer, type(None))):
        splits = splits.read()  # an imported SentencePiece vocabulary: tokenized in memory, not cached
    if isinstance(splits, CorpusFiles):
        corpus = prepare_corpus(splits, tokenizer or TokenizerSettings(config.vocab_size, config.joint_vocab),
                                say=note)
        for summary in corpus.summaries():
            note(f"data: {summary}")
        tokenizer, encoded = corpus.tokenizer, corpus.encoded("train")
        evaluation = {split: corpus.texts(split) for split in corpus.splits if split != "train"}
    else:
        train = splits["train"].pairs
        if tokenizer is None:
            tokenizer = SubwordTokenizer.train([p.source for p in train], [p.target for p in train],
                                               config.vocab_size, joint=config.joint_vocab)
        encoded = EncodedPairs.from_lists(tokenizer.encode_source([p.source for p in train]),
                                          tokenizer.encode_target([p.target for p in train]))
        evaluation = {split: corpus for split, corpus in splits.items() if split != "train"}
    model = dataclasses.replace(config.model, source_vocab_size=tokenizer.source_vocab_size,
                                target_vocab_size=tokenizer.target_vocab_size,
                                share_embeddings=config.model.share_embeddings and tokenizer.joint)
    config = dataclasses.replace(config, model=model)
    examples, skipped = encoded.keep(config.max_length)
    lengths = examples.lengths
    padding = padding_fraction(token_batches(lengths, config.max_tokens, seed=config.seed), lengths)
    return Prepared(config, tokenizer, examples, skipped, padding, evaluation)


def train_run(config: TranslationConfig, splits: Mapping[str, Corpus] | CorpusFiles, out: Path, budget: Budget,
              device: torch.device, resume: bool = False, progress: bool = True, compile: bool = False) -> RunFolder:
    """Train CONFIG on SPLITS in the run folder OUT until BUDGET is spent; returns the run folder."""
    return _train(config, splits, out, budget, device, resume, progress, compile)[0]


def _train(config: TranslationConfig, splits: Mapping[str, Corpus] | CorpusFiles, out: Path, budget: Budget,
           device: torch.device, resume: bool, progress: bool, compile: bool, init: Path | None = None
           ) -> tuple[RunFolder, FitResult, dict[str, Corpus]]:
    """Prepare the data, create (or reopen) the run folder OUT and train; the run, the Trainer's result and the
    evaluation splits (valid, and test if there is one).

    init: a translation run whose tokenizer and best weights the new run starts from (not on resume).

    compile: train through torch.compile (`LoopConfig.compile`); the saved weights are the same either way.
    """
    from attnkit.app.visualize.report import report_at_end  # matplotlib: imported when training

    device = distributed.setup(device)  # under torchrun: join the process group, this process's GPU
    with distributed.main_first():  # rank 0 trains the tokenizer and creates OUT; the others read them
        reopen = resume or not distributed.is_main()
        prepared = prepare(config, splits, tokenizer_folder=out if reopen else init)
        config = prepared.config
        run = RunFolder.create(out, "translation", config.to_dict(), resume=resume) if distributed.is_main() \
            else RunFolder.open(out, "translation")
        if not reopen:
            prepared.tokenizer.save(run.path)
    amp = resolve_amp(config.amp, device)
    describe(prepared, device, amp)
    task = TranslationTask(config, prepared.tokenizer, prepared.train, prepared.evaluation["valid"], device)
    if init is not None and not resume:
        _load_init(task.model, init)
    loop = LoopConfig(eval_every_minutes=config.eval_every_minutes, checkpoint_every_minutes=config.eval_every_minutes,
                      grad_clip=config.grad_clip, accumulate=config.accumulate, amp=amp,
                      average_last=config.average_last, compile=compile, ema_decay=config.ema_decay)
    at_end = (plot_curves, report_at_end(task))  # RUN/curves.png, then RUN/report.html, which shows it
    return run, Trainer(task, run, budget, loop, progress=progress, at_end=at_end).fit(resume=resume), \
        prepared.evaluation


def _load_init(model: nn.Module, init: Path) -> None:
    """INIT's best weights into MODEL, every tensor (CheckpointError naming any that does not fit)."""
    folder = RunFolder.open(init, "translation")
    path = folder.weights_path("best" if folder.best_weights.is_file() else "last")
    tensors, _ = read_weights(path)
    load_all_or_nothing(model, tensors, str(path))
    note(f"init: {len(tensors)} tensors loaded from {path}; none started fresh (same model and vocabulary)")


def describe(prepared: Prepared, device: torch.device, amp: str = "off") -> None:
    config, tokenizer = prepared.config, prepared.tokenizer
    vocab = (f"joint vocabulary {tokenizer.source_vocab_size}" if tokenizer.joint else
             f"vocabularies {tokenizer.source_vocab_size} (source) + {tokenizer.target_vocab_size} (target)")
    m = config.model
    parameters = _parameter_count(config)
    precision = "" if amp == "off" else f", {amp} autocast"
    if isinstance(m, BahdanauRNNConfig):
        note(f"model: RNN with additive attention, embedding {m.embedding_dim}, hidden {m.hidden_size}, "
             f"attention {m.attention_dim}, {parameters / 1e6:.2f}M parameters; {vocab}; {device}{precision}")
    else:
        note(f"model: d_model {m.d_model}, {m.num_heads} heads, {m.num_encoder_layers}+{m.num_decoder_layers} layers, "
             f"d_ff {m.d_ff}, {m.positional_encoding} positions, {parameters / 1e6:.2f}M parameters; {vocab}; {device}"
             f"{precision}")
    skipped = f", {prepared.skipped_long} pairs over {config.max_length} tokens skipped" \
        if prepared.skipped_long else ""
    note(f"batches: about {config.max_tokens} tokens each, padding {100 * prepared.padding:.1f}%{skipped}")


def _parameter_count(config: TranslationConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build_model(config).parameters())


def _report_test(run: Path, test: Corpus, beam_size: int) -> None:
    """BLEU, chrF and exact match of the best weights on the test split, and three of its translations."""
    translator = Translator.from_run(run, weights="best")
    sources = [p.source for p in test.pairs]
    result = score(translator.translate(sources, beam_size=beam_size), [p.target for p in test.pairs],
                   translator.config.target_lang or test.target_lang)
    note(f"test ({len(test)} sentences, beam {beam_size}, best weights): BLEU {result.bleu:.2f}, "
         f"chrF {result.chrf:.2f}, exact match {result.exact_match:.1f}%")
    for pair, hypothesis in zip(test.pairs[:3], translator.translate(sources[:3])):
        note(f"  {pair.source} -> {hypothesis}  (reference: {pair.target})")
