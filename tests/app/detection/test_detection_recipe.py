from dataclasses import replace

import torch

from attnkit.app.detection.recipe import DetectionTask
from attnkit.detection.config import DetectionConfig, preset
from attnkit.detection.data import CocoDetection, resolve_coco
from attnkit.detection.shapes import ShapesConfig, write_shapes
from attnkit.detection.transforms import train_transforms


def _task(tmp_path, workers: int) -> DetectionTask:
    root = write_shapes(tmp_path / "shapes", ShapesConfig(image_size=48, train_images=6, val_images=1))
    model, train = preset("tiny")
    config = DetectionConfig(replace(model, num_classes=5), replace(train, batch_size=4, train_scales=(32, 40, 48),
                                                                    crop_min_fraction=0.5))
    dataset = CocoDetection(*resolve_coco(root, "train"), train_transforms((32, 40, 48), 96))
    return DetectionTask(config, dataset, None, workers=workers)


def _flat(task: DetectionTask, epoch: int, start: int = 0) -> list[torch.Tensor]:
    return [t for images, mask, targets in _loaded(task, epoch, start)
            for t in (images, mask, *[v for d in targets for v in d.values() if isinstance(v, torch.Tensor)])]


def _loaded(task: DetectionTask, epoch: int, start: int = 0) -> list:
    return list(task.load(task.batches(epoch)[start:]))


def test_an_epoch_gives_the_same_augmented_batches_whatever_the_workers(tmp_path):
    torch.manual_seed(0)
    task = _task(tmp_path, workers=0)
    first, again = _flat(task, 3), _flat(task, 3)
    assert len(task.batches(3)) == 2
    for a, b in zip(first, again, strict=True):
        torch.testing.assert_close(a, b)
    with_workers = _task(tmp_path, workers=2)
    for a, b in zip(first, _flat(with_workers, 3), strict=True):
        torch.testing.assert_close(a, b)
    second = _loaded(task, 3)[1]
    resumed = _loaded(with_workers, 3, start=1)[0]  # as after a resume
    torch.testing.assert_close(resumed[0], second[0])
    torch.testing.assert_close(resumed[2][0]["boxes"], second[2][0]["boxes"])
    other = _flat(task, 4)
    assert any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(first, other))


def test_optimizer_gives_the_backbone_its_own_learning_rate(tmp_path):
    task = _task(tmp_path, workers=0)
    main, backbone = task.optimizer.param_groups
    train = task.config.train
    assert main["lr"] == train.lr and backbone["lr"] == train.lr_backbone
    names = {id(p): n for n, p in task.model.named_parameters()}
    assert all(names[id(p)].startswith("backbone.") for p in backbone["params"])
    assert len(main["params"]) + len(backbone["params"]) == len(list(task.model.parameters()))
