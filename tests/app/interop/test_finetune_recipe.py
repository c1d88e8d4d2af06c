"""Fine-tuning options measured in BENCHMARKS.md ("Fine-tuning on small data"): `train.lr_backbone=0` freezes the
whole backbone; a `fast` run starts a model with frozen BatchNorm and other classes."""

from __future__ import annotations

from dataclasses import replace

import torch

from attnkit.app.detection.recipe import DetectionTask
from attnkit.detection.config import DetectionConfig, override, preset


def tiny_config(*assignments: str) -> DetectionConfig:
    model, train = preset("tiny")
    return override(DetectionConfig(replace(model, num_classes=3), train, preset="tiny"), list(assignments))


def test_a_zero_backbone_learning_rate_freezes_every_backbone_weight():
    frozen = DetectionTask(tiny_config("train.lr_backbone=0"), None, None)  # type: ignore[arg-type]
    trained = DetectionTask(tiny_config(), None, None)  # type: ignore[arg-type]
    for task, backbone_trains in ((frozen, False), (trained, True)):
        named = dict(task.model.named_parameters())
        assert any(name.startswith("backbone.") for name in named)
        assert all(p.requires_grad == backbone_trains for n, p in named.items() if n.startswith("backbone."))
        assert all(p.requires_grad for n, p in named.items() if not n.startswith("backbone."))
        assert len(task.optimizer.param_groups[1]["params"]) == (0 if not backbone_trains else
                                                                sum(n.startswith("backbone.") for n in named))
    images, mask = torch.rand(1, 3, 64, 64), torch.zeros(1, 64, 64, dtype=torch.bool)
    outputs = frozen.model(images, mask)
    (outputs.logits.sum() + outputs.boxes.sum()).backward()
    assert all(p.grad is None for n, p in frozen.model.named_parameters() if n.startswith("backbone."))
    assert frozen.model.class_embed.weight.grad is not None


def test_a_fast_run_starts_a_frozen_batchnorm_model_on_other_classes(tmp_path):
    """`fast`'s two class heads (decoder and proposals) start fresh; BatchNorm's step counters are not needed."""
    from attnkit.app.interop.finetune import init_weights
    from attnkit.detection.architectures import build_model
    from attnkit.storage import RunFolder, save_weights

    model, train = preset("small")
    config = DetectionConfig(replace(model, num_classes=5), train, preset="small", class_names=tuple("abcde"),
                             category_ids=(1, 2, 3, 4, 5))
    run = RunFolder.create(tmp_path / "run", "detection", config.to_dict())
    save_weights(run.best_weights, build_model(config.model).state_dict(), {"kind": "detection", "step": 1})
    with torch.device("meta"):
        target = build_model(replace(config.model, num_classes=4, frozen_batchnorm=True))
    found = init_weights(target, run.path)
    assert sorted(found.reinitialised) == ["class_embed.bias", "class_embed.weight", "proposals.class_embed.bias",
                                           "proposals.class_embed.weight"]
    assert set(found.tensors) == set(target.state_dict()) - set(found.reinitialised)
