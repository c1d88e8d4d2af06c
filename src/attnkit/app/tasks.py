"""The task registry: every kind of run the application knows, each declared once in its own `kind.py`.

A run folder names its kind in config.json ("detection", "translation"). Whatever the
application does with a run folder without knowing its kind in advance (serve it, export it,
draw its attention, write its report, show it in the demo) goes through `kind_of(run)`, so that
adding a task means its library package, its `app/<task>/` package, and one line here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.errors import ConfigError


@dataclass(frozen=True)
class TaskKind:
    """What the application does with one kind of run; every callable imports its task's modules when called.

    load(run, weights, device) -> the task's predictor (`Detector`, `Translator`);
    export_onnx(predictor, out) -> the manifest of an ONNX export folder;
    export_hf(run_folder, tensors, out) -> a transformers model, unsaved;
    attention(predictor, out, texts, images, threshold) -> the PNG files drawn;
    report_samples(task) -> what the run report shows predictions for, from the training recipe's task;
    report_predictions(run_folder, samples, assets) -> the report's HTML section of sample predictions;
    demo(out) -> trains a small model on built-in data and shows it.
    """

    name: str
    commands: str  # the module that adds the task's commands to the CLI
    load: Callable[[Path, str, Any], Any]
    export_onnx: Callable[[Any, Path], dict]
    export_hf: Callable[[Any, dict, Path], Any]
    attention: Callable[[Any, Path, Sequence[str], Sequence[Path], float], list[Path]]
    report_samples: Callable[[Any], Any]
    report_predictions: Callable[[Any, Any, Path], str]
    demo: Callable[[Path], None]


def kinds() -> dict[str, TaskKind]:
    """Every registered task kind, by name, in the order the demo runs them."""
    from attnkit.app.detection.kind import DETECTION
    from attnkit.app.translation.kind import TRANSLATION

    return {kind.name: kind for kind in (DETECTION, TRANSLATION)}


def task_kind(name: str, what: str = "run") -> TaskKind:
    """The kind called NAME; ConfigError naming the known kinds."""
    known = kinds()
    if name not in known:
        raise ConfigError(f"{what}: a {name} run, and attnkit knows {' and '.join(known)} runs")
    return known[name]


def kind_of(run: Path) -> TaskKind:
    """The kind of the run folder RUN (CheckpointError if RUN is not a run folder)."""
    from attnkit.storage import RunFolder

    return task_kind(RunFolder.open(Path(run)).kind, str(run))
