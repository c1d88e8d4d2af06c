"""Dynamic batching: concurrent requests run together, each gets its own answer, a failure stays its own."""

from __future__ import annotations

import asyncio
import io
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from attnkit.app.serve.batcher import Batcher

pytest.importorskip("fastapi", reason="the optional extra `serve` is not installed")
from fastapi.testclient import TestClient  # noqa: E402
from PIL import Image  # noqa: E402

from attnkit.app.serve import create_app  # noqa: E402


def _submit_all(batcher: Batcher, items: list, run, key=("k",)) -> list:
    async def everything():
        return await asyncio.gather(*(batcher.submit(key, item, run) for item in items), return_exceptions=True)

    return asyncio.run(everything())


def test_concurrent_items_run_in_batches_of_at_most_max_batch():
    batches: list[list[int]] = []

    def square(items):
        batches.append(list(items))
        return [item * item for item in items]

    batcher = Batcher(max_batch=4, wait_seconds=0.5)
    assert _submit_all(batcher, list(range(10)), square) == [i * i for i in range(10)]
    assert sorted(len(b) for b in batches) == [2, 4, 4]  # the wait ends as soon as a batch is full
    assert sorted(i for b in batches for i in b) == list(range(10))
    assert (batcher.stats.batches, batcher.stats.requests, batcher.stats.largest) == (3, 10, 4)
    assert batcher.stats.sizes == {4: 2, 2: 1}


def test_a_failing_item_fails_alone():
    def inverse(items):
        return [1 / item for item in items]  # a zero fails the whole batch: each is rerun alone

    results = _submit_all(Batcher(max_batch=8, wait_seconds=0.5), [1, 0, 4], inverse)
    assert results[0] == 1.0 and results[2] == 0.25
    assert isinstance(results[1], ZeroDivisionError)


def test_an_item_result_that_is_an_exception_is_raised_for_that_item_only():
    def checked(items):
        return [ValueError(f"bad {item}") if item < 0 else item for item in items]

    results = _submit_all(Batcher(max_batch=8, wait_seconds=0.5), [3, -1, 5], checked)
    assert results[0] == 3 and results[2] == 5
    assert isinstance(results[1], ValueError) and str(results[1]) == "bad -1"


def test_keys_are_batched_apart():
    seen: list[tuple] = []

    def tagged(items):
        seen.append(tuple(items))
        return list(items)

    batcher = Batcher(max_batch=8, wait_seconds=0.2)

    async def both():
        return await asyncio.gather(batcher.submit("a", 1, tagged), batcher.submit("b", 2, tagged),
                                    batcher.submit("a", 3, tagged))

    assert asyncio.run(both()) == [1, 2, 3]
    assert sorted(seen) == [(1, 3), (2,)]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        Batcher(max_batch=0)
    with pytest.raises(ValueError):
        Batcher(wait_seconds=-1)


def _png(seed: int, width: int = 96, height: int = 80) -> bytes:
    generator = torch.Generator().manual_seed(seed)
    pixels = (torch.rand(height, width, 3, generator=generator) * 255).to(torch.uint8).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture()
def batched_client(served):
    # a long wait and a small max_batch: 8 concurrent requests form batches of 4 (the wait ends when one is full)
    with TestClient(create_app(served, batcher=Batcher(max_batch=4, wait_seconds=2.0))) as test_client:
        yield test_client


def _model(served, kind: str):
    return next(m.model for m in served.values() if m.kind == kind)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_concurrent_translations_are_each_their_own(batched_client, served, beam_size):
    texts = ["one two three", "four five", "seven eight nine ten", "twelve", "one", "five six seven",
             "eleven ten nine eight", "two three"]
    with ThreadPoolExecutor(len(texts)) as pool:
        answers = list(pool.map(lambda text: batched_client.post(
            "/api/translate", json={"text": text, "beam_size": beam_size}), texts))
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    translator = _model(served, "translation")
    alone = [translator.translate([text], beam_size=beam_size)[0] for text in texts]
    assert [answer.json()["translation"] for answer in answers] == alone
    stats = batched_client.get("/api/batches").json()
    assert stats["requests"] == len(texts) and stats["largest"] > 1


def test_concurrent_detections_are_each_their_own(batched_client, served):
    images = [_png(seed, width=96 if seed % 2 else 64) for seed in range(8)]  # two sizes: two stacks in a batch
    thresholds = [0.0, 0.2] * 4
    with ThreadPoolExecutor(len(images)) as pool:
        answers = list(pool.map(lambda pair: batched_client.post(
            "/api/detect", files={"image": ("p.png", pair[0], "image/png")}, data={"threshold": str(pair[1])}),
            zip(images, thresholds)))
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    detector = _model(served, "detection")
    for answer, image, threshold in zip(answers, images, thresholds):
        expected = detector.predict(Image.open(io.BytesIO(image)).convert("RGB"), threshold)[0]
        got = answer.json()["detections"]
        assert len(got) == min(len(expected), 100)
        torch.testing.assert_close(torch.tensor([d["box"] for d in got]).reshape(-1, 4), expected.boxes[:len(got)],
                                   atol=0.02, rtol=0)
        assert [d["name"] for d in got] == expected.names[:len(got)]
    assert batched_client.get("/api/batches").json()["largest"] > 1


def test_a_bad_image_in_a_concurrent_batch_fails_alone(batched_client):
    files = [("p.png", _png(1), "image/png"), ("bad.png", _png(2)[:60], "image/png"), ("q.png", _png(3), "image/png")]
    with ThreadPoolExecutor(len(files)) as pool:
        answers = list(pool.map(lambda file: batched_client.post("/api/detect", files={"image": file}), files))
    assert [answer.status_code for answer in answers] == [200, 422, 200]


def test_models_can_be_served_in_int8(translation_run, detection_run):
    from attnkit.app.serve import load_models, models as served_models
    from attnkit.nn.quantize import int8_share
    from attnkit.translation.translator import Translator

    served = load_models([translation_run, detection_run], quantize="int8")
    assert all(int8_share(m.model.model) > 0 for m in served.values())
    translation = next(m for m in served.values() if m.kind == "translation")
    expected = Translator.from_run(translation_run, device="cpu", quantize="int8").translate(["one two"], beam_size=1)
    assert served_models.translate(translation, [("one two", False)], 1)[0]["translation"] == expected[0]
