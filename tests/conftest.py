"""Shared test setup, and tiny translation and detection run folders with random weights.

One intra-op thread: the tests use tiny tensors, where torch's thread pool costs more than it
saves, and on a busy machine its threads wait on each other (the suite ran about 4x slower).
"""

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from attnkit.storage import RunFolder, save_weights

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def translation_run(tmp_path_factory) -> Path:
    from attnkit.translation.config import TranslationConfig
    from attnkit.translation.model import Seq2SeqConfig, Seq2SeqTransformer
    from attnkit.translation.tokenizer import SubwordTokenizer

    sources = ["one two three", "four five six", "seven eight nine", "ten eleven twelve"] * 3
    targets = ["eins zwei drei", "vier fuenf sechs", "sieben acht neun", "zehn elf zwoelf"] * 3
    tokenizer = SubwordTokenizer.train(sources, targets, vocab_size=60)
    torch.manual_seed(0)
    model_config = Seq2SeqConfig(d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, d_ff=32,
                                 source_vocab_size=tokenizer.source_vocab_size,
                                 target_vocab_size=tokenizer.target_vocab_size)
    config = TranslationConfig(preset="tiny", model=model_config, vocab_size=60, max_length=16, max_tokens=64,
                               beam_size=2)
    run = RunFolder.create(tmp_path_factory.mktemp("runs") / "translation", "translation", config.to_dict())
    tokenizer.save(run.path)
    save_weights(run.best_weights, Seq2SeqTransformer(model_config).state_dict(), {"kind": "translation", "step": 1})
    return run.path


@pytest.fixture(scope="session")
def detection_run(tmp_path_factory) -> Path:
    from attnkit.detection.architectures import build_model
    from attnkit.detection.config import DetectionConfig, preset

    model_config, train_config = preset("tiny")
    config = DetectionConfig(model=model_config.__class__(**{**model_config.__dict__, "num_classes": 2}),
                             train=train_config, preset="tiny", data="explicit", class_names=("disc", "square"),
                             category_ids=(1, 2))
    run = RunFolder.create(tmp_path_factory.mktemp("runs") / "detection", "detection", config.to_dict())
    torch.manual_seed(0)
    save_weights(run.best_weights, build_model(config.model).state_dict(), {"kind": "detection", "step": 1})
    return run.path


# ------------------------------------------------------------ tiny COCO-format datasets written on the fly
def write_coco(root: Path, images: list[dict], annotations: list[dict], categories: list[dict],
               split: str = "train", draw: bool = True) -> tuple[Path, Path]:
    """Write images (plain colour squares with white boxes drawn) and the JSON; return (images dir, json)."""
    image_dir = root / split
    image_dir.mkdir(parents=True, exist_ok=True)
    for entry in images:
        if draw:
            image = Image.new("RGB", (entry["width"], entry["height"]), (0, 0, 0))
            for ann in annotations:
                if ann["image_id"] == entry["id"]:
                    x, y, w, h = ann["bbox"]
                    image.paste((255, 255, 255), (int(x), int(y), int(x + w), int(y + h)))
            image.save(image_dir / entry["file_name"])
    (root / "annotations").mkdir(exist_ok=True)
    path = root / "annotations" / f"instances_{split}.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return image_dir, path


@pytest.fixture
def coco_writer():
    """The `write_coco` function, for tests that build their own dataset."""
    return write_coco


@pytest.fixture
def small_coco(tmp_path: Path) -> tuple[Path, Path]:
    """Three images: two objects with category ids 7 and 3 (non-contiguous), a crowd object, an empty image."""
    images = [{"id": 10, "file_name": "a.png", "width": 64, "height": 48},
              {"id": 11, "file_name": "b.png", "width": 64, "height": 48},
              {"id": 12, "file_name": "c.png", "width": 64, "height": 48}]
    annotations = [
        {"id": 1, "image_id": 10, "category_id": 7, "bbox": [4, 6, 20, 10], "iscrowd": 0},
        {"id": 2, "image_id": 10, "category_id": 3, "bbox": [30, 20, 16, 16], "iscrowd": 0},
        {"id": 3, "image_id": 11, "category_id": 3, "bbox": [10, 10, 30, 20], "iscrowd": 0},
        {"id": 4, "image_id": 11, "category_id": 7, "bbox": [40, 30, 20, 12], "iscrowd": 1},
    ]
    categories = [{"id": 7, "name": "seven"}, {"id": 3, "name": "three"}]
    return write_coco(tmp_path, images, annotations, categories)


# ------------------------------------------------------------ BatchNorms that are not the identity
def randomise_batch_norms(module: torch.nn.Module) -> None:
    """Every BatchNorm2d's statistics and affine terms moved away from the identity, so that a norm folded,
    misplaced or left out changes the output."""
    for norm in module.modules():
        if isinstance(norm, torch.nn.BatchNorm2d):
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
            with torch.no_grad():
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.3, 0.3)


@pytest.fixture
def batch_norm_randomiser():
    """The `randomise_batch_norms` function."""
    return randomise_batch_norms
