"""Training a translation model: the `TrainingTask` that `attnkit.training.Trainer` runs.

The recipe of Vaswani et al. 2017, section 5: batches of about `max_tokens` tokens grouped by
length, Adam(beta1 0.9, beta2 0.98, eps 1e-9), the inverse-square-root warm-up schedule (Eq. 3),
dropout, label smoothing 0.1; validation by BLEU of greedy translations (plus loss and chrF).
`prepare` turns a config and corpus splits into the tokenizer, the examples and the task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from attnkit.training import distributed
from attnkit.training.fused_optimizer import fused_options
from attnkit.training.precision import resolve_amp
from attnkit.translation.batching import Batch, Example, collate, make_examples, padding_fraction, token_batches
from attnkit.translation.config import TranslationConfig, build_model
from attnkit.translation.data import Corpus
from attnkit.translation.evaluate import score
from attnkit.translation.losses import label_smoothed_cross_entropy
from attnkit.translation.schedule import inverse_sqrt_schedule
from attnkit.translation.tokenizer import SubwordTokenizer
from attnkit.translation.translator import translate_texts


class Epoch:
    """One epoch's batches, built on demand (the Trainer may skip some when resuming)."""

    def __init__(self, examples: Sequence[Example], batches: list[list[int]], device: torch.device) -> None:
        self.examples, self.batches, self.device = examples, batches, device

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[Batch]:
        for indices in self.batches:
            yield collate([self.examples[i] for i in indices]).to(self.device)


class TranslationTask:
    """Model, optimizer, schedule and data of one run; see `attnkit.training.loop.TrainingTask`."""

    items_name = "tokens"

    def __init__(self, config: TranslationConfig, tokenizer: SubwordTokenizer, train: Sequence[Example],
                 valid: Corpus, device: torch.device | str = "cpu") -> None:
        self.config, self.tokenizer, self.examples, self.device = config, tokenizer, train, torch.device(device)
        self.best_metric = (config.best_metric, "min" if config.best_metric == "loss" else "max")
        torch.manual_seed(config.seed)
        self.model = build_model(config).to(self.device)
        self.train_model = distributed.wrap(self.model)  # DDP under torchrun: averages gradients across processes
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1.0, betas=config.adam_betas, eps=config.adam_eps,
                                          **fused_options(self.device))
        self.scheduler = inverse_sqrt_schedule(self.optimizer, config.model.d_model, config.warmup_steps, config.lr_scale)
        self.lengths = [example.lengths for example in train]
        self.valid = Corpus(valid.pairs[:config.eval_sentences], valid.report)
        sources = tokenizer.encode_source([p.source for p in self.valid.pairs])
        targets = tokenizer.encode_target([p.target for p in self.valid.pairs])
        self.valid_examples, _ = make_examples(sources, targets, config.max_length)

    def batches(self, epoch: int) -> Epoch:
        return Epoch(self.examples, distributed.shard(self.epoch_batches(epoch)), self.device)  # this process's

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The same batches in the same order for the same epoch (seeded by seed and epoch)."""
        return token_batches(self.lengths, self.config.max_tokens, seed=self.config.seed * 100_003 + epoch)

    def train_step(self, batch: Batch) -> dict[str, torch.Tensor | int]:
        logits = self.train_model(batch.source, batch.target_input)  # (batch, target_length, vocab)
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
        scores = score(hypotheses, [p.target for p in self.valid.pairs])
        return {"loss": total / max(tokens, 1), "bleu": scores.bleu, "chrf": scores.chrf,
                "exact_match": scores.exact_match}


@dataclass
class Prepared:
    config: TranslationConfig  # with the vocabulary sizes filled in
    tokenizer: SubwordTokenizer
    train: list[Example]
    skipped_long: int
    padding: float  # padding fraction of the first epoch's batches


def prepare(config: TranslationConfig, splits: dict[str, Corpus], tokenizer_folder: Path | None = None) -> Prepared:
    """Train the BPE tokenizer (or load it from a run folder), fill in the vocabulary sizes, tokenize train."""
    train = splits["train"].pairs
    if tokenizer_folder is not None:
        tokenizer = SubwordTokenizer.load(tokenizer_folder)
    else:
        tokenizer = SubwordTokenizer.train([p.source for p in train], [p.target for p in train], config.vocab_size,
                                           joint=config.joint_vocab)
    model = dataclasses.replace(config.model, source_vocab_size=tokenizer.source_vocab_size,
                                target_vocab_size=tokenizer.target_vocab_size,
                                share_embeddings=config.model.share_embeddings and tokenizer.joint)
    config = dataclasses.replace(config, model=model)
    examples, skipped = make_examples(tokenizer.encode_source([p.source for p in train]),
                                      tokenizer.encode_target([p.target for p in train]), config.max_length)
    lengths = [e.lengths for e in examples]
    padding = padding_fraction(token_batches(lengths, config.max_tokens, seed=config.seed), lengths)
    return Prepared(config, tokenizer, examples, skipped, padding)


def train_run(config: TranslationConfig, splits: dict[str, Corpus], out: Path, budget, device: torch.device,
              resume: bool = False, progress: bool = True, compile: bool = False):
    """Prepare the data, create (or reopen) the run folder OUT and train until `budget` is spent; returns the run.

    compile: train through torch.compile (`LoopConfig.compile`); the saved weights are the same either way.
    """
    from attnkit.app.visualize.report import report_at_end
    from attnkit.training import LoopConfig, Trainer
    from attnkit.storage import RunFolder

    device = distributed.setup(device)  # under torchrun: join the process group, this process's GPU
    with distributed.main_first():  # rank 0 trains the tokenizer and creates OUT; the others read them
        reopen = resume or not distributed.is_main()
        prepared = prepare(config, splits, tokenizer_folder=out if reopen else None)
        config = prepared.config
        run = RunFolder.create(out, "translation", config.to_dict(), resume=resume) if distributed.is_main() \
            else RunFolder.open(out, "translation")
        if not reopen:
            prepared.tokenizer.save(run.path)
    amp = resolve_amp(config.amp, device)
    describe(prepared, device, amp)
    task = TranslationTask(config, prepared.tokenizer, prepared.train, splits["valid"], device)
    loop = LoopConfig(eval_every_minutes=config.eval_every_minutes, checkpoint_every_minutes=config.eval_every_minutes,
                      grad_clip=config.grad_clip, accumulate=config.accumulate, amp=amp,
                      average_last=config.average_last, compile=compile)
    Trainer(task, run, budget, loop, progress=progress, at_end=[report_at_end(task)]).fit(resume=resume)
    return run


def describe(prepared: Prepared, device: torch.device, amp: str = "off") -> None:
    config, tokenizer = prepared.config, prepared.tokenizer
    vocab = (f"joint vocabulary {tokenizer.source_vocab_size}" if tokenizer.joint else
             f"vocabularies {tokenizer.source_vocab_size} (source) + {tokenizer.target_vocab_size} (target)")
    m = config.model
    parameters = _parameter_count(config)
    precision = "" if amp == "off" else f", {amp} autocast"
    if config.arch == "rnn":
        print(f"model: RNN with additive attention, embedding {m.embedding_dim}, hidden {m.hidden_size}, "
              f"attention {m.attention_dim}, {parameters / 1e6:.2f}M parameters; {vocab}; {device}{precision}")
    else:
        print(f"model: d_model {m.d_model}, {m.num_heads} heads, {m.num_encoder_layers}+{m.num_decoder_layers} layers, "
              f"d_ff {m.d_ff}, {m.positional_encoding} positions, {parameters / 1e6:.2f}M parameters; {vocab}; {device}"
              f"{precision}")
    skipped = f", {prepared.skipped_long} pairs over {config.max_length} tokens skipped" if prepared.skipped_long else ""
    print(f"batches: about {config.max_tokens} tokens each, padding {100 * prepared.padding:.1f}%{skipped}")


def _parameter_count(config: TranslationConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build_model(config).parameters())
