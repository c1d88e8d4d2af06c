"""The HTTP API against the models called directly, and every kind of bad request."""

from __future__ import annotations

import io

import pytest
import torch

pytest.importorskip("fastapi", reason="the optional extra `serve` is not installed")
from fastapi.testclient import TestClient  # noqa: E402
from PIL import Image  # noqa: E402

from attnkit.app.serve import Limits, create_app  # noqa: E402


def png_bytes(width: int = 96, height: int = 80, seed: int = 0) -> bytes:
    """A random-noise PNG."""
    generator = torch.Generator().manual_seed(seed)
    pixels = (torch.rand(height, width, 3, generator=generator) * 255).to(torch.uint8).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


LIMITS = Limits(max_body_bytes=200_000, max_pixels=300 * 300, max_text_chars=100)


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, LIMITS)) as test_client:
        yield test_client


def _translator(served):
    return next(m.model for m in served.values() if m.kind == "translation")


def _detector(served):
    return next(m.model for m in served.values() if m.kind == "detection")


def test_translate_matches_the_translator(client, served):
    response = client.post("/api/translate", json={"text": "one two three", "beam_size": 1})
    assert response.status_code == 200, response.text
    assert response.json()["translation"] == _translator(served).translate(["one two three"], beam_size=1)[0]
    assert "alignment" not in response.json()


def test_translate_returns_the_alignment(client, served):
    body = client.post("/api/translate", json={"text": "four five", "attention": True}).json()
    alignment = torch.tensor(body["alignment"])  # (target tokens, source tokens)
    assert alignment.shape == (len(body["target_tokens"]), len(body["source_tokens"]))
    torch.testing.assert_close(alignment.sum(-1), torch.ones(len(alignment)), atol=1e-3, rtol=0)


def test_detect_matches_the_detector(client, served):
    image = Image.open(io.BytesIO(png_bytes()))
    response = client.post("/api/detect", files={"image": ("picture.png", png_bytes(), "image/png")},
                           data={"threshold": "0.0"})
    assert response.status_code == 200, response.text
    body = response.json()
    expected = _detector(served).predict(image.convert("RGB"), 0.0)[0]
    assert (body["width"], body["height"]) == (96, 80)
    got = torch.tensor([d["box"] for d in body["detections"]])
    torch.testing.assert_close(got, expected.boxes[:len(got)], atol=0.01, rtol=0)
    assert [d["name"] for d in body["detections"]] == expected.names[:len(got)]


def test_detect_returns_each_objects_attention(client):
    body = client.post("/api/detect", files={"image": ("p.png", png_bytes(), "image/png")},
                       data={"threshold": "0.0", "attention": "true"}).json()
    assert body["detections"]
    for detection in body["detections"]:
        attention = torch.tensor(detection["attention"])  # (height, width) of the feature map, peak 1
        assert attention.dim() == 2 and abs(float(attention.max()) - 1.0) < 1e-3


@pytest.mark.parametrize("request_args, status", [
    ({"json": {"text": ""}}, 422),
    ({"json": {"text": "   "}}, 422),
    ({"json": {"text": "one " * 40}}, 413),  # 160 characters, over the limit of 100
    ({"json": {"text": "x" * 300_000}}, 413),  # over the body limit
    ({"content": b"one two", "headers": {"content-type": "text/plain"}}, 415),
    ({"data": {"text": "one two"}}, 415),
    ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 422),
    ({"json": {"text": 3}}, 422),
    ({"json": {"text": "one", "model": "nope"}}, 404),
])
def test_bad_translate_requests(client, request_args, status):
    response = client.post("/api/translate", **request_args)
    assert response.status_code == status, response.text
    assert isinstance(response.json()["error"], str) and response.json()["error"]
    assert client.post("/api/translate", json={"text": "one"}).status_code == 200  # still serving


def _big_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (400, 400)).save(buffer, format="PNG")  # small file, too many pixels
    return buffer.getvalue()


@pytest.mark.parametrize("files, status", [
    ({"image": ("broken.png", png_bytes()[:100], "image/png")}, 422),
    ({"image": ("noise.png", bytes(range(256)) * 8, "image/png")}, 422),
    ({"image": ("empty.png", b"", "image/png")}, 422),
    ({"image": ("notes.txt", b"hello", "text/plain")}, 415),
    ({"image": ("big.png", _big_png(), "image/png")}, 413),
    ({"image": ("huge.png", b"\x89PNG" + bytes(300_000), "image/png")}, 413),  # over the body limit
    ({"other": ("p.png", png_bytes(), "image/png")}, 422),
])
def test_bad_detect_requests(client, files, status):
    response = client.post("/api/detect", files=files)
    assert response.status_code == status, response.text
    assert response.json()["error"]
    ok = client.post("/api/detect", files={"image": ("p.png", png_bytes(), "image/png")})
    assert ok.status_code == 200  # still serving


def test_detect_refuses_a_json_body(client):
    response = client.post("/api/detect", json={"image": "abc"})
    assert response.status_code == 422 and response.json()["error"]


def test_chunked_oversized_body_is_refused(client):
    def chunks():
        for _ in range(30):
            yield b"x" * 10_000  # 300 kB without a Content-Length

    response = client.post("/api/translate", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413


def test_openapi_schema_and_models(client):
    schema = client.get("/openapi.json").json()
    assert {"/api/translate", "/api/detect", "/api/models"} <= set(schema["paths"])
    assert "multipart/form-data" in schema["paths"]["/api/detect"]["post"]["requestBody"]["content"]
    assert {m["kind"] for m in client.get("/api/models").json()} == {"translation", "detection"}
    page = client.get("/")
    assert page.status_code == 200 and "<canvas" in page.text


def test_concurrent_requests_give_the_same_answers(client):
    from concurrent.futures import ThreadPoolExecutor

    expected = client.post("/api/translate", json={"text": "seven eight", "attention": True}).json()
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: client.post("/api/translate", json={"text": "seven eight",
                                                                               "attention": True}).json(), range(8)))
    assert all(answer == expected for answer in answers)
