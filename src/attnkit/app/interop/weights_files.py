"""Reading other projects' weights files safely, and loading them into a model all or nothing.

`.pth`/`.bin` files are read with `torch.load(weights_only=True)`: tensors and plain containers
only, never arbitrary pickled objects (a training checkpoint holding an argparse namespace is
refused with a message). `.safetensors` files hold only tensors by construction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.errors import CheckpointError, DataError
from attnkit.storage.checkpoint import check_state_dict


def read_torch_file(path: Path) -> dict[str, Any]:
    """A `.pth`/`.bin` file's dict, unpickling nothing but tensors and plain containers."""
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - UnpicklingError, zip errors: the file is the user's to fix
        raise CheckpointError(f"{path}: refused, it holds more than tensors (attnkit never unpickles arbitrary "
                              f"objects; re-save only the state dict, e.g. torch.save({{'model': ckpt['model']}}, "
                              f"...)). Loader said: {str(error).splitlines()[0][:200]}") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path}: expected a dict of tensors, got {type(loaded).__name__}")
    return loaded


def read_hf_folder(folder: Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A Hugging Face model folder's config.json and its weights (model.safetensors, or pytorch_model.bin)."""
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{folder}: no config.json; is this a Hugging Face model folder?")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{config_path}: malformed JSON ({error})") from None
    return config, read_hf_weights(folder)


def read_hf_weights(folder: Path) -> dict[str, Tensor]:
    from safetensors.torch import load_file

    shards = sorted(folder.glob("model*.safetensors"))
    if shards:
        tensors: dict[str, Tensor] = {}
        for shard in shards:
            try:
                tensors.update(load_file(str(shard)))
            except Exception as error:  # noqa: BLE001
                raise CheckpointError(f"{shard}: not a readable safetensors file ({error})") from None
        return tensors
    if (folder / "pytorch_model.bin").is_file():
        return {k: v for k, v in read_torch_file(folder / "pytorch_model.bin").items() if isinstance(v, Tensor)}
    raise CheckpointError(f"{folder}: no model.safetensors or pytorch_model.bin")


# Inside one layer: Hugging Face's BART-style names (4.x and 5.x) -> torch.nn's (which attnkit's layers keep).
HF_LAYER_TO_TORCH = {
    "self_attn.o_proj.": "self_attn.out_proj.", "self_attn.out_proj.": "self_attn.out_proj.",
    "encoder_attn.o_proj.": "multihead_attn.out_proj.", "encoder_attn.out_proj.": "multihead_attn.out_proj.",
    "self_attn_layer_norm.": "norm1.", "encoder_attn_layer_norm.": "norm2.",
    "mlp.fc1.": "linear1.", "mlp.fc2.": "linear2.", "fc1.": "linear1.", "fc2.": "linear2.",
}


def hf_layer_to_torch(name: str, side: str) -> str:
    """A name inside an encoder or decoder layer (`side`), HF -> torch; `final_layer_norm` is norm2 / norm3."""
    for old, new in HF_LAYER_TO_TORCH.items():
        if name.startswith(old):
            return new + name[len(old):]
    if name.startswith("final_layer_norm."):
        return ("norm2." if side == "encoder" else "norm3.") + name[len("final_layer_norm."):]
    return name


def torch_layer_to_hf(name: str, side: str, out_proj: str = "out_proj", fc: str = "fc") -> str:
    """The inverse of `hf_layer_to_torch` (q/k/v still packed); out_proj/fc: the target's spelling
    (5.x DETR: "o_proj", "mlp.fc")."""
    table = {"self_attn.out_proj.": f"self_attn.{out_proj}.", "multihead_attn.out_proj.": f"encoder_attn.{out_proj}.",
             "multihead_attn.": "encoder_attn.", "norm1.": "self_attn_layer_norm.",
             "norm2.": "final_layer_norm." if side == "encoder" else "encoder_attn_layer_norm.",
             "norm3.": "final_layer_norm.", "linear1.": f"{fc}1.", "linear2.": f"{fc}2."}
    for old, new in table.items():
        if name.startswith(old):
            return new + name[len(old):]
    return name


def fuse_qkv(tensors: dict[str, Tensor], prefix: str, target: str) -> None:
    """Separate q/k/v projections at `prefix.{q,k,v}_proj` -> torch's packed `target.in_proj_{weight,bias}`, in
    place."""
    for kind in ("weight", "bias"):
        names = [f"{prefix}.{p}_proj.{kind}" for p in "qkv"]
        if all(name in tensors for name in names):
            tensors[f"{target}.in_proj_{kind}"] = torch.cat([tensors.pop(name) for name in names])


def split_qkv(tensors: dict[str, Tensor], source: str, prefix: str) -> None:
    """The inverse of `fuse_qkv`: `source.in_proj_*` -> `prefix.{q,k,v}_proj.*`, in place."""
    for kind in ("weight", "bias"):
        packed = tensors.pop(f"{source}.in_proj_{kind}", None)
        if packed is not None:
            for p, part in zip("qkv", packed.chunk(3)):
                tensors[f"{prefix}.{p}_proj.{kind}"] = part.contiguous()


def load_all_or_nothing(model: nn.Module, tensors: Mapping[str, Tensor], source: str) -> None:
    """Every tensor of the model from `tensors`, checked by name and shape first (CheckpointError naming them)."""
    check_state_dict(tensors, model, source)
    model.load_state_dict({k: v.to(model.state_dict()[k].dtype) for k, v in tensors.items()}, strict=True)
