"""The run report's translation diagnostics: length ratio, scores by reference length, the worst sentences."""

from __future__ import annotations

import re
from types import SimpleNamespace

from attnkit.app.translation.kind import report_diagnostics, report_samples

SOURCES = ["s1", "s2", "s3", "s4"]
REFERENCES = ["ein zwei", "drei vier fuenf sechs sieben acht", "neun zehn elf zwoelf dreizehn vierzehn", "hallo"]
TRANSLATIONS = {"s1": "ein zwei", "s2": "drei vier fuenf sechs sieben acht", "s3": "neun", "s4": "hallo"}


def test_the_section_ranks_by_chrf_and_groups_by_length():
    translator = SimpleNamespace(translate=lambda sources: [TRANSLATIONS[s] for s in sources])
    page = report_diagnostics(translator, {"sources": SOURCES, "references": REFERENCES, "target_lang": "de"})
    tables = re.findall(r"<table>(.*?)</table>", page)
    by_length, worst = tables
    assert re.findall(r"<tr><td>([\d+-]+)</td><td>(\d+)</td>", by_length) == [("1-5", "2"), ("6-10", "2")]
    rows = re.findall(r"<tr><td>([\d.]+)</td><td>(\w+)</td>", worst)
    assert [source for _, source in rows] == ["s3", "s1", "s2", "s4"]  # s3 lost 5 of 6 words; the rest are exact
    assert float(rows[0][0]) < 50 and float(rows[1][0]) == 100
    ratio = float(re.search(r"length ratio ([\d.]+)", page).group(1))
    assert abs(ratio - 10 / 15) < 1e-3  # 10 of the references' 15 tokens


def test_the_samples_carry_the_validation_pairs():
    pairs = [SimpleNamespace(source=s, target=t) for s, t in zip(SOURCES, REFERENCES)]
    task = SimpleNamespace(valid=SimpleNamespace(pairs=pairs, target_lang=None),
                           config=SimpleNamespace(target_lang="de"))
    samples = report_samples(task)
    assert samples.evaluation == {"sources": SOURCES, "references": REFERENCES, "target_lang": "de"}
    assert len(samples.texts) == 3


def test_other_samples_keep_the_remembered_split(translation_run, tmp_path):
    import json
    import shutil

    from attnkit.app.visualize.report import ASSETS, SAMPLES_FILE, write_report

    run = shutil.copytree(translation_run, tmp_path / "run")
    split = {"sources": ["one two"], "references": ["eins zwei"], "target_lang": "de"}
    (run / ASSETS).mkdir()
    (run / ASSETS / SAMPLES_FILE).write_text(json.dumps({"texts": [], "images": [], "evaluation": split}))
    page = write_report(run, texts=["three"]).read_text(encoding="utf-8")
    assert "<h2>Validation diagnostics</h2>" in page and "The first 1 validation sentences" in page
