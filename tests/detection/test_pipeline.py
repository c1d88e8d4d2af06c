"""The detection pipeline around the model: preprocessing and the selection of detections."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from attnkit.detection.config import DetectionConfig, preset
from attnkit.detection.pipeline import DetectionPipeline, to_uint8_tensor
from attnkit.errors import DataError


@pytest.fixture
def pipeline() -> DetectionPipeline:
    model, train = preset("tiny")
    model = type(model)(**{**model.__dict__, "num_classes": 3})
    return DetectionPipeline(DetectionConfig(model=model, train=train, class_names=("cat", "dog", "owl"),
                                             category_ids=(7, 3, 9)))


def test_select_keeps_the_threshold_most_confident_first_with_names(pipeline):
    scores = torch.tensor([0.2, 0.9, 0.6, 0.75])
    labels = torch.tensor([0, 2, 1, 0])
    boxes = torch.arange(16.0).reshape(4, 4)
    found, queries = pipeline.select(scores, labels, boxes, threshold=0.6)
    assert queries.tolist() == [1, 3, 2]
    assert_close(found.scores, torch.tensor([0.9, 0.75, 0.6]))
    assert_close(found.boxes, boxes[[1, 3, 2]])
    assert found.names == ["owl", "cat", "dog"] and found.category_ids == [9, 7, 3] and len(found) == 3


def test_select_falls_back_to_the_most_confident_queries(pipeline):
    scores = torch.tensor([0.2, 0.1, 0.3])
    found, queries = pipeline.select(scores, torch.zeros(3, dtype=torch.long), torch.zeros(3, 4), 0.5, at_least=2)
    assert queries.tolist() == [2, 0] and found.names == ["cat", "cat"]
    assert len(pipeline.select(scores, torch.zeros(3, dtype=torch.long), torch.zeros(3, 4), 0.5)[0]) == 0


def test_prepare_resizes_for_evaluation_and_keeps_the_original_size(pipeline):
    prepared = pipeline.prepare(torch.full((3, 40, 80), 128, dtype=torch.uint8))
    assert prepared.size.tolist() == [[40, 80]]
    assert prepared.batch.shape[:2] == (1, 3) and prepared.batch.dtype == torch.float32
    # the tiny preset: the short side to val_size 64 would make the long one 128 > max_size 96, so the long is 96
    assert tuple(prepared.batch.shape[-2:]) == (48, 96)
    assert prepared.mask.shape == (1, *prepared.batch.shape[-2:]) and not prepared.mask.any()


def test_images_of_every_input_type_become_uint8(tmp_path):
    floats = torch.rand(3, 5, 6)
    assert_close(to_uint8_tensor(floats), (floats * 255).round().to(torch.uint8))
    with pytest.raises(DataError, match=r"expected an image tensor \(3, height, width\), got \(5, 6\)"):
        to_uint8_tensor(torch.zeros(5, 6))
    with pytest.raises(DataError, match="cannot read an image from int"):
        to_uint8_tensor(3)
