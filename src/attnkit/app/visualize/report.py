"""The run report: one self-contained HTML page per run folder, RUN/report.html.

Config, training and validation curves, final metrics, sample predictions (translations with their
alignment maps; images with boxes and each object's decoder attention) and timing. Pictures are
embedded as data URIs, so the page can be mailed or archived alone; the PNGs are also kept in
RUN/report/. The training loop writes it at the end of every run (`write_report(run, task)`),
`attnkit report RUN` writes it again, for instance with other sentences or images.

The samples come from the task at the end of training (the first validation sentences or images)
and are remembered in RUN/report/samples.json, so a later `attnkit report RUN` shows the same ones.
"""

from __future__ import annotations

import base64
import html
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit.app.tasks import kinds
from attnkit.errors import DataError
from attnkit.storage import RunFolder, read_weights
from attnkit.training.curves import plot_run_curves
from attnkit.training.rng import isolated_rng

REPORT_FILE = "report.html"
ASSETS = "report"
SAMPLES_FILE = "samples.json"
MAX_SAMPLES = 3


@dataclass
class Samples:
    """What to show predictions for: sentence pairs (translation) and image files (detection)."""

    texts: list[dict[str, str]] = field(default_factory=list)  # {"source", "reference" (may be "")}
    images: list[str] = field(default_factory=list)  # image file paths
    # the split diagnosed: detection {"images", "annotations"}; translation {"sources", "references"}
    evaluation: dict[str, Any] = field(default_factory=dict)


def write_report(run: RunFolder | Path, task: Any = None, texts: Sequence[str] = (), images: Sequence[Path] = (),
                 out: Path | None = None) -> Path:
    """Write RUN/report.html (or OUT) and return its path; samples from TEXTS/IMAGES, else the task, else
    the ones remembered from the end of training."""
    run = run if isinstance(run, RunFolder) else RunFolder.open(Path(run))
    assets = run.path / ASSETS
    assets.mkdir(parents=True, exist_ok=True)
    samples = _samples(run, task, texts, images)
    sections = [_config_section(run), _curves_section(run), _metrics_section(run)]
    kind = kinds().get(run.kind)
    if kind is not None and (samples.texts or samples.images):
        sections.append(_guarded("sample predictions", lambda: kind.report_predictions(run, samples, assets)))
    sections.append(_timing_section(run))
    path = Path(out) if out is not None else run.path / REPORT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_page(run, sections), encoding="utf-8")
    return path


def report_at_end(task: Any) -> Callable[[RunFolder, Any], None]:
    """A `Trainer(at_end=...)` callback (`attnkit.training.AtEnd`): RUN/report.html with TASK's samples; a failure
    to draw it only warns."""
    def write(run: RunFolder, result: Any = None) -> None:
        try:
            with isolated_rng():
                print(f"report: {write_report(run, task=task)}", flush=True, file=sys.stderr)
        except Exception as error:  # noqa: BLE001 - the run is saved; the report is a view of it
            print(f"warning: could not write {run.path / REPORT_FILE} ({type(error).__name__}: {error}); "
                  f"try again with: attnkit report {run.path}", file=sys.stderr, flush=True)
    return write


# ---------------------------------------------------------------- samples
def _samples(run: RunFolder, task: Any, texts: Sequence[str], images: Sequence[Path]) -> Samples:
    remembered = run.path / ASSETS / SAMPLES_FILE
    if texts or images:
        for image in images:
            if not Path(image).is_file():
                raise DataError(f"{image}: image file not found")
        evaluation = _remembered(remembered).evaluation if remembered.is_file() else {}  # the diagnostics stay
        return Samples([{"source": text, "reference": ""} for text in texts], [str(Path(i).resolve()) for i in images],
                       evaluation)
    kind = kinds().get(run.kind)  # a run of another kind (a test's toy task) shows no samples
    from_task = kind.report_samples(task) if task is not None and kind is not None else None
    if from_task is not None:
        remembered.write_text(json.dumps(from_task.__dict__, indent=1), encoding="utf-8")
        return from_task
    return _remembered(remembered) if remembered.is_file() else Samples()


def _remembered(path: Path) -> Samples:
    try:
        return Samples(**json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as error:
        raise DataError(f"{path}: not a samples file ({error}); delete it or pass --text/--image") from None


# ---------------------------------------------------------------- sections
def _config_section(run: RunFolder) -> str:
    text = json.dumps({"kind": run.kind, **run.config}, indent=2)
    return f"<h2>Config</h2>\n<pre>{html.escape(text)}</pre>"


def _curves_section(run: RunFolder) -> str:
    if run.metrics_path.is_file() and not run.curves_path.is_file():
        plot_run_curves(run)
    if not run.curves_path.is_file():
        return "<h2>Curves</h2>\n<p>No metrics were logged yet.</p>"
    return f"<h2>Curves</h2>\n{image_tag(run.curves_path, 'training and validation curves')}"


def _metrics_section(run: RunFolder) -> str:
    records = run.metrics()
    valid = [r for r in records if r.get("split") == "valid"]
    train = [r for r in records if r.get("split") == "train"]
    parts = ["<h2>Final metrics</h2>"]
    if not records:
        return parts[0] + "\n<p>No metrics were logged yet.</p>"
    if valid:
        parts.append(f"<p>Validation at step {valid[-1]['step']}:</p>" + _table([_numbers(valid[-1])]))
        best = _best(run)
        if best is not None:
            name, value, step, source = best
            of = " of the moving average" if source == "ema" else ""
            parts.append(f"<p>Best {html.escape(name)}: <b>{value:.4g}</b> at step {step}{of} "
                         f"(weights/best.safetensors).</p>")
    if train:
        parts.append(f"<p>Training at step {train[-1]['step']}:</p>" + _table([_numbers(train[-1])]))
    return "\n".join(parts)


def _best(run: RunFolder) -> tuple[str, float, int, str] | None:
    """(metric, value, step, "model" or "ema") as the training loop wrote them into weights/best's metadata;
    None without one."""
    if not run.best_weights.is_file():
        return None
    metadata = read_weights(run.best_weights)[1]
    scores = [(key, value) for key, value in metadata.items() if key not in ("kind", "step", "weights")]
    return (*scores[0], metadata["step"], metadata.get("weights", "model")) if scores and "step" in metadata else None


def _timing_section(run: RunFolder) -> str:
    records = run.metrics()
    train = [r for r in records if r.get("split") == "train"]
    rows = {}
    if train:
        last = train[-1]
        rows["optimizer steps"] = last["step"]
        rows["epochs started"] = last.get("epoch", 0) + 1
        if "elapsed_s" in last:
            rows["training time"] = _duration(last["elapsed_s"])
            rows["seconds per step"] = f"{last['elapsed_s'] / max(last['step'], 1):.3g}"
        for key in (k for k in last if k.endswith("_per_s")):
            speeds = [r[key] for r in train if isinstance(r.get(key), (int, float))]
            rows[key.replace("_per_s", " per second (mean of the logs)")] = f"{sum(speeds) / len(speeds):.4g}"
    if records:
        rows["wall clock, first to last log"] = _duration(records[-1]["time"] - records[0]["time"])
    for which in ("best", "last", "average"):
        path = run.path / "weights" / f"{which}.safetensors"
        if path.is_file():
            rows[f"weights/{which}"] = f"{path.stat().st_size / 1e6:.1f} MB"
    if not rows:
        return "<h2>Timing</h2>\n<p>No training steps were logged yet.</p>"
    return "<h2>Timing</h2>\n" + _table([{"": key, "value": value} for key, value in rows.items()], header=False)


def _guarded(title: str, build: Callable[[], str]) -> str:
    """A section that may fail (a missing weights file, an unreadable image) without losing the rest."""
    try:
        return build()
    except Exception as error:  # noqa: BLE001 - the report shows what went wrong instead of failing
        return f"<h2>{html.escape(title.capitalize())}</h2>\n<p class='error'>Could not draw the {title}: " \
               f"{html.escape(type(error).__name__)}: {html.escape(str(error))}</p>"


# ---------------------------------------------------------------- HTML
_STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
pre{background:#f5f5f5;padding:.8em;overflow-x:auto;font-size:13px}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:right}
img{max-width:100%;display:block;margin:.5em 0;border:1px solid #eee}.error{color:#b00}"""


def _page(run: RunFolder, sections: list[str]) -> str:
    title = f"attnkit {run.kind} run: {run.path.name}"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return (f"<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n<title>{html.escape(title)}</title>\n"
            f"<style>{_STYLE}</style>\n</head>\n<body>\n<h1>{html.escape(title)}</h1>\n"
            f"<p>{html.escape(str(run.path.resolve()))}, written {stamp}</p>\n"
            + "\n".join(sections) + "\n</body>\n</html>\n")


def image_tag(path: Path, alt: str) -> str:
    """An <img> with the PNG at PATH embedded, so that the page is one self-contained file."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"<img alt='{html.escape(alt)}' src='data:image/png;base64,{data}'>"


def table(rows: list[dict[str, Any]], header: bool = True) -> str:
    """An HTML table of ROWS (one dict a row, the keys the columns; floats to 4 significant digits)."""
    return _table(rows, header)


def _table(rows: list[dict[str, Any]], header: bool = True) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    head = "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>" if header else ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_format(row.get(c, '')))}</td>" for c in columns) + "</tr>"
                   for row in rows)
    return f"<table>{head}{body}</table>"


def _numbers(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items()
            if key not in ("time", "split") and isinstance(value, (int, float))}


def _format(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
