"""Fine-tuning an imported (or any) detection run on new classes: every tensor is taken from the
run except the class head, which is re-initialised when the number of classes differs (the
transfer recipe of DETR's fine-tuning: keep backbone, Transformer, queries and box head).

`attnkit train detection --init RUN` builds the model of RUN's config with the new data's number
of classes, checks RUN's weights against it (`init_weights`, before the new run folder is
written) and starts training from them. The training recipe stays the preset's: on small data,
measured against a tenth of the learning rate for the backbone, frozen BatchNorm and a frozen
backbone, the preset's rates fine-tuned best (BENCHMARKS.md, "Fine-tuning on small data");
`--set train.lr_backbone=0` freezes the backbone (cheaper steps), `--set model.frozen_batchnorm=true`
its BatchNorm, stem and layer1 (DETR's treatment of a pretrained ResNet).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import Tensor, nn

from attnkit.errors import CheckpointError

CLASS_HEAD = ("class_embed.weight", "class_embed.bias")


@dataclass(frozen=True)
class InitWeights:
    """RUN's weights that fit a model, and the names left as the model initialised them (a resized class head)."""
    path: Path
    tensors: dict[str, Tensor]
    reinitialised: list[str]


def init_weights(model: nn.Module, run: Path, weights: str = "best") -> InitWeights:
    """RUN's weights for `model`, but for a class head of another size; nothing is copied yet.

    `model` may live on the meta device (only its tensor names and shapes are read). Any other
    missing, unexpected or mis-shaped tensor is a CheckpointError naming it; so is a folder that
    is not a detection run. weights="best" falls back to "last" in a run without best weights.
    """
    from attnkit.storage import RunFolder, read_weights

    folder = RunFolder.open(Path(run), "detection")
    path = folder.weights_path("last" if weights == "best" and not folder.best_weights.is_file() else weights)
    tensors, _ = read_weights(path)
    expected = model.state_dict()
    # BatchNorm's step counter has no place in FrozenBatchNorm2d (a backbone frozen for fine-tuning): not needed
    tensors = {k: v for k, v in tensors.items() if k in expected or not k.endswith(".num_batches_tracked")}
    kept = [name for name in expected if name.endswith(CLASS_HEAD) and name in tensors  # `fast`: proposals' too
            and tensors[name].shape != expected[name].shape]
    missing = [name for name in expected if name not in tensors]
    unexpected = [name for name in tensors if name not in expected]
    misshaped = [f"{name} {tuple(tensors[name].shape)} != {tuple(expected[name].shape)}" for name in expected
                 if name in tensors and name not in kept and tensors[name].shape != expected[name].shape]
    if missing or unexpected or misshaped:
        raise CheckpointError(f"{path} does not fit this model: missing {missing[:8]}, unexpected {unexpected[:8]}, "
                              f"mis-shaped {misshaped[:8]}")
    return InitWeights(path, {k: v for k, v in tensors.items() if k not in kept}, kept)


def init_from_run(model: nn.Module, run: Path, weights: str = "best") -> list[str]:
    """Load RUN's weights into `model` but for a class head of another size; returns the names left as they were.

    Any other missing, unexpected or mis-shaped tensor is a CheckpointError naming it, raised before
    anything is copied.
    """
    found = init_weights(model, run, weights)
    model.load_state_dict(found.tensors, strict=False)
    return found.reinitialised
