"""The models `attnkit serve` answers with: run folders loaded once, each called on a batch of requests.

Each model has a lock: attention capture installs hooks on the module for the duration of one
call, so two calls on the same model must not overlap. The server's batcher (batcher.py) calls
these functions on its one inference thread with the requests that arrived together.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from PIL import Image


@dataclass
class ServedModel:
    name: str
    kind: str  # "translation" or "detection"
    model: Any  # a Translator or a Detector
    lock: threading.Lock = field(default_factory=threading.Lock)


def load_models(runs: list[Path], weights: str = "best", quantize: str | None = None) -> dict[str, ServedModel]:
    """{name: model} for each run folder (name: the folder's name, made unique); CheckpointError if unreadable.
    QUANTIZE="int8": each model's Linear layers in int8 (`Translator.from_run(..., quantize=)`, `Detector`'s)."""
    from attnkit.app.tasks import kind_of
    from attnkit.detection.detector import Detector
    from attnkit.translation.translator import Translator

    models: dict[str, ServedModel] = {}
    for run in runs:
        kind = kind_of(Path(run))
        if quantize is None:
            loaded = kind.load(Path(run), weights, "cpu")
        else:
            predictor = Translator if kind.name == "translation" else Detector
            loaded = predictor.from_run(Path(run), weights, "cpu", quantize=quantize)
        name, suffix = Path(run).resolve().name, 2
        while name in models:
            name, suffix = f"{Path(run).resolve().name}-{suffix}", suffix + 1
        models[name] = ServedModel(name, kind.name, loaded)
    return models


def translate(served: ServedModel, requests: Sequence[tuple[str, bool]], beam_size: int | None) -> list[Any]:
    """One result per (text, attention) request, the texts translated as one batch: {"translation"} and, with
    attention, the tokens and the alignment (target x source, mean over layers and heads); an exception in
    place of a request whose attention capture failed."""
    translator = served.model
    with served.lock, torch.no_grad():
        translations = translator.translate([text for text, _ in requests], beam_size=beam_size)
        return [_one_request(_translation, served, text, translation, attention)
                for (text, attention), translation in zip(requests, translations)]


def _translation(served: ServedModel, text: str, translation: str, attention: bool) -> dict:
    from attnkit.app.visualize.capture import sentence_attention

    result: dict = {"model": served.name, "translation": translation}
    if attention:
        translator = served.model
        found = sentence_attention(translator.model, translator.tokenizer, text, translation,
                                   translator.config.max_length)
        alignment = found.weights.alignment()[0]  # (target, source)
        result.update(source_tokens=found.source_tokens, target_tokens=found.target_tokens,
                      alignment=_rounded(alignment))
    return result


def detect(served: ServedModel, requests: Sequence[tuple[Image.Image, float, bool]], limit: int) -> list[Any]:
    """One result per (image, threshold, attention) request: detections above the threshold, most confident first;
    with attention each object's decoder attention map. Images without attention of one size run as one batch."""
    from attnkit.app.visualize.detections import detect_with_attention

    detector = served.model
    results: list[Any] = [None] * len(requests)
    with served.lock, torch.no_grad():
        plain = [i for i, (_, _, attention) in enumerate(requests) if not attention]
        found = _predict_many(detector, [requests[i][0] for i in plain], [requests[i][1] for i in plain])
        for index, detections in zip(plain, found):
            results[index] = _one_request(_detections, served, requests[index][0], detections, None, limit)
        for index, (image, threshold, attention) in enumerate(requests):
            if attention:
                results[index] = _one_request(_with_attention, served, detect_with_attention, image, threshold, limit)
    return results


def _predict_many(detector: Any, images: list[Image.Image], thresholds: list[float]) -> list[Any]:
    """`Detector.predict` of each image at its threshold, images of one prepared size stacked into one batch (each
    runs without padding, as alone: the same detections)."""
    if not images:
        return []
    if not isinstance(getattr(detector, "model", None), torch.nn.Module):  # another backend: its own predict
        return [detector.predict(image, threshold)[0] for image, threshold in zip(images, thresholds)]
    from attnkit.detection.postprocess import postprocess

    prepared = [detector.pipeline.prepare(image) for image in images]
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, one in enumerate(prepared):
        groups.setdefault(tuple(one.batch.shape), []).append(index)
    found: list[Any] = [None] * len(images)
    for members in groups.values():
        batch = torch.cat([prepared[i].batch for i in members]).to(detector.device)  # (images, channels, H, W)
        mask = torch.cat([prepared[i].mask for i in members]).to(detector.device)  # (images, H, W) all False
        outputs = detector.model(batch, mask)
        sizes = torch.cat([prepared[i].size for i in members])  # (images, 2)
        for index, one in zip(members, postprocess(outputs.logits, outputs.boxes, sizes)):
            found[index] = detector.pipeline.select(one["scores"], one["labels"], one["boxes"], thresholds[index])[0]
    return found


def _with_attention(served: ServedModel, capture: Callable, image: Image.Image, threshold: float, limit: int) -> dict:
    found, queries, weights = capture(served.model, image, threshold)
    maps = weights.cross[-1][0].mean(0)[queries].cpu()  # (objects, height, width) of the feature map
    return _detections(served, image, found, maps, limit)


def _detections(served: ServedModel, image: Image.Image, found: Any, maps: torch.Tensor | None, limit: int) -> dict:
    objects = []
    for index, (box, score, label, name) in enumerate(zip(found.boxes.tolist(), found.scores.tolist(),
                                                         found.labels.tolist(), found.names)):
        if index == limit:
            break
        entry = {"box": [round(v, 2) for v in box], "score": round(score, 5), "label": label, "name": name}
        if maps is not None:
            peak = maps[index] / maps[index].max().clamp(min=1e-12)  # (height, width), 1 at the peak
            entry["attention"] = _rounded(peak)
        objects.append(entry)
    return {"model": served.name, "width": image.width, "height": image.height, "detections": objects}


def _one_request(function: Callable, *args: Any) -> Any:
    """FUNCTION(*ARGS), or the exception it raised: it belongs to one request of the batch."""
    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001 - returned to its request, the others are answered
        return error


def _rounded(matrix: torch.Tensor) -> list[list[float]]:
    return [[round(v, 4) for v in row] for row in matrix.float().tolist()]
