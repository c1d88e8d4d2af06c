"""Checkpoints without pickle: weights and training state as safetensors, written atomically.

A checkpoint file is a safetensors file whose metadata holds three strings:
  - `format`: "attnkit.weights/1" or "attnkit.training_state/1";
  - `attnkit`: JSON with the aliases of tied tensors, the caller's metadata (weights) or the
    non-tensor part of the training state (optimizer hyper-parameters, step, RNG states, ...);
  - `sha256`: a hash over `format`, `attnkit` and every tensor (name, dtype, shape, bytes).
Loading recomputes the hash, so a truncated or corrupted file is detected and named instead of
silently resuming from garbage. Files are written to a temporary file in the same folder,
flushed, fsync-ed and moved into place with os.replace: a crash leaves the old file or the new
one, never half of one.

Nested training state (an optimizer's `state_dict()`, RNG states, a task's extra state) is split
into tensors, stored under their path ("optimizer/state/0/exp_avg"), and JSON for the rest, where
each tensor is replaced by {"__tensor__": path}. Dicts with non-string keys (the optimizer's
parameter ids) and tuples are kept as such through {"__items__": ...} and {"__tuple__": ...}.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from attnkit.errors import CheckpointError

WEIGHTS_FORMAT = "attnkit.weights/1"
STATE_FORMAT = "attnkit.training_state/1"
_TENSOR, _ITEMS, _TUPLE = "__tensor__", "__items__", "__tuple__"
_MAX_NAMES = 8  # names listed in an error message before "... and N more"


# ---------------------------------------------------------------- atomic writes
def atomic_write(path: Path, write: Callable[[Path], object]) -> Path:
    """Call `write(temporary_path)`, fsync the result and move it onto `path` in one os.replace.

    A write that fails (no space left on the device, a quota, a file-size limit) raises a
    CheckpointError naming `path` and saying that the file already there, if any, is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(temporary)
        with open(temporary, "rb+") as file:
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except (OSError, SafetensorError) as error:
        if isinstance(error, SafetensorError) and "I/O error" not in str(error):
            raise
        raise CheckpointError(_write_failure(path, error)) from None
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_folder(path.parent)
    return path


def _write_failure(path: Path, error: Exception) -> str:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    kept = f"the previous {path.name} is intact" if path.is_file() else "nothing was written"
    return f"cannot write {path}: {reason}; {kept}"


def atomic_write_text(path: Path, text: str) -> Path:
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def _fsync_folder(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a folder; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


# ---------------------------------------------------------------- tensors <-> file
def _dedupe(tensors: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Tied tensors (same storage, offset, shape, stride) are kept once; the others become aliases.

    safetensors refuses tensors that share storage, so a tensor that shares it only in part (a
    view of a bigger buffer) is cloned.
    """
    kept: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    storages: set[tuple] = set()
    for name, tensor in tensors.items():
        tensor = tensor.detach()
        if tensor.device.type != "meta" and tensor.numel():
            storage = (tensor.device.type, tensor.untyped_storage().data_ptr())
            identity = (*storage, tensor.storage_offset(), tuple(tensor.shape), tensor.stride(), tensor.dtype)
            if identity in seen:
                aliases[name] = seen[identity]
                continue
            seen[identity] = name
            if storage in storages or tensor.untyped_storage().nbytes() != tensor.nbytes:
                tensor = tensor.clone()
            storages.add(storage)
        kept[name] = tensor.cpu().contiguous()
    return kept, aliases


def _content_hash(format_: str, text: str, tensors: Mapping[str, Tensor]) -> str:
    digest = hashlib.sha256()
    digest.update(format_.encode())
    digest.update(text.encode())
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"\0{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        # an ndarray is a buffer; numpy's stubs say so only for Python >= 3.12
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
    return digest.hexdigest()


def _write(path: Path, format_: str, tensors: Mapping[str, Tensor], payload: dict) -> Path:
    kept, aliases = _dedupe(tensors)
    text = json.dumps({**payload, "aliases": aliases}, sort_keys=True)
    metadata = {"format": format_, "attnkit": text, "sha256": _content_hash(format_, text, kept)}
    return atomic_write(Path(path), lambda temporary: save_file(kept, str(temporary), metadata=metadata))


def _read(path: Path, format_: str) -> tuple[dict[str, Tensor], dict]:
    """Read and verify a checkpoint file: (tensors with aliases restored, JSON payload)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as file:
            metadata = file.metadata() or {}
            tensors = {name: file.get_tensor(name) for name in file.keys()}
    except Exception as error:  # safetensors raises its own error types for truncated headers/data
        raise CheckpointError(f"{path} is truncated or not a safetensors file ({error})") from None
    if metadata.get("format") != format_:
        found = metadata.get("format", "no attnkit format tag")
        what = "weights" if format_ == WEIGHTS_FORMAT else "training-state"
        raise CheckpointError(f"{path} is not an attnkit {what} file (found {found})")
    text = metadata.get("attnkit", "{}")
    if metadata.get("sha256") != _content_hash(format_, text, tensors):
        raise CheckpointError(f"{path} is corrupt: its content hash (sha256) does not match its contents")
    payload = json.loads(text)
    for alias, name in payload.pop("aliases", {}).items():
        tensors[alias] = tensors[name]
    return tensors, payload


# ---------------------------------------------------------------- weights
def save_weights(path: Path, state_dict: Mapping[str, Tensor], metadata: Mapping[str, Any] | None = None) -> Path:
    """Write a model's `state_dict()` (tied weights stored once) with JSON-able `metadata`, atomically."""
    return _write(path, WEIGHTS_FORMAT, state_dict, {"metadata": dict(metadata or {})})


def read_weights(path: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """(state dict, metadata) of a weights file; CheckpointError if it is missing, truncated or corrupt."""
    tensors, payload = _read(path, WEIGHTS_FORMAT)
    return tensors, payload.get("metadata", {})


def load_weights(path: Path, model: nn.Module) -> dict[str, Any]:
    """Load a weights file into `model`, all or nothing; return the file's metadata.

    Missing, unexpected and mis-shaped tensors are reported by name in one CheckpointError before
    anything is copied, so a failed load never leaves the model half-loaded.
    """
    tensors, metadata = read_weights(path)
    check_state_dict(tensors, model, source=str(path))
    model.load_state_dict(tensors, strict=True)
    return metadata


def check_state_dict(tensors: Mapping[str, Tensor], model: nn.Module, source: str) -> None:
    """CheckpointError naming every missing, unexpected or mis-shaped tensor of `tensors` for `model`."""
    expected = model.state_dict()
    problems = []
    missing = [name for name in expected if name not in tensors]
    unexpected = [name for name in tensors if name not in expected]
    misshaped = [f"{name} {tuple(tensors[name].shape)} != {tuple(tensor.shape)}"
                 for name, tensor in expected.items() if name in tensors and tensors[name].shape != tensor.shape]
    for label, names in (("missing", missing), ("unexpected", unexpected), ("mis-shaped (file != model)", misshaped)):
        if names:
            more = f" ... and {len(names) - _MAX_NAMES} more" if len(names) > _MAX_NAMES else ""
            problems.append(f"{label}: {', '.join(names[:_MAX_NAMES])}{more}")
    if problems:
        raise CheckpointError(f"{source} does not fit this model; " + "; ".join(problems))


# ---------------------------------------------------------------- training state
def save_training_state(path: Path, state: Mapping[str, Any]) -> Path:
    """Write a nested training state (tensors, numbers, strings, lists, tuples, dicts) without pickle."""
    tensors: dict[str, Tensor] = {}
    encoded = _encode(dict(state), (), tensors)
    return _write(path, STATE_FORMAT, tensors, {"state": encoded})


def load_training_state(path: Path) -> dict[str, Any]:
    """Read back what `save_training_state` wrote; CheckpointError naming the file if it is damaged."""
    tensors, payload = _read(path, STATE_FORMAT)
    return _decode(payload["state"], tensors)


def _encode(value: Any, path: tuple[str, ...], tensors: dict[str, Tensor]) -> Any:
    if isinstance(value, Tensor):
        name = "/".join(path) or "tensor"
        if name in tensors:
            raise ValueError(f"two entries of the training state are both stored as {name!r}")
        tensors[name] = value
        return {_TENSOR: name}
    if isinstance(value, Mapping):
        if all(isinstance(key, str) for key in value):
            return {key: _encode(item, (*path, key), tensors) for key, item in value.items()}
        return {_ITEMS: [[key, _encode(item, (*path, str(key)), tensors)] for key, item in value.items()]}
    if isinstance(value, tuple):
        return {_TUPLE: [_encode(item, (*path, str(index)), tensors) for index, item in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(item, (*path, str(index)), tensors) for index, item in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy scalar
        return value.item()
    raise TypeError(f"training state entry {'/'.join(path)!r} has type {type(value).__name__}, "
                    "which cannot be saved without pickle (use tensors, numbers, strings, lists, dicts)")


def _decode(value: Any, tensors: Mapping[str, Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(item, tensors) for item in value]
    if not isinstance(value, dict):
        return value
    if _TENSOR in value:
        return tensors[value[_TENSOR]]
    if _ITEMS in value:
        return {key: _decode(item, tensors) for key, item in value[_ITEMS]}
    if _TUPLE in value:
        return tuple(_decode(item, tensors) for item in value[_TUPLE])
    return {key: _decode(item, tensors) for key, item in value.items()}
