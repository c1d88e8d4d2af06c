"""The run folder: everything one training run leaves behind, in one place.

```
RUN/
  config.json               the resolved config, plus "kind" ("translation"/"detection") and "format_version"
  metrics.jsonl             one JSON object a line: {"step", "time", "split": "train"|"valid", metric: value, ...}
  curves.png                training loss and every validation metric against step
  weights/last.safetensors      the weights at the last checkpoint
  weights/best.safetensors      the weights with the best validation metric
  weights/average.safetensors   the mean of the last N checkpoints' weights (Vaswani et al. 2017, section 6.1)
  weights/snapshots/step-*.safetensors   the last N checkpoints' weights, kept for the average
  state/step-*.safetensors  training state (optimizer, scheduler, step, data position, RNG); the last 2 are kept
```
Commands that read a run (`eval`, `translate`, ...) open it with `RunFolder.open(path, kind)`,
which refuses a folder of another kind with a CheckpointError.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnkit.errors import CheckpointError, ConfigError, DataError
from attnkit.storage.checkpoint import atomic_write_text, load_training_state, save_training_state

FORMAT_VERSION = 1
_RESERVED = ("kind", "format_version")
_STEP_FILE = re.compile(r"step-(\d+)\.safetensors")
_PARTIAL_FILE = re.compile(r"\..+\.tmp-\d+")  # atomic_write's temporary ".NAME.tmp-PID"


class RunFolder:
    """A run folder on disk: its config, metrics log, curves, weights and training states."""

    def __init__(self, path: Path, kind: str, config: dict[str, Any]) -> None:
        self.path = Path(path)
        self.kind = kind
        self.config = config  # the resolved config, without "kind" and "format_version"

    # ------------------------------------------------------------ creating and opening
    @classmethod
    def create(cls, path: Path, kind: str, config: Mapping[str, Any], resume: bool = False) -> RunFolder:
        """A folder for a new run, or (resume=True) the existing run of the same kind at `path`.

        Refuses to write into a non-empty folder that is not a run of this kind being resumed, so a
        finished run is never overwritten by accident.
        """
        path = Path(path)
        if resume:
            if not path.exists():
                raise CheckpointError(f"nothing to resume: {path} does not exist; start a new run without --resume")
            if not (path / "config.json").is_file():
                raise CheckpointError(f"cannot resume: {path} is not a run folder (it has no config.json); "
                                      "choose another --out")
            run = cls.open(path, kind)
            _warn_about_changes(run, dict(config))
            run.remove_partial_writes()
            return run
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise CheckpointError(f"{path} already exists and is not empty; pass --resume to continue the run "
                                  "there, or choose another --out")
        clashes = [key for key in _RESERVED if key in config]
        if clashes:
            raise ConfigError(f"config keys {clashes} are reserved for the run folder")
        path.mkdir(parents=True, exist_ok=True)
        document = {"kind": kind, "format_version": FORMAT_VERSION, **config}
        text = json.dumps(document, indent=2, default=str)  # paths and other plain values as strings
        atomic_write_text(path / "config.json", text + "\n")
        return cls(path, kind, {key: value for key, value in json.loads(text).items() if key not in _RESERVED})

    @classmethod
    def open(cls, path: Path, kind: str | None = None) -> RunFolder:
        """An existing run; CheckpointError if config.json is missing, malformed or of another kind."""
        path = Path(path)
        config_path = path / "config.json"
        if not path.is_dir():
            raise CheckpointError(f"no run folder at {path}")
        if not config_path.is_file():
            raise CheckpointError(f"{path} is not a run folder: {config_path} is missing")
        try:
            document = json.loads(config_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{config_path} is not valid JSON ({error})") from None
        if not isinstance(document, dict) or "kind" not in document:
            raise CheckpointError(f"{config_path} has no \"kind\"; it was not written by attnkit")
        if document.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(f"{config_path} has format_version {document.get('format_version')!r}; "
                                  f"this attnkit reads version {FORMAT_VERSION}")
        if kind is not None and document["kind"] != kind:
            raise CheckpointError(f"{path} is a {document['kind']} run, not a {kind} run")
        config = {key: value for key, value in document.items() if key not in _RESERVED}
        return cls(path, document["kind"], config)

    # ------------------------------------------------------------ paths
    @property
    def config_path(self) -> Path:
        return self.path / "config.json"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def curves_path(self) -> Path:
        return self.path / "curves.png"

    @property
    def last_weights(self) -> Path:
        return self.path / "weights" / "last.safetensors"

    @property
    def best_weights(self) -> Path:
        return self.path / "weights" / "best.safetensors"

    @property
    def average_weights(self) -> Path:
        return self.path / "weights" / "average.safetensors"

    @property
    def ema_weights(self) -> Path:
        """The moving average of the weights (`attnkit.training.ema`), written when training kept one."""
        return self.path / "weights" / "ema.safetensors"

    def weights_path(self, which: str = "best") -> Path:
        """weights/{best,last,average,ema}.safetensors; CheckpointError if this run has not written it."""
        paths = {"best": self.best_weights, "last": self.last_weights, "average": self.average_weights,
                 "ema": self.ema_weights}
        if which not in paths:
            raise ConfigError(f"unknown weights {which!r}: choose from {', '.join(paths)}")
        if not paths[which].is_file():
            present = [name for name, path in paths.items() if path.is_file()]
            raise CheckpointError(f"{self.path} has no {which} weights ({paths[which]} is missing); "
                                  f"it has: {', '.join(present) or 'no weights yet'}")
        return paths[which]

    def snapshot_path(self, step: int) -> Path:
        return self.path / "weights" / "snapshots" / f"step-{step:08d}.safetensors"

    def snapshots(self) -> list[Path]:
        """Weight snapshots kept for averaging, oldest first."""
        return _step_files(self.path / "weights" / "snapshots")

    def state_path(self, step: int) -> Path:
        return self.path / "state" / f"step-{step:08d}.safetensors"

    def training_states(self) -> list[Path]:
        """Training-state files, oldest first."""
        return _step_files(self.path / "state")

    # ------------------------------------------------------------ training state
    def save_state(self, step: int, state: Mapping[str, Any], keep: int = 2) -> Path:
        """Write the training state of `step` and delete all but the newest `keep` states."""
        path = save_training_state(self.state_path(step), state)
        for old in self.training_states()[:-keep]:
            old.unlink(missing_ok=True)
        return path

    def load_newest_state(self) -> tuple[Path, dict[str, Any]] | None:
        """(path, state) of the newest training state that reads back intact, falling back to older ones.

        A damaged file is renamed to `*.damaged`, so that it is kept for inspection but never tried
        again nor mistaken for the newest state. None if there is no state; CheckpointError naming
        every file if all are damaged.
        """
        failures = []
        for path in reversed(self.training_states()):
            try:
                return path, load_training_state(path)
            except CheckpointError as error:
                failures.append(str(error))
                path.replace(path.with_name(path.name + ".damaged"))
                print(f"warning: {error}; set aside as {path.name}.damaged, trying the previous training state",
                      file=sys.stderr)
        if failures:
            raise CheckpointError(f"no usable training state in {self.path / 'state'}: " + "; ".join(failures))
        return None

    def remove_partial_writes(self) -> list[Path]:
        """Delete the temporary files of writes a killed run left unfinished (never loaded: see atomic_write)."""
        partial = [path for path in self.path.rglob(".*.tmp-*") if _PARTIAL_FILE.fullmatch(path.name)]
        for path in partial:
            path.unlink(missing_ok=True)
        return partial

    # ------------------------------------------------------------ metrics
    def log(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Append one record (it must have "step"; "time" is added) as a JSON line to metrics.jsonl."""
        if "step" not in record:
            raise ValueError("a metrics record needs a 'step'")
        line = {"step": record["step"], "time": round(time.time(), 3),
                **{key: value for key, value in record.items() if key != "step"}}
        with open(self.metrics_path, "a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")
        return line

    def metrics(self) -> list[dict[str, Any]]:
        """Every record of metrics.jsonl; a final line cut short by a crash is ignored."""
        if not self.metrics_path.is_file():
            return []
        lines = self.metrics_path.read_text(encoding="utf-8").split("\n")
        records = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                if number == len(lines):  # no newline after it: the write was interrupted
                    break
                raise DataError(f"{self.metrics_path}, line {number}: not valid JSON ({error})") from None
        return records

    def truncate_metrics(self, after_step: int) -> None:
        """Drop records logged after `after_step` (a resumed run logs those steps again)."""
        kept = [record for record in self.metrics() if record["step"] <= after_step]
        atomic_write_text(self.metrics_path, "".join(json.dumps(record) + "\n" for record in kept))


def _step_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in folder.iterdir()
             if (match := _STEP_FILE.fullmatch(path.name))]
    return [path for _, path in sorted(found)]


def _warn_about_changes(run: RunFolder, config: dict[str, Any]) -> None:
    if not config:
        return
    config = json.loads(json.dumps(config, default=str))  # compare as saved: tuples become lists
    changed = sorted(key for key in set(run.config) | set(config) if run.config.get(key) != config.get(key))
    if changed:
        print(f"warning: resuming {run.path}, whose config.json differs in: {', '.join(changed)}; "
              "the saved config.json is kept", file=sys.stderr)
