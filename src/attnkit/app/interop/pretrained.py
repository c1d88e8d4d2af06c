"""Where pretrained weights come from: a local path, or a Hugging Face Hub id fetched into the Hub's cache.

`attnkit train detection|translation --init SOURCE` and `attnkit import detr|marian SOURCE` take
  - an attnkit run folder (a `--init` only: used as it is);
  - an official DETR `.pth` (facebookresearch/detr), or a transformers folder (DETR, Marian);
  - a Hub id such as `facebook/detr-resnet-50` or `Helsinki-NLP/opus-mt-en-de`, downloaded with
    `huggingface_hub.snapshot_download` into its usual cache (HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE
    apply), with the optional extra `hub`.
A source that is not a run folder goes through the importers (`detr_import`, `marian_import`) into
a temporary run folder, removed when the process exits.
"""

from __future__ import annotations

import atexit
import json
import re
import shutil
import tempfile
from pathlib import Path

from attnkit.errors import CheckpointError, require_extra
from attnkit.training.messages import note

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the Hub spells repositories
SAFETENSORS = ["*.json", "*.spm", "*.safetensors"]  # a model's config, tokenizer files and weights
TORCH_WEIGHTS = ["*.json", "*.spm", "pytorch_model*.bin"]  # for repositories without safetensors


def local_source(source: str | Path) -> Path:
    """SOURCE as a local path: an existing file or folder as it is, a Hub id (owner/name) from the Hub's cache."""
    path = Path(source)
    if path.exists() or not HUB_ID.fullmatch(str(source)):
        return path
    return hub_snapshot(str(source))


def hub_snapshot(repo_id: str) -> Path:
    """The folder of REPO_ID's newest snapshot in the Hugging Face cache (downloaded if not there yet).

    Only the config, tokenizer files and one format of weights are fetched: safetensors, or the
    PyTorch `.bin` files of a repository that has none. ConfigError without the `hub` extra.
    """
    require_extra("hub", ["huggingface_hub"], f"the Hugging Face Hub id {repo_id} (not a local path)")
    from huggingface_hub import snapshot_download

    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=SAFETENSORS))
        if not any(folder.glob("*.safetensors")):
            folder = Path(snapshot_download(repo_id, allow_patterns=TORCH_WEIGHTS))
    except Exception as error:  # noqa: BLE001 - offline, not found, gated: the user's to fix, said in one line
        raise CheckpointError(f"{repo_id}: not a local file or folder, and not fetched from the Hugging Face Hub "
                              f"({type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''})"
                              ) from None
    note(f"hub: {repo_id} -> {folder}")
    return folder


def is_run_folder(path: Path) -> bool:
    """Whether PATH is an attnkit run folder (its config.json names the run's kind), not another project's."""
    config = path / "config.json"
    try:
        return path.is_dir() and "kind" in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def init_run(source: str | Path, kind: str) -> Path:
    """A run folder of KIND to start training from: SOURCE itself if it is a run folder (or nothing at all, for
    RunFolder.open to name), else SOURCE imported (DETR for detection, Marian for translation) into a
    temporary run folder that is removed at exit."""
    path = local_source(source)
    if is_run_folder(path) or not path.exists():
        return path
    scratch = Path(tempfile.mkdtemp(prefix="attnkit-init-"))
    atexit.register(shutil.rmtree, scratch, True)
    note(f"init: importing {source} into a temporary {kind} run folder")
    if kind == "detection":
        from attnkit.app.interop.detr_import import import_detr

        return import_detr(path, scratch / "run").path
    from attnkit.app.interop.marian_import import import_marian

    return import_marian(path, scratch / "run").path
