"""The models `attnkit serve` answers with: run folders loaded once, called one request at a time each.

Each model has a lock: attention capture installs hooks on the module for the duration of one
call, so two requests on the same model must not overlap (requests on different models do).
"""

from __future__ import annotations

import threading
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


def load_models(runs: list[Path], weights: str = "best") -> dict[str, ServedModel]:
    """{name: model} for each run folder (name: the folder's name, made unique); CheckpointError if unreadable."""
    from attnkit.app.tasks import kind_of

    models: dict[str, ServedModel] = {}
    for run in runs:
        kind = kind_of(Path(run))
        loaded = kind.load(Path(run), weights, "cpu")
        name, suffix = Path(run).resolve().name, 2
        while name in models:
            name, suffix = f"{Path(run).resolve().name}-{suffix}", suffix + 1
        models[name] = ServedModel(name, kind.name, loaded)
    return models


def translate(served: ServedModel, text: str, beam_size: int | None, attention: bool) -> dict:
    """{"translation"} and, with ATTENTION, the tokens and the alignment (target x source, mean over layers and
    heads)."""
    from attnkit.app.visualize.capture import sentence_attention

    translator = served.model
    with served.lock, torch.no_grad():
        translation = translator.translate([text], beam_size=beam_size)[0]
        result: dict = {"model": served.name, "translation": translation}
        if attention:
            found = sentence_attention(translator.model, translator.tokenizer, text, translation,
                                       translator.config.max_length)
            alignment = found.weights.alignment()[0]  # (target, source)
            result.update(source_tokens=found.source_tokens, target_tokens=found.target_tokens,
                          alignment=_rounded(alignment))
    return result


def detect(served: ServedModel, image: Image.Image, threshold: float, attention: bool, limit: int) -> dict:
    """Detections above THRESHOLD, most confident first; with ATTENTION each object's decoder attention map."""
    from attnkit.app.visualize.detections import detect_with_attention

    detector = served.model
    with served.lock, torch.no_grad():
        if attention:
            found, queries, weights = detect_with_attention(detector, image, threshold)
            maps = weights.cross[-1][0].mean(0)[queries].cpu()  # (objects, height, width) of the feature map
        else:
            found, maps = detector.predict(image, threshold)[0], None
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


def _rounded(matrix: torch.Tensor) -> list[list[float]]:
    return [[round(v, 4) for v in row] for row in matrix.float().tolist()]
