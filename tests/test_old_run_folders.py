"""Run folders written before the restructuring load: config.json and the weights' names and shapes.

tests/data/old_runs/*.json were written by the code of commit aa8ea38 (the last one before the
layers were split): for each kind and preset, the run's config.json and its model's state-dict
layout {name: shape}. Today's code must rebuild the same model from the same document.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnkit.detection.architectures import build_model as build_detector
from attnkit.detection.config import DetectionConfig
from attnkit.detection.detector import Detector
from attnkit.storage import RunFolder, save_weights
from attnkit.translation.config import TranslationConfig, build_model as build_translator

OLD = Path(__file__).parent / "data" / "old_runs"
BUILDERS = {"detection": lambda document: build_detector(DetectionConfig.from_dict(document).model),
            "translation": lambda document: build_translator(TranslationConfig.from_dict(document))}


def layout(model: torch.nn.Module) -> dict[str, list[int]]:
    return {name: list(tensor.shape) for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize("fixture", sorted(path.name for path in OLD.glob("*.json")))
def test_an_old_config_builds_the_same_model(fixture):
    old = json.loads((OLD / fixture).read_text())
    with torch.device("meta"):
        model = BUILDERS[old["kind"]](old["config"])
    assert layout(model) == old["state_dict"]


def test_an_old_detection_run_folder_detects(tmp_path):
    old = json.loads((OLD / "detection-tiny.json").read_text())
    run = RunFolder.create(tmp_path / "run", "detection", old["config"])
    generator = torch.Generator().manual_seed(0)
    weights = {name: torch.ones(shape) if name.endswith("running_var")
               else torch.randn(shape, generator=generator) * 0.01
               for name, shape in old["state_dict"].items()}  # a variance must be positive
    save_weights(run.best_weights, weights, {"kind": "detection", "step": 1})
    detector = Detector.from_run(run.path, device="cpu")
    found = detector.predict(torch.zeros(3, 40, 50, dtype=torch.uint8), threshold=0.0)[0]
    assert len(found) == old["config"]["model"]["num_queries"] and set(found.names) <= {"a", "b", "c"}
