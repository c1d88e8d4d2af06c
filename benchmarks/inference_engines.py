"""The same trained models run by attnkit (each of its modes) and by other inference engines, on the same inputs.

    .venv/bin/python benchmarks/inference_engines.py --translation-run RUN --detection-run RUN \\
        [--detection-data SHAPES_DIR] [--opus-size] [--threads 2] [--beam 4] [--rounds 3] [--work DIR]
    .venv/bin/python benchmarks/inference_engines.py --quick      # tiny random runs: checks itself in a minute

Translation: attnkit PyTorch float32 and int8 (`Translator.from_run(RUN, quantize=...)`), ONNX Runtime float32
and int8 (`attnkit export onnx --int8`, `--backend onnxruntime`), OpenVINO on the same ONNX graphs, transformers
(`attnkit export hf`, `generate`) and CTranslate2 float32 and int8 (`attnkit export ctranslate2`). Detection:
attnkit float32, int8 and compiled (`Detector.from_run(RUN, compile=True)`: torch.compile, one graph per batch
shape, compiled in the warm-up), ONNX Runtime float32 and int8, OpenVINO, transformers where `export hf` takes
the model.
With --opus-size also a random-weight translation model of opus-mt's size (d_model 512, 6+6 layers, 58k
vocabulary), with --small-size one of the `small` preset's (d_model 256, 3+3 layers, 8k), on random sentences:
speed only. Random weights end hypotheses anywhere, so there every engine
generates exactly --opus-max-length tokens a sentence (</s> included: the end token is banned before the limit
and forced at it; CTranslate2 min_decoding_length, transformers min_length), the same work in every engine.

Every engine gets THREADS intra-op threads and the same inputs; the engines take turns in one process (round
r runs them in a rotated order), so a busy machine slows all alike; with --apart each engine runs in a process of
its own, one after another, since another library's threads in the process slow the rest (CTranslate2's halved
attnkit's PyTorch speed on an idle machine). Reported per engine: sentences (images)/s
over all inputs in batches, median latency of one sentence (image) alone, the peak memory of a process that
loads that engine alone and runs its inputs (over the same imports), and the quality of its own outputs
(BLEU/chrF against the references, COCO AP), so a faster mode that is worse shows it.
"""

from __future__ import annotations

import os
import sys

# --sleeping-threads, for a machine running other work: before torch loads, OpenMP threads that wait for work sleep
# at once instead of spinning a while. There, spinning threads stall each other at every barrier: `fast` on one
# 96 px image took 10-14 s with 2 spinning threads on a loaded 2-core machine, 0.03-0.06 s with this. On an idle
# machine it costs the per-step work of decoding a wake-up per operation (attnkit's `small`-size beam search: 2.3x
# slower), so by default the libraries keep their own waiting, as a user runs them (BENCHMARKS.md).
if "--sleeping-threads" in sys.argv:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

ATTNKIT = [sys.executable, "-m", "attnkit"]


@dataclass
class Engine:
    name: str
    run: Callable[[list], list]  # a batch of inputs -> one output per input
    note: str = ""
    resident_before: float = 0.0  # MB resident in this process before it loaded
    loaded_mb: float | None = None  # MB resident added by loading it and its warm-up calls


@dataclass
class Row:
    name: str
    per_second: float
    latency_ms: float
    quality: dict[str, float]
    output_tokens: float | None = None
    memory_mb: float | None = None
    loaded_mb: float | None = None
    note: str = ""


# ---------------------------------------------------------------- setup helpers

def attnkit_cli(*args: str) -> None:
    """Run an attnkit command, its output to stderr; CalledProcessError with its message if it fails."""
    done = subprocess.run([*ATTNKIT, *args], capture_output=True, text=True)
    print(done.stderr.strip()[-400:], file=sys.stderr) if done.returncode else None
    done.check_returncode()


def exported(run: Path, work: Path, what: str, *options: str) -> Path:
    """RUN exported by `attnkit export WHAT` into WORK (reused when already there: keyed by RUN's path and the time
    of its newest weights, so two runs of one name, or a run trained again, get their own)."""
    newest = max((f.stat().st_mtime_ns for f in (run / "weights").glob("*")), default=0)
    key = hashlib.sha1(f"{run.resolve()}:{newest}".encode()).hexdigest()[:8]
    out = work / f"{run.name}-{key}-{what}{''.join(o.strip('-') for o in options)}"
    if not out.is_dir() or not any(out.iterdir()):
        attnkit_cli("export", what, str(run), "--out", str(out), *options)
    return out


def openvino_model(path: Path, threads: int):
    """An ONNX file compiled by OpenVINO for the CPU, with ONNX Runtime's `run(None, feeds)` signature."""
    import openvino

    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}  # not bf16 behind our back
    compiled = openvino.Core().compile_model(str(path), "CPU", config)
    request = compiled.create_infer_request()

    class Session:
        def run(self, names, feeds: dict) -> list:
            results = request.infer(feeds)
            return [results[output].copy() for output in compiled.outputs]

    return Session()


def quiet() -> contextlib.AbstractContextManager:
    return contextlib.redirect_stdout(io.StringIO())


# ---------------------------------------------------------------- translation engines

def attempter(engines: list[Engine], selected: list[str] | None) -> Callable[..., None]:
    """attempt(name, build, note): build the engine NAME if SELECTED (name prefixes; None: all) names it; an engine
    that does not install or load is left out with the reason on stderr."""
    def attempt(name: str, build: Callable[[], Callable[[list], list]], note: str = "") -> None:
        if selected is not None and not any(name.startswith(prefix) for prefix in selected):
            return
        before = resident_mb()
        try:
            engines.append(Engine(name, build(), note, before))
        except Exception as error:  # noqa: BLE001 - reported, not fatal
            print(f"{name}: not run ({type(error).__name__}: {str(error)[:300]})", file=sys.stderr)
    return attempt


def translation_engines(run: Path, work: Path, threads: int, beam: int, max_length: int | None,
                        selected: list[str] | None = None, fixed: bool = False) -> list[Engine]:
    """The engines on RUN; FIXED: every engine generates exactly MAX_LENGTH tokens a sentence (</s> included)."""
    from attnkit.app.export.backends import load_translator

    engines: list[Engine] = []
    attempt = attempter(engines, selected)

    def attnkit_mode(backend: str, quantize: str | None):
        def build():
            if backend == "onnxruntime":  # the backend's class, given THREADS threads
                from attnkit.app.export.ort_translator import OrtTranslator

                translator = OrtTranslator(onnx, threads=threads, quantize=quantize)
            else:
                translator = load_translator(run, "best", backend, quantize)
            limit = translator.config.max_length if max_length is None else max_length
            return lambda texts: translate_with(translator, texts, beam, limit, fixed)
        return build

    attempt("attnkit float32", attnkit_mode("pytorch", None))
    attempt("attnkit int8", attnkit_mode("pytorch", "int8"))
    onnx = run / "onnx"
    wants_onnx = selected is None or any(p.startswith(("ONNX", "OpenVINO")) for p in selected)
    if wants_onnx and (not (onnx / "manifest.json").is_file() or not any(onnx.glob("*.int8.onnx"))):
        with contextlib.suppress(Exception):
            attnkit_cli("export", "onnx", str(run), "--out", str(onnx), "--int8")
    attempt("ONNX Runtime float32", attnkit_mode("onnxruntime", None), "attnkit --backend onnxruntime, no spinning")
    attempt("ONNX Runtime int8", attnkit_mode("onnxruntime", "int8"), "attnkit export onnx --int8, no spinning")
    for int8 in (False, True):
        attempt(f"OpenVINO {'int8' if int8 else 'float32'}", lambda int8=int8: openvino_translate(
            onnx, threads, beam, max_length, int8, fixed), "the ONNX graphs" + (" of --int8" if int8 else ""))
    attempt("transformers float32", lambda: transformers_translate(exported(run, work, "hf"), beam, max_length, fixed),
            "attnkit export hf, generate")
    for compute in ("float32", "int8"):
        attempt(f"CTranslate2 {compute}", lambda compute=compute: ctranslate2_translate(
            exported(run, work, "ctranslate2"), compute, threads, beam, max_length, fixed),
            "attnkit export ctranslate2")
    return engines


def translate_with(translator, texts: list[str], beam: int, max_length: int, fixed: bool = False) -> list[str]:
    """FIXED: exactly MAX_LENGTH output tokens (</s> banned before, forced there); else the run's own rules."""
    from dataclasses import replace

    from attnkit.translation.translator import translate_texts

    rules = translator.config.decoding
    if fixed:
        rules = replace(rules, min_output_length=max_length, max_output_length=max_length)
    return translate_texts(translator.model, translator.tokenizer, texts, beam, translator.config.length_penalty,
                           max_length=max_length, rules=rules)


def openvino_translate(onnx: Path, threads: int, beam: int, max_length: int | None, int8: bool, fixed: bool):
    from attnkit.app.export.int8 import int8_name
    from attnkit.app.export.onnx_export import DECODER_FILE, ENCODER_FILE
    from attnkit.app.export.ort_translator import OrtTranslator

    translator = OrtTranslator(onnx, threads=1)
    name = int8_name if int8 else (lambda graph: graph)
    translator.model.encoder = openvino_model(onnx / name(ENCODER_FILE), threads)
    translator.model.decoder = openvino_model(onnx / name(DECODER_FILE), threads)
    limit = translator.config.max_length if max_length is None else max_length
    return lambda texts: translate_with(translator, texts, beam, limit, fixed)


def transformers_translate(folder: Path, beam: int, max_length: int | None, fixed: bool = False):
    from transformers import AutoTokenizer, MarianMTModel

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = MarianMTModel.from_pretrained(folder).eval()
    limit = max_length + 1 if max_length else model.generation_config.max_length  # generate counts the start token
    least = {"min_length": limit} if fixed else {}

    @torch.no_grad()
    def run(texts: list[str]) -> list[str]:
        inputs = tokenizer(texts, return_tensors="pt", padding=True)
        outputs = model.generate(**inputs, num_beams=beam, max_length=limit, **least)
        return tokenizer.batch_decode(outputs, skip_special_tokens=True)

    return run


def ctranslate2_translate(folder: Path, compute: str, threads: int, beam: int, max_length: int | None,
                          fixed: bool = False):
    import ctranslate2
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    translator = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute, intra_threads=threads,
                                       inter_threads=1)
    limit = max_length or tokenizer.model_max_length
    least = {"min_decoding_length": limit} if fixed else {}

    def run(texts: list[str]) -> list[str]:
        tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts).input_ids]
        results = translator.translate_batch(tokens, beam_size=beam, max_decoding_length=limit, **least)
        return tokenizer.batch_decode([tokenizer.convert_tokens_to_ids(r.hypotheses[0]) for r in results],
                                      skip_special_tokens=True)

    return run


# ---------------------------------------------------------------- detection engines

def detection_engines(run: Path, work: Path, threads: int, selected: list[str] | None = None) -> list[Engine]:
    from attnkit.app.export.backends import load_detector
    from attnkit.detection.pipeline import DetectionPipeline
    from attnkit.detection.postprocess import postprocess

    engines: list[Engine] = []
    attempt = attempter(engines, selected)

    def stacked(images: list, pipeline) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        prepared = [pipeline.prepare(image) for image in images]  # one size (the benchmark's images are)
        return (torch.cat([p.batch for p in prepared]), torch.cat([p.mask for p in prepared]),
                torch.cat([p.size for p in prepared]))

    def attnkit_mode(quantize: str | None, compile: bool = False):
        detector = load_detector(run, "best", "cpu", "pytorch", quantize, compile)

        @torch.no_grad()
        def predict(images: list) -> list:
            batch, mask, sizes = stacked(images, detector.pipeline)  # (images, C, H, W), (images, H, W), (images, 2)
            outputs = detector.forward(batch, mask)  # the model, or its compiled forward
            return [detector.pipeline.select(f["scores"], f["labels"], f["boxes"], 0.0)[0]
                    for f in postprocess(outputs.logits, outputs.boxes, sizes)]
        return predict

    def graph_mode(session_of: Callable[[Path], Any], int8: bool):
        from attnkit.app.export.int8 import int8_name
        from attnkit.app.export.onnx_export import read_manifest

        folder = run / "onnx"
        if not any(folder.glob("*.int8.onnx")):
            attnkit_cli("export", "onnx", str(run), "--out", str(folder), "--int8")
        manifest = read_manifest(folder, "detection")
        graph = manifest["graphs"][0]
        session = session_of(folder / (int8_name(graph) if int8 else graph))
        from attnkit.detection.config import DetectionConfig

        pipeline = DetectionPipeline(DetectionConfig.from_dict(manifest["config"]))

        def predict(images: list) -> list:
            batch, mask, sizes = stacked(images, pipeline)
            scores, labels, boxes = session.run(None, {"images": batch.numpy(), "mask": mask.numpy(),
                                                       "image_sizes": sizes.numpy()})
            return [pipeline.select(torch.from_numpy(s), torch.from_numpy(la), torch.from_numpy(b), 0.0)[0]
                    for s, la, b in zip(scores, labels, boxes)]
        return predict

    def session(path: Path):
        from attnkit.app.export.backends import ort_session

        return ort_session(path, threads)

    attempt("attnkit float32", lambda: attnkit_mode(None))
    attempt("attnkit int8", lambda: attnkit_mode("int8"))
    attempt("attnkit compiled", lambda: attnkit_mode(None, compile=True), "torch.compile, weights frozen")
    attempt("ONNX Runtime float32", lambda: graph_mode(session, False), "attnkit export onnx")
    attempt("ONNX Runtime int8", lambda: graph_mode(session, True), "attnkit export onnx --int8")
    attempt("OpenVINO float32", lambda: graph_mode(lambda p: openvino_model(p, threads), False), "the ONNX graph")
    attempt("OpenVINO int8", lambda: graph_mode(lambda p: openvino_model(p, threads), True), "the --int8 graph")
    attempt("transformers float32", lambda: transformers_detect(exported(run, work, "hf"), run), "attnkit export hf")
    return engines


def transformers_detect(folder: Path, run: Path):
    from transformers import DetrForObjectDetection

    from attnkit.detection.config import DetectionConfig
    from attnkit.detection.pipeline import DetectionPipeline
    from attnkit.detection.postprocess import postprocess
    from attnkit.storage import RunFolder

    model = DetrForObjectDetection.from_pretrained(folder).eval()
    pipeline = DetectionPipeline(DetectionConfig.from_dict(RunFolder.open(run, "detection").config))

    @torch.no_grad()
    def predict(images: list) -> list:
        prepared = [pipeline.prepare(image) for image in images]
        batch = torch.cat([p.batch for p in prepared])
        outputs = model(pixel_values=batch, pixel_mask=torch.ones(batch.shape[0], *batch.shape[-2:], dtype=torch.long))
        found = postprocess(outputs.logits, outputs.pred_boxes, torch.cat([p.size for p in prepared]))
        return [pipeline.select(f["scores"], f["labels"], f["boxes"], 0.0)[0] for f in found]

    return predict


# ---------------------------------------------------------------- inputs and quality

def test_sentences(files: list[Path] | None, sentences: int) -> tuple[list[str], list[str]]:
    """The first SENTENCES of FILES (a source and a reference file, one sentence a line), or of numbers:de's test."""
    if files:
        sources, references = (path.read_text(encoding="utf-8").splitlines()[:sentences] for path in files)
        return sources, references
    from attnkit.translation.data import load_splits

    pairs = load_splits("numbers:de", needed=())["test"].pairs[:sentences]
    return [p.source for p in pairs], [p.target for p in pairs]


def random_size_run(folder: Path, size: str, sentences: int, max_length: int) -> tuple[Path, list[str]]:
    """A random-weight Marian-layout model of SIZE, "opus" (opus-mt-en-de's: d_model 512, 6+6 layers, a 58,101-piece
    vocabulary) or "small" (the `small` preset's, 8,000 pieces), and random sentences of its vocabulary's words."""
    from attnkit.storage import RunFolder, save_weights
    from attnkit.translation.config import TranslationConfig, preset
    from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
    from attnkit.translation.tokenizer import SubwordTokenizer

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 9))) for _ in range(70000)]
    if not (folder / "config.json").is_file():
        vocab_size = 58101 if size == "opus" else preset("small").vocab_size
        corpus = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
        tokenizer = SubwordTokenizer.train(corpus, corpus, vocab_size=vocab_size)
        vocabulary = {"source_vocab_size": tokenizer.source_vocab_size,
                      "target_vocab_size": tokenizer.target_vocab_size}
        if size == "opus":
            model = Seq2SeqConfig(d_model=512, num_heads=8, num_encoder_layers=6, num_decoder_layers=6, d_ff=2048,
                                  sinusoid_layout="halves", final_norm=False, activation="silu", **vocabulary)
        else:
            model = dataclasses.replace(preset("small").model, **vocabulary)
        run = RunFolder.create(folder, "translation", TranslationConfig(preset="base", model=model,
                                                                         vocab_size=vocab_size,
                                                                         max_length=max_length).to_dict())
        tokenizer.save(run.path)
        torch.manual_seed(0)
        save_weights(run.best_weights, Seq2SeqTransformer(model).state_dict(), {"kind": "translation", "step": 1})
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 16))) for _ in range(sentences)]
    return folder, texts


def translation_quality(outputs: list[str], references: list[str] | None) -> dict[str, float]:
    if references is None:
        return {}
    from attnkit.translation.evaluate import score

    scores = score(outputs, references)  # BLEU's tokenizer by the references' script (zh: tok zh)
    return {"BLEU": scores.bleu, "chrF": scores.chrf}


def shapes_images(folder: Path, count: int) -> tuple[list, Any, list[int]]:
    """COUNT validation images of a `shapes` folder (`attnkit data shapes`), its annotations and image ids."""
    from PIL import Image

    from attnkit.detection.data import load_annotations

    annotations = load_annotations(folder / "annotations" / "instances_val.json")
    images = sorted(annotations.raw["images"], key=lambda i: i["id"])[:count]
    return ([Image.open(folder / "val" / i["file_name"]).convert("RGB") for i in images], annotations,
            [i["id"] for i in images])


def detection_quality(outputs: list, annotations, image_ids: list[int]) -> dict[str, float]:
    from attnkit.detection.evaluate import coco_evaluate

    results = [{"image_id": image_id, "category_id": category, "bbox": [x0, y0, x1 - x0, y1 - y0], "score": score}
               for image_id, found in zip(image_ids, outputs)
               for (x0, y0, x1, y1), score, category in zip(found.boxes.tolist(), found.scores.tolist(),
                                                             found.category_ids)]
    restricted = annotations.raw | {"images": [i for i in annotations.raw["images"] if i["id"] in set(image_ids)]}
    restricted["annotations"] = [a for a in annotations.raw["annotations"] if a["image_id"] in set(image_ids)]
    with quiet():
        metrics = coco_evaluate(type(annotations)(**{**annotations.__dict__, "raw": restricted}), results)
    return {"AP": metrics["AP"], "AP50": metrics["AP50"]}


# ---------------------------------------------------------------- timing

def chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def measure(engines: list[Engine], inputs: list, batch: int, latency_inputs: list, rounds: int
            ) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list]]:
    """Per engine: items/s of each round, latencies of single items, the outputs of the first round."""
    rates: dict[str, list[float]] = {e.name: [] for e in engines}
    latencies: dict[str, list[float]] = {e.name: [] for e in engines}
    outputs: dict[str, list] = {}
    for engine in engines:  # warm up: first calls allocate, compile kernels, fill caches
        engine.run(inputs[:batch])
        engine.run(latency_inputs[:1])
        if engine.loaded_mb is None:
            engine.loaded_mb = resident_mb() - engine.resident_before
    for round_ in range(rounds):
        order = engines[round_ % len(engines):] + engines[:round_ % len(engines)]
        for engine in order:
            started = time.perf_counter()
            produced = [out for part in chunks(inputs, batch) for out in engine.run(part)]
            rates[engine.name].append(len(inputs) / (time.perf_counter() - started))
            outputs.setdefault(engine.name, produced)
            for item in latency_inputs:
                started = time.perf_counter()
                engine.run([item])
                latencies[engine.name].append(time.perf_counter() - started)
        print(f"round {round_ + 1}/{rounds}: " + ", ".join(f"{n} {r[-1]:.1f}/s" for n, r in rates.items()),
              file=sys.stderr, flush=True)
    return rates, latencies, outputs


def peak_memory(argv: list[str], task: str, engine: str) -> float | None:
    """MB of peak RSS above the imports of a process that loads ENGINE alone and runs the inputs once."""
    done = subprocess.run([sys.executable, __file__, *argv, "--memory-of", f"{task}:{engine}"], capture_output=True,
                          text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("peak_mb ")]
    return float(lines[-1].split()[1]) if lines else None


def measured_apart(argv: list[str], task: str, engine: str) -> Row | None:
    """ENGINE's row, measured by a process that loads it alone (None, with its error on stderr, if it failed)."""
    done = subprocess.run([sys.executable, __file__, *argv, "--engines", engine, "--measure-of", f"{task}:{engine}"],
                          capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("row ")]
    if not lines:
        print(f"{engine}: not measured\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    print(f"{task}: {engine} measured apart", file=sys.stderr, flush=True)
    return Row(**json.loads(lines[-1][4:]))


def rss_mb() -> float:
    """Peak resident MB of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def resident_mb() -> float:
    """Resident MB of this process now (Linux)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


# ---------------------------------------------------------------- main

def print_table(title: str, unit: str, rows: list[Row], reference: str) -> None:
    base = next((r.per_second for r in rows if r.name == reference), None)
    quality_keys = list(dict.fromkeys(k for r in rows for k in r.quality))
    tokens = any(r.output_tokens for r in rows)
    memory = any(r.memory_mb is not None for r in rows)
    header = [f"{unit}/s", f"x {reference}", f"ms, 1 {unit[:-1]}", "MB loaded"] + (["peak MB alone"] if memory else [])
    header += quality_keys + (["output words"] if tokens else []) + ["how"]
    print(f"\n{title}\n\n| engine | " + " | ".join(header) + " |\n" + "|---" * (len(header) + 1) + "|")
    for r in rows:
        cells = [f"{r.per_second:.2f}", f"{r.per_second / base:.2f}" if base else "-", f"{r.latency_ms:.1f}",
                 "-" if r.loaded_mb is None else f"{r.loaded_mb:.0f}"]
        cells += (["-" if r.memory_mb is None else f"{r.memory_mb:.0f}"] if memory else [])
        cells += ["-" if k not in r.quality else f"{r.quality[k]:.{3 if k.startswith('AP') else 2}f}"
                  for k in quality_keys]
        cells += ([f"{r.output_tokens:.1f}"] if tokens else []) + [r.note]
        print(f"| {r.name} | " + " | ".join(cells) + " |")


def rows_of(engines, rates, latencies, outputs, quality: Callable[[list], dict], tokens=None) -> list[Row]:
    return [Row(e.name, statistics.median(rates[e.name]), 1000 * statistics.median(latencies[e.name]),
                quality(outputs[e.name]), tokens(outputs[e.name]) if tokens else None, loaded_mb=e.loaded_mb,
                note=e.note) for e in engines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--translation-run", type=Path)
    parser.add_argument("--translation-test", type=Path, nargs=2, metavar=("SOURCES", "REFERENCES"),
                        help="test sentences, one a line (default: numbers:de's test split)")
    parser.add_argument("--detection-run", type=Path)
    parser.add_argument("--detection-data", type=Path, help="a shapes folder (attnkit data shapes --out DIR)")
    parser.add_argument("--opus-size", action="store_true", help="also the random-weight opus-mt-size model")
    parser.add_argument("--small-size", action="store_true", help="also a random-weight model of the small preset")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sleeping-threads", action="store_true",
                        help="OpenMP threads sleep at once when waiting (OMP_WAIT_POLICY=PASSIVE): for a busy machine")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--opus-sentences", type=int, default=32, help="of each random-weight model")
    parser.add_argument("--opus-max-length", type=int, default=48, help="of each random-weight model")
    parser.add_argument("--images", type=int, default=64)
    parser.add_argument("--latency-items", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32, help="sentences per call (images: 8)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "attnkit-engines")
    parser.add_argument("--tasks", default="translation,opus,detection",
                        help="of translation, opus, small, detection (each needs its run; opus: --opus-size, "
                             "small: --small-size)")
    parser.add_argument("--engines", help="comma-separated name prefixes (e.g. attnkit,CTranslate2); default all")
    parser.add_argument("--memory", action="store_true", help="also each engine's peak in a process of its own")
    parser.add_argument("--quick", action="store_true", help="tiny random runs, 1 round")
    parser.add_argument("--apart", action="store_true",
                        help="each engine in a process of its own, one after another (its rounds in a row)")
    parser.add_argument("--memory-of", help=argparse.SUPPRESS)  # TASK:ENGINE, in a child process
    parser.add_argument("--measure-of", help=argparse.SUPPRESS)  # TASK:ENGINE, in a child process (--apart)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.quick:
        sys.path.insert(0, str(Path(__file__).parent))
        from serve_load import tiny_runs

        translation, detection = tiny_runs(args.work / "quick") if not (args.work / "quick").is_dir() else \
            (args.work / "quick" / "translation", args.work / "quick" / "detection")
        args.translation_run = args.translation_run or translation
        args.detection_run = args.detection_run or detection
        args.rounds, args.sentences, args.images, args.latency_items = 1, 16, 8, 2
    selected = args.engines.split(",") if args.engines else None
    wanted = args.tasks.split(",")
    argv = [a for a in sys.argv[1:] if not a.startswith(("--memory-of", "--measure-of", "--apart"))]
    if args.quick:
        argv += ["--translation-run", str(args.translation_run), "--detection-run", str(args.detection_run)]

    tasks = []  # (title, unit, engines builder, inputs, batch, quality, tokens)
    if args.translation_run and "translation" in wanted:
        sources, references = test_sentences(args.translation_test, args.sentences)
        tasks.append(("translation", f"Translation ({args.translation_run.name}, beam {args.beam})", "sentences",
                      lambda: translation_engines(args.translation_run.resolve(), args.work, args.threads, args.beam,
                                                  None, selected),
                      sources, args.batch, lambda out: translation_quality(out, references), None))
    for size, title in (("opus", "opus-mt's size"), ("small", "the `small` preset's size")):
        if getattr(args, f"{size}_size") and size in wanted:
            run, texts = random_size_run(args.work / f"{size}-size", size, args.opus_sentences, args.opus_max_length)
            tasks.append((size, f"Translation, {title}, random weights (beam {args.beam}, "
                          f"exactly {args.opus_max_length} tokens out, </s> included)", "sentences",
                          partial(translation_engines, run, args.work, args.threads, args.beam, args.opus_max_length,
                                  selected, fixed=True),
                          texts, 8, lambda out: {}, lambda out: statistics.mean(len(o.split()) for o in out)))
    if args.detection_run and "detection" in wanted:
        data = args.detection_data or args.work / "shapes"
        if not (data / "annotations").is_dir():
            attnkit_cli("data", "shapes", "--out", str(data), "--train-images", "1", "--val-images", "100",
                        "--seed", "7")
        images, annotations, ids = shapes_images(data, args.images)
        for batch in (1, 8):
            tasks.append((f"detection{batch}", f"Detection ({args.detection_run.name}, batch {batch})", "images",
                          lambda: detection_engines(args.detection_run.resolve(), args.work, args.threads, selected),
                          images, batch, lambda out: detection_quality(out, annotations, ids), None))

    if args.memory_of:  # child: one engine alone
        task_name, engine_name = args.memory_of.split(":", 1)
        task = next(t for t in tasks if t[0] == task_name)
        before = rss_mb()
        engine = next(e for e in task[3]() if e.name == engine_name)
        for part in chunks(task[4], task[5]):
            engine.run(part)
        print(f"peak_mb {rss_mb() - before:.1f}")
        return 0

    if args.measure_of:  # child of --apart: one engine alone, its rounds in a row; its row as JSON
        task_name, engine_name = args.measure_of.split(":", 1)
        _, _, _, build, inputs, batch, quality, tokens = next(t for t in tasks if t[0] == task_name)
        engines = [e for e in build() if e.name == engine_name]
        rates, latencies, outputs = measure(engines, inputs, batch, inputs[:args.latency_items], args.rounds)
        print("row " + json.dumps(dataclasses.asdict(rows_of(engines, rates, latencies, outputs, quality, tokens)[0]),
                                    default=float))
        return 0

    built: dict[str, list[Engine]] = {}
    for name, title, unit, build, inputs, batch, quality, tokens in tasks:
        key = "detection" if name.startswith("detection") else name
        engines = built.get(key) or build()
        built[key] = engines
        if args.apart:  # another engine's runtime in the process (CTranslate2's OpenMP) halved attnkit's speed
            rows = [row for engine in engines if (row := measured_apart(argv, name, engine.name)) is not None]
        else:
            rates, latencies, outputs = measure(engines, inputs, batch, inputs[:args.latency_items], args.rounds)
            rows = rows_of(engines, rates, latencies, outputs, quality, tokens)
        if args.memory and name != "detection1":  # detection's: at batch 8
            for row in rows:
                row.memory_mb = peak_memory(argv, name, row.name)
        print_table(title, unit, rows, "attnkit float32")
        sys.stdout.flush()
    how = "each engine in its own process, its rounds in a row" if args.apart else "in rotated order"
    print(f"\n{args.threads} threads per engine; medians of {args.rounds} rounds, {how}; torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
