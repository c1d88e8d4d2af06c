"""Command line: `attnkit train translation`, `attnkit eval translation`, `attnkit translate`,
`attnkit data numbers`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import typer

from attnkit.app.cli import app, data_app, eval_app, train_app
from attnkit.app.devices import resolve_device
from attnkit.errors import user_errors

DATA_HELP = ("Built-in dataset (numbers:de) or a folder with train.*, valid.* (and test.*): .tsv, .jsonl or "
             "SRC/TGT files.")


@train_app.command("translation")
def train_translation(
    data: str = typer.Option(None, "--data", help=DATA_HELP),
    out: Path = typer.Option(..., "--out", help="Run folder to write (config, tokenizer, weights, metrics)."),
    train: Path = typer.Option(None, "--train", help="Training split file (instead of, or over, --data)."),
    valid: Path = typer.Option(None, "--valid", help="Validation split file."),
    test: Path = typer.Option(None, "--test", help="Test split file, scored at the end."),
    preset: str = typer.Option(None, "--preset", help="tiny, small or base (default: tiny on a CPU, base on a GPU)."),
    arch: str = typer.Option(None, "--arch", help="transformer (the default), or rnn: the RNN encoder-decoder with "
                             "additive attention (Bahdanau et al. 2015) with the preset's parameter count."),
    source_lang: str = typer.Option(None, "--source-lang", help="Source language code (JSON lines, aligned files)."),
    target_lang: str = typer.Option(None, "--target-lang", help="Target language code."),
    minutes: float = typer.Option(None, "--minutes", help="Time budget."),
    steps: int = typer.Option(None, "--steps", help="Optimizer-step budget."),
    epochs: int = typer.Option(None, "--epochs", help="Epoch budget."),
    set_: list[str] = typer.Option([], "--set", help="Override any config value: --set model.d_model=256 "
                                   "--set warmup_steps=1000."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in OUT where it stopped."),
    device: str = typer.Option(None, "--device", help="cpu or cuda (default: cuda when available)."),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Skip malformed data lines (not UTF-8, no "
                                        "tab, bad JSON) and list them, instead of stopping at the first."),
    amp: str = typer.Option(None, "--amp", help="Autocast: auto (the default: bf16 on CUDA and on CPUs with native "
                            "bf16), off, bf16, or fp16 (CUDA only, with loss scaling); same as --set amp=..."),
    accumulate: int = typer.Option(None, "--accumulate", help="Batches per optimizer step (default 1); same as "
                                   "--set accumulate=N."),
    compile_: bool = typer.Option(False, "--compile", help="Train through torch.compile (the first step compiles; "
                                  "weights are saved as without it)."),
    init: str = typer.Option(None, "--init", help="Fine-tune this model on the data: a translation run, a "
                             "transformers Marian folder or a Hub id (Helsinki-NLP/opus-mt-en-de; needs attnkit[hub]); "
                             "its config and vocabulary are kept."),
    ema: float = typer.Option(None, "--ema", help="Keep a moving average of the weights with this decay (e.g. "
                              "0.999), validated as ema_<metric> and saved as weights/ema; same as --set "
                              "ema_decay=..."),
) -> None:
    """Train a translation model (a Transformer, or with --arch rnn the RNN baseline); writes the run folder OUT."""
    with user_errors():
        from attnkit.app.translation import recipe
        from attnkit.training import Budget, distributed

        on = distributed.setup(resolve_device(device))  # one process, or one of torchrun's (only rank 0 prints)
        assignments = list(set_) + ([f"amp={amp}"] if amp else []) + \
            ([f"accumulate={accumulate}"] if accumulate is not None else []) + \
            ([f"ema_decay={ema}"] if ema is not None else [])
        budget = Budget(steps=steps, epochs=epochs, minutes=minutes if (steps or epochs or minutes) else 10.0)
        recipe.train(recipe.TranslationRequest(
            out, budget, data=data, train_file=train, valid_file=valid, test_file=test, preset=preset, arch=arch,
            source_lang=source_lang, target_lang=target_lang, assignments=tuple(assignments), resume=resume,
            device=on, skip_bad_lines=skip_bad_lines, compile=compile_, init=init))
        distributed.finish()


@eval_app.command("translation")
def eval_translation(
    run: Path = typer.Argument(..., help="A translation run folder."),
    data: str = typer.Option(..., "--data", help="Test data: numbers:de, a folder (its test.*), or a file."),
    beam_size: int = typer.Option(None, "--beam-size", help="Beam size (default: the run's, 4); 1 is greedy."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
    source_lang: str = typer.Option(None, "--source-lang"),
    target_lang: str = typer.Option(None, "--target-lang", help="The references' language (default: the run's, "
                                    "else read from their script); picks BLEU's tokenizer: zh, ja-mecab, ko-mecab, "
                                    "13a."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Score RUN on a test set: BLEU and chrF (sacreBLEU), exact match."""
    with user_errors():
        from attnkit.translation.data import load_splits
        from attnkit.translation.translator import Translator

        translator = Translator.from_run(run, weights=weights)
        test = load_splits(data, None, source_lang or translator.config.source_lang,
                           target_lang or translator.config.target_lang, needed=("test",))["test"]
        result = score_corpus(translator, test, beam_size,
                              target_lang or translator.config.target_lang or test.target_lang)
        if as_json:
            print(json.dumps(result))
        else:
            print(f"{test.report.summary()}: BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f}, "
                  f"exact match {result['exact_match']:.1f}%, length ratio {result['length_ratio']:.3f} "
                  f"({result['seconds']:.1f} s)")
            print(f"sacreBLEU: {result['bleu_signature']} | {result['chrf_signature']}")


@app.command("translate")
def translate(
    run: Path = typer.Argument(..., help="A translation run folder."),
    text: list[str] = typer.Argument(None, help="Sentences to translate (default: stdin, one per line)."),
    beam_size: int = typer.Option(None, "--beam-size", help="Beam size (default: the run's, 4); 1 is greedy."),
    weights: str = typer.Option("best", "--weights", help="best, last, average or ema."),
    backend: str = typer.Option("pytorch", "--backend", help="pytorch, or onnxruntime (RUN's ONNX export, "
                                "written to RUN/onnx on first use, or an `attnkit export onnx` folder)."),
    quantize: str = typer.Option(None, "--quantize", help="int8: the model's matrix multiplications in int8 "
                                 "(dynamic quantization, CPU only); speed and accuracy: BENCHMARKS.md, int8."),
) -> None:
    """Translate TEXT (or stdin, one sentence per line); print one translation per line."""
    with user_errors():
        from attnkit.app.export.backends import load_translator

        translator = load_translator(run, weights, backend, quantize)
        if text:
            for line in translator.translate(text, beam_size=beam_size):
                print(line)
            return
        for line in sys.stdin:  # line by line, so it works in a pipe as the input arrives
            print(translator.translate([line.strip()], beam_size=beam_size)[0] if line.strip() else "", flush=True)


@data_app.command("numbers")
def data_numbers(
    out: Path = typer.Option(..., "--out", help="Folder for train.tsv, valid.tsv, test.tsv."),
    lang: str = typer.Option("de", "--lang", help="Target language (any num2words language: de, fr, es, ...)."),
    max_number: int = typer.Option(9999, "--max-number", help="Numbers 1..N are split into train/valid/test."),
) -> None:
    """Write the built-in numbers corpus: English number words -> LANG number words, disjoint splits."""
    with user_errors():
        from attnkit.translation.numbers import NumbersSpec, numbers_splits, write_numbers

        held_out = min(500, max_number // 10)  # valid and test sizes: 500 each, or a tenth for small N
        spec = NumbersSpec(language=lang, max_number=max_number, valid_size=held_out, test_size=held_out)
        paths = write_numbers(out, spec)
        splits = numbers_splits(spec)
        for split, path in paths.items():
            print(f"{path}: {len(splits[split])} pairs")


def score_corpus(translator, corpus, beam_size: int | None, target_lang: str | None = None) -> dict:
    """BLEU, chrF and exact match of TRANSLATOR on CORPUS (BLEU tokenized for TARGET_LANG), and the seconds taken."""
    from attnkit.translation.evaluate import score

    started = time.perf_counter()
    hypotheses = translator.translate([p.source for p in corpus.pairs], beam_size=beam_size)
    seconds = time.perf_counter() - started
    scores = score(hypotheses, [p.target for p in corpus.pairs], target_lang)
    return {**scores.as_dict(), "seconds": round(seconds, 3)}
