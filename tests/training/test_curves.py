"""curves.png: metrics only (no bookkeeping, no COCO -1), the training loss smoothed over the faint raw values."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
from torch.testing import assert_close

from attnkit.training.curves import curves_figure, plot_curves, smooth, smoothing_weight, validation_panels


def detection_records(steps: int = 100, validations: tuple[int, ...] = (50, 100)) -> list[dict]:
    records = [{"step": step, "split": "train", "elapsed_s": 2.0 * step, "loss": 2 + math.sin(step),
                "lr": 1e-4, "images_per_s": 30.0} for step in range(1, steps + 1)]
    for step in validations:
        records.append({"step": step, "split": "valid", "AP": step / 200, "AP50": step / 100, "AP75": step / 400,
                        "APs": -1.0, "APm": step / 300, "APl": -1.0 if step == 50 else 0.4, "images": 20,
                        "seconds": 1.5})
    return records


def test_smooth_is_a_debiased_exponential_moving_average():
    # s1 = 0.5 * 1 / (1 - 0.5) = 1;  s2 = (0.25 + 0.5 * 3) / (1 - 0.25) = 7/3
    assert_close(smooth([1.0, 3.0], 0.5), [1.0, 7 / 3])
    assert smooth([1.0, 3.0, 2.0], 0.0) == [1.0, 3.0, 2.0]
    assert smoothing_weight(20) == 0.0 and smoothing_weight(200) == pytest.approx(0.9)


def test_panels_hold_metrics_only_and_group_coco_families():
    valid = [record for record in detection_records() if record["split"] == "valid"]
    # images and seconds are bookkeeping; APs is -1 (no small objects) throughout: no panel for them
    assert validation_panels(valid) == {"AP by IoU threshold": ["AP", "AP50", "AP75"],
                                        "AP by object size": ["APm", "APl"]}


def test_the_figure_skips_sentinels_and_smooths_the_loss():
    figure = curves_figure(detection_records(steps=200))
    loss, by_iou, by_size = figure.axes[:3]
    assert [ax.get_title() for ax in figure.axes[:3]] == ["loss", "AP by IoU threshold", "AP by object size"]
    raw, smoothed = loss.lines
    assert raw.get_alpha() < 0.5 and smoothed.get_alpha() is None
    assert_close(list(smoothed.get_ydata()), smooth(list(raw.get_ydata()), smoothing_weight(200)))
    large = next(line for line in by_size.lines if line.get_label() == "APl")
    assert list(large.get_xdata()) == [100] and list(large.get_ydata()) == [0.4]  # step 50's -1 left out
    assert large.get_marker() == "o"  # a single point shows
    assert any(text.get_text() == "0.4" for text in by_size.texts)  # the latest value, written
    (time,) = loss.child_axes  # on top, at the step axis's ticks: the time then (2 s a step, 400 s in minutes)
    assert time.xaxis.get_major_formatter()(150, 0) == "5 min"
    plt.close(figure)


def test_a_single_validation_is_drawn_as_a_marker(tmp_path):
    records = [{"step": step, "split": "train", "loss": 3.0 - step / 10} for step in range(1, 6)]
    records.append({"step": 5, "split": "valid", "loss": 2.6, "bleu": 12.5, "sentences": 8, "seconds": 0.4})
    figure = curves_figure(records)
    assert [ax.get_title() for ax in figure.axes if ax.get_title()] == ["loss", "validation bleu"]
    (bleu,) = figure.axes[1].lines
    assert bleu.get_marker() == "o" and list(bleu.get_ydata()) == [12.5]
    assert [line.get_label() for line in figure.axes[0].lines] == ["training loss", "validation loss"]  # unsmoothed
    plt.close(figure)
    assert plot_curves(records, tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
