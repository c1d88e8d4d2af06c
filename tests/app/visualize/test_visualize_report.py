"""The commands write the report at the end of every run (a `Trainer` callback); a report that fails loses nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace

import torch
from torch import nn

from attnkit.app.visualize import report as report_module
from attnkit.app.visualize.report import write_report
from attnkit.storage import RunFolder
from attnkit.training import Budget, LoopConfig, Trainer, plot_curves


class LineTask:
    """y = 2x with a linear model: just enough of a task for the loop to run a few steps."""

    best_metric = ("loss", "min")
    items_name = "examples"

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.x = torch.linspace(-1, 1, 8).unsqueeze(1)

    def lr_factor(self, step: int, budget_spent: float) -> float:
        return 1.0

    def batches(self, epoch: int):
        return [(self.x, 2 * self.x)] * 3

    def load(self, batches):
        return batches

    def train_step(self, model, batch):
        x, y = batch
        return {"loss": nn.functional.mse_loss(model(x), y), "items": len(x)}

    def evaluate(self) -> dict[str, float]:
        return {"loss": float(nn.functional.mse_loss(self.model(self.x), 2 * self.x))}

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass


def fit(tmp_path, name: str = "run"):
    run = RunFolder.create(tmp_path / name, "line", {"lr": 0.1})
    task = LineTask()
    result = Trainer(task, run, Budget(steps=4), LoopConfig(log_every_steps=2, eval_every_steps=2),
                     progress=False, at_end=[plot_curves, report_module.report_at_end(task)]).fit()
    return run, result


def test_every_run_ends_with_its_report(tmp_path, capsys):
    run, result = fit(tmp_path)
    page = (run.path / "report.html").read_text(encoding="utf-8")
    assert f"report: {run.path / 'report.html'}" in capsys.readouterr().err
    assert "<h2>Config</h2>" in page and "&quot;lr&quot;: 0.1" in page
    assert "data:image/png;base64," in page  # curves.png, embedded
    assert "Validation at step 4" in page and f"Best loss: <b>{result.best_value:.4g}</b> at step 4" in page
    assert "<td>optimizer steps</td><td>4</td>" in page


def test_a_report_that_fails_does_not_lose_the_run(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no pictures today")

    monkeypatch.setattr(report_module, "write_report", broken)
    run, result = fit(tmp_path)
    assert result.step == 4 and run.last_weights.is_file() and run.best_weights.is_file()
    assert not (run.path / "report.html").exists()
    err = capsys.readouterr().err
    assert "could not write" in err and "no pictures today" in err and f"attnkit report {run.path}" in err


def test_samples_from_the_task_are_remembered_for_later_reports(translation_run):
    pairs = [SimpleNamespace(source="one two three", target="eins zwei drei"),
             SimpleNamespace(source="seven eight nine", target="sieben acht neun")]
    task = SimpleNamespace(valid=SimpleNamespace(pairs=pairs, target_lang=None),  # a TranslationTask's parts
                           config=SimpleNamespace(target_lang="de"))
    write_report(translation_run, task=task)
    remembered = json.loads((translation_run / "report" / "samples.json").read_text())
    assert remembered["texts"][1] == {"source": "seven eight nine", "reference": "sieben acht neun"}
    page = write_report(translation_run).read_text(encoding="utf-8")  # no task: the remembered samples
    assert "<h3>Sentence 2</h3>" in page and "reference: sieben acht neun" in page
    assert "The first 2 validation sentences" in page  # the diagnostics too
    assert (translation_run / "report" / "sentence2_alignment.png").is_file()
