"""Translation: quality against training time, and speed against Hugging Face's MarianMT.

    python benchmarks/translation.py                 # all parts: 10 min numbers, speed, 10 min real text
    python benchmarks/translation.py --minutes 1 --speed-batches 2 --skip-epoch --skip-real   # a quick check
    python benchmarks/translation.py --skip-quality --skip-real --speed-preset small          # speed only
    python benchmarks/translation.py --skip-quality --skip-speed --real DATA       # another real corpus

(a) Quality: the `tiny` preset trained on `numbers:de` for --minutes (validation every
    --eval-every minutes), then the test split translated with beam 4 from the best weights.
    Prints exact match / BLEU / chrF against training time (wall time, validation included).
(b) Speed, same model size on both sides: attnkit's Seq2SeqTransformer and transformers'
    MarianMTModel built from a MarianConfig of the same dimensions (random init, nothing
    downloaded; ReLU, sinusoidal positions, scaled and tied embeddings, dropout everywhere as ours).
    Both are trained by the same plain PyTorch loop (Adam, label-smoothed cross-entropy on the
    logits) over the same length-grouped batches of --max-tokens tokens:
      * one epoch of numbers:de, wall time (--skip-epoch to leave out; after one warm-up epoch each,
        the median of 3 alternating rounds): both fp32 with plain Adam, and
        attnkit's recipe (bf16 autocast where the CPU has it, Adam's fused kernel) against Marian's plain loop;
      * tokens/s over --speed-batches identical batches, alternating the two models per round;
      * greedy decoding of 100 output tokens (end of sentence suppressed) for a batch of source
        sentences: attnkit with its key/value cache, attnkit recomputing the prefix, and Marian's
        `generate` (which uses its own cache).
(c) Real text: no pip package installed here ships a parallel corpus, but the
    system does: `--real gettext:de` builds one from the gettext catalogs under
    /usr/share/locale/de/LC_MESSAGES (English user-interface messages of the installed programs
    and their German translations, ~30000 pairs of at least three words; untranslated and
    multi-line entries dropped; 1000 valid and 1000 test pairs held out at random). --real DATA
    also takes a folder with train.*, valid.* [, test.*] in any format `attnkit train translation`
    reads. Trains the --preset recipe for --minutes and prints BLEU / chrF against time.
Tables are markdown, for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import torch

from attnkit.app.translation.commands import score_corpus
from attnkit.app.translation.recipe import prepare, resolve_amp, train_run
from attnkit.storage import RunFolder
from attnkit.training import Budget
from attnkit.training.fused_optimizer import fused_options
from attnkit.translation.batching import collate, make_examples, token_batches
from attnkit.translation.config import TranslationConfig, preset
from attnkit.translation.data import Corpus, load_splits
from attnkit.translation.decoding import greedy_decode
from attnkit.translation.losses import label_smoothed_cross_entropy
from attnkit.translation.model import Seq2SeqTransformer
from attnkit.translation.numbers import numbers_splits
from attnkit.translation.tokenizer import BOS_ID, EOS_ID, PAD_ID
from attnkit.translation.translator import Translator


# ---------------------------------------------------------------- (a) and (c): quality against time
def quality(splits: dict[str, Corpus], config: TranslationConfig, minutes: float, eval_every: float,
            device: torch.device, title: str) -> None:
    config = dataclasses.replace(config, eval_every_minutes=eval_every)
    with tempfile.TemporaryDirectory() as folder:
        run_path = Path(folder) / "run"
        train_run(config, splits, run_path, Budget(minutes=minutes), device, progress=False)
        records = [r for r in RunFolder.open(run_path).metrics() if r["split"] == "valid"]
        start = _start_time(RunFolder.open(run_path))
        print(f"\n### {title}: validation against training time\n")
        print("| minutes | step | exact match % | BLEU | chrF | valid loss |\n|---|---|---|---|---|---|")
        for r in records:
            print(f"| {(r['time'] - start) / 60:.1f} | {r['step']} | {r['exact_match']:.1f} | {r['bleu']:.2f} | "
                  f"{r['chrf']:.2f} | {r['loss']:.3f} |")
        if "test" in splits:
            scores = score_corpus(Translator.from_run(run_path, device=device), splits["test"], beam_size=4)
            print(f"\ntest ({scores['sentences']} sentences, beam 4, best weights): exact match "
                  f"{scores['exact_match']:.1f}%, BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}  \n"
                  f"sacreBLEU: {scores['bleu_signature']} | {scores['chrf_signature']}")


def _start_time(run: RunFolder) -> float:
    """Clock time when training started: a training record's time less its elapsed training time."""
    first = next(r for r in run.metrics() if "elapsed_s" in r)
    return first["time"] - first["elapsed_s"]


def gettext_corpus(language: str, locale_root: Path = Path("/usr/share/locale"), held_out: int = 1000,
                   seed: int = 0) -> dict[str, Corpus]:
    """English messages and their translations from the system's compiled gettext catalogs (*.mo)."""
    import gettext
    import random

    from attnkit.translation.data import ReadReport, SentencePair

    pairs: dict[str, str] = {}
    for path in sorted((locale_root / language / "LC_MESSAGES").glob("*.mo")):
        try:
            with open(path, "rb") as file:
                catalog = gettext.GNUTranslations(file)._catalog
        except (OSError, UnicodeDecodeError):  # a catalog in a legacy encoding: skip it
            continue
        for source, target in catalog.items():
            if isinstance(source, tuple) or not isinstance(target, str):
                continue  # plural forms
            source, target = source.strip(), target.strip()
            if source and target and source != target and "\n" not in source + target \
                    and len(source.split()) >= 3 and len(source) <= 200:
                pairs[source] = target
    if len(pairs) < 3 * held_out:
        raise SystemExit(f"only {len(pairs)} message pairs under {locale_root}/{language}: too few for a corpus")
    items = [SentencePair(source, target) for source, target in sorted(pairs.items())]
    random.Random(seed).shuffle(items)
    cut = {"test": items[:held_out], "valid": items[held_out:2 * held_out], "train": items[2 * held_out:]}
    return {split: Corpus(chosen, ReadReport(f"gettext:{language} {split}", pairs=len(chosen)), "en", language)
            for split, chosen in cut.items()}


# ---------------------------------------------------------------- (b) speed
class Marian(torch.nn.Module):
    """transformers' MarianMTModel of the same dimensions, random init; logits as ours."""

    def __init__(self, config: TranslationConfig) -> None:
        super().__init__()
        from transformers import MarianConfig, MarianMTModel

        m = config.model
        self.model = MarianMTModel(MarianConfig(
            vocab_size=m.target_vocab_size, decoder_vocab_size=m.target_vocab_size, d_model=m.d_model,
            encoder_layers=m.num_encoder_layers, decoder_layers=m.num_decoder_layers,
            encoder_attention_heads=m.num_heads, decoder_attention_heads=m.num_heads, encoder_ffn_dim=m.d_ff,
            decoder_ffn_dim=m.d_ff,
            activation_function="relu", dropout=m.dropout, attention_dropout=m.dropout, activation_dropout=m.dropout,
            max_position_embeddings=config.max_length + 128, scale_embedding=True, pad_token_id=PAD_ID,
            eos_token_id=EOS_ID, bos_token_id=BOS_ID, decoder_start_token_id=BOS_ID, forced_eos_token_id=None,
            share_encoder_decoder_embeddings=True, tie_word_embeddings=True))

    def forward(self, source: torch.Tensor, target_input: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=source, attention_mask=source != PAD_ID, decoder_input_ids=target_input,
                          decoder_attention_mask=target_input != PAD_ID, use_cache=False).logits


def train_batches(model: torch.nn.Module, batches: list, smoothing: float, bf16: bool = False,
                  recipe: bool = False) -> tuple[float, int]:
    """The plain loop: forward, label-smoothed loss, backward, Adam step; (seconds, tokens). bf16: autocast.
    recipe: Adam as `attnkit train translation` builds it (its fused kernel where the build has one)."""
    device = next(model.parameters()).device
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.98), eps=1e-9,
                                 **(fused_options(device) if recipe else {}))
    model.train()
    tokens = 0
    device = device.type
    started = time.perf_counter()
    for batch in batches:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            logits = model(batch.source, batch.target_input)
        loss = label_smoothed_cross_entropy(logits, batch.target_output, smoothing)
        optimizer.zero_grad(set_to_none=True)
        (loss / batch.target_tokens).backward()
        optimizer.step()
        tokens += batch.source_tokens + batch.target_tokens
    _sync()
    return time.perf_counter() - started, tokens


class WithoutEnd(torch.nn.Module):
    """Our model with end-of-sentence suppressed, so greedy decoding runs exactly to its length limit."""

    def __init__(self, model: Seq2SeqTransformer) -> None:
        super().__init__()
        self.inner = model

    def encode(self, source, mask):
        return self.inner.encode(source, mask)

    def start_cache(self, encoded):
        return self.inner.start_cache(encoded)

    def decode_step(self, prefix, encoded, cache):
        logits = self.inner.decode_step(prefix, encoded, cache)
        logits[:, EOS_ID] = float("-inf")
        return logits


def speed(config: TranslationConfig, device: torch.device, batches_count: int, decode_batch: int,
          output_tokens: int, skip_epoch: bool) -> None:
    splits = numbers_splits()
    prepared = prepare(config, splits)
    config, examples = prepared.config, prepared.train
    lengths = [e.lengths for e in examples]
    epoch = [collate([examples[i] for i in b]).to(device) for b in token_batches(lengths, config.max_tokens, seed=0)]
    torch.manual_seed(0)
    ours, marian = Seq2SeqTransformer(config.model).to(device), Marian(config).to(device)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    m = config.model
    print(f"\n### Speed: attnkit vs transformers MarianMT, d_model {m.d_model}, {m.num_heads} heads, "
          f"{m.num_encoder_layers}+{m.num_decoder_layers} layers, d_ff {m.d_ff}, vocabulary {m.target_vocab_size}, "
          f"{device}, {torch.get_num_threads()} threads\n")
    print(f"parameters: attnkit {count(ours) / 1e6:.2f}M, Marian {count(marian) / 1e6:.2f}M (Marian keeps its "
          f"sinusoidal position table as frozen weights); batches of about {config.max_tokens} tokens, "
          f"{len(epoch)} batches an epoch\n")
    train_batches(ours, epoch[:2], config.label_smoothing), train_batches(marian, epoch[:2], config.label_smoothing)
    recipe_bf16 = resolve_amp(config.amp, device) == "bf16"  # what `attnkit train translation` uses here
    rows = []
    if not skip_epoch:  # a first epoch of each warms every batch shape up; then 3 alternating rounds, medians
        runs = {"fp32": lambda: train_batches(ours, epoch, config.label_smoothing)[0],
                "marian": lambda: train_batches(marian, epoch, config.label_smoothing)[0],
                "recipe": lambda: train_batches(ours, epoch, config.label_smoothing, bf16=recipe_bf16, recipe=True)[0]}
        for run in runs.values():
            run()
        times = {name: [] for name in runs}
        for _ in range(3):
            for name, run in runs.items():
                times[name].append(run())
        fp32_s, marian_s, recipe_s = (statistics.median(times[name]) for name in runs)
        rows.append(("one epoch of numbers:de, wall time (s, median of 3), both fp32", f"{fp32_s:.2f}",
                     f"{marian_s:.2f}", marian_s / fp32_s))
        rows.append((f"one epoch, wall time (s, median of 3): attnkit's recipe ("
                     f"{'bf16 autocast, native here, ' if recipe_bf16 else ''}fused Adam) vs Marian's plain loop "
                     "(fp32, Adam)", f"{recipe_s:.2f}", f"{marian_s:.2f}", marian_s / recipe_s))
    same = epoch[:batches_count]
    for bf16 in ((False, True) if recipe_bf16 else (False,)):
        ours_t, marian_t = [], []
        for _ in range(3):  # alternate, so both see the same machine load
            seconds, tokens = train_batches(ours, same, config.label_smoothing, bf16)
            ours_t.append(tokens / seconds)
            seconds, tokens = train_batches(marian, same, config.label_smoothing, bf16)
            marian_t.append(tokens / seconds)
        ours_tps, marian_tps = statistics.median(ours_t), statistics.median(marian_t)
        rows.append((f"training tokens/s, {len(same)} identical batches, both {'bf16 autocast' if bf16 else 'fp32'} "
                     f"(median of 3)", f"{ours_tps:,.0f}", f"{marian_tps:,.0f}", ours_tps / marian_tps))
    rows += decoding_rows(ours, marian, splits["test"], prepared, device, decode_batch, output_tokens)
    print("| measure | attnkit | Marian | attnkit speed-up |\n|---|---|---|---|")
    for name, a, b, ratio in rows:
        print(f"| {name} | {a} | {b} | {ratio:.2f}x |")


def decoding_rows(ours, marian, test: Corpus, prepared, device, batch: int, output_tokens: int) -> list[tuple]:
    encoded = prepared.tokenizer.encode_source([p.source for p in test.pairs])
    common = statistics.mode(len(ids) for ids in encoded)  # one source length, so every row gets the same limit
    sources = [ids for ids in encoded if len(ids) == common][:batch]
    examples, _ = make_examples(sources, [[4]] * len(sources), prepared.config.max_length)
    source = collate(examples).source.to(device)  # (batch, source_length)
    ours.eval(), marian.eval()
    extra = output_tokens - source.size(1)
    model = WithoutEnd(ours)
    runs = {"cached": lambda: greedy_decode(model, source, use_cache=True, extra_length=extra),
            "uncached": lambda: greedy_decode(model, source, use_cache=False, extra_length=extra),
            "marian": lambda: marian.model.generate(input_ids=source, attention_mask=source != PAD_ID,
                                                    max_new_tokens=output_tokens, min_new_tokens=output_tokens,
                                                    num_beams=1, do_sample=False)}
    samples: dict[str, list[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for name, run in runs.items():  # warm-up, and check that each produced the full length
            out = run()
            produced = max(len(o) for o in out) if isinstance(out, list) else out.size(1) - 1
            assert produced >= output_tokens - 1, (name, produced)
        for _ in range(3):  # alternate, so all three see the same machine load
            for name, run in runs.items():
                _sync()
                started = time.perf_counter()
                run()
                _sync()
                samples[name].append(time.perf_counter() - started)
    timings = {name: statistics.median(values) for name, values in samples.items()}
    label = f"greedy decoding, {source.size(0)} sentences x {output_tokens} tokens (s, median of 3)"
    return [(f"{label}: cached vs uncached (both attnkit)", f"{timings['cached']:.2f}",
             f"{timings['uncached']:.2f} (uncached)",
             timings["uncached"] / timings["cached"]),
            (f"{label}: attnkit cached vs Marian generate", f"{timings['cached']:.2f}", f"{timings['marian']:.2f}",
             timings["marian"] / timings["cached"])]


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="training time for (a) and (c)")
    parser.add_argument("--eval-every", type=float, default=1.0, help="minutes between validations")
    parser.add_argument("--preset", default="tiny", help="preset for (a)")
    parser.add_argument("--speed-preset", default="tiny", help="model size for (b)")
    parser.add_argument("--speed-batches", type=int, default=8, help="identical batches for tokens/s")
    parser.add_argument("--decode-batch", type=int, default=32, help="sentences decoded at once")
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-epoch", action="store_true", help="leave out the full-epoch timing")
    parser.add_argument("--real", default="gettext:de" if Path("/usr/share/locale/de/LC_MESSAGES").is_dir() else None,
                        help="(c): gettext:LANG (the system's catalogs; the default where they exist) "
                             "or a corpus folder")
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    if not args.skip_quality:
        quality(numbers_splits(), preset(args.preset), args.minutes, args.eval_every, device,
                f"numbers:de, preset {args.preset}, {args.minutes:g} minutes")
    if not args.skip_speed:
        speed(preset(args.speed_preset), device, args.speed_batches, args.decode_batch, args.output_tokens,
              args.skip_epoch)
    if args.real and not args.skip_real:
        language = args.real.partition(":")[2]
        splits = gettext_corpus(language) if args.real.startswith("gettext:") else load_splits(args.real)
        print(f"\nreal text {args.real}: " + ", ".join(f"{name} {len(c)} pairs" for name, c in splits.items()))
        quality(splits, preset(args.preset), args.minutes, args.eval_every, device,
                f"{args.real}, preset {args.preset}, {args.minutes:g} minutes")
    else:
        print("\n(c) real text: pass --real gettext:de (the system's translation catalogs) or --real DATA")


if __name__ == "__main__":
    main()
