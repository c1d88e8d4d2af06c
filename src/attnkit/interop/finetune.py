"""Fine-tuning an imported (or any) detection run on new classes: every tensor is taken from the
run except the class head, which is re-initialised when the number of classes differs (the
transfer recipe of DETR's fine-tuning: keep backbone, Transformer, queries and box head).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from attnkit.errors import CheckpointError

CLASS_HEAD = ("class_embed.weight", "class_embed.bias")


def init_from_run(model: nn.Module, run: Path, weights: str = "best") -> list[str]:
    """Load RUN's weights into `model` but for a class head of another size; returns the names left as they were.

    Any other missing, unexpected or mis-shaped tensor is a CheckpointError naming it, raised before
    anything is copied.
    """
    from attnkit.training import RunFolder, read_weights

    folder = RunFolder.open(Path(run), "detection")
    path = folder.weights_path("last" if weights == "best" and not folder.best_weights.is_file() else weights)
    tensors, _ = read_weights(path)
    expected = model.state_dict()
    kept = [name for name in CLASS_HEAD if name in tensors and tensors[name].shape != expected[name].shape]
    missing = [name for name in expected if name not in tensors]
    unexpected = [name for name in tensors if name not in expected]
    misshaped = [f"{name} {tuple(tensors[name].shape)} != {tuple(expected[name].shape)}" for name in expected
                 if name in tensors and name not in kept and tensors[name].shape != expected[name].shape]
    if missing or unexpected or misshaped:
        raise CheckpointError(f"{path} does not fit this model: missing {missing[:8]}, unexpected {unexpected[:8]}, "
                              f"mis-shaped {misshaped[:8]}")
    model.load_state_dict({k: v for k, v in tensors.items() if k not in kept}, strict=False)
    return kept
