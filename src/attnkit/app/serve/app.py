"""`attnkit serve`: a JSON HTTP API (FastAPI; its OpenAPI schema at /openapi.json) and a single page.

    GET  /                 the page: type a sentence, see its translation and alignment map; drop an
                           image, see boxes, labels, scores and each object's attention
    GET  /api/models       the models served, by name and kind
    GET  /api/batches      how many batches ran and how many requests they held (batcher.py)
    POST /api/translate    {"text", "model"?, "beam_size"?, "attention"?} -> translation (+ alignment)
    POST /api/detect       multipart: image file, threshold?, attention?, model? -> detections (+ attention)

Every error is JSON, {"error": "..."} with a 4xx status for what the client sent (413 too large,
415 wrong content type, 422 unreadable or empty, 404 unknown model); the server keeps serving.
Concurrent requests to one model are batched: those arriving within a few milliseconds run as one
call on the one inference thread (batcher.py); a request that fails is answered alone.
Uploaded images are read from memory (python-multipart spools large ones to the system's
temporary folder), decoded with a pixel bound checked from the header, and never written anywhere.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from fastapi import FastAPI, File, Form, HTTPException, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from PIL import Image, UnidentifiedImageError
from pydantic import BaseModel, Field

from attnkit.app.serve import models as served_models
from attnkit.app.serve.batcher import Batcher
from attnkit.app.serve.body_limit import BodyLimitMiddleware
from attnkit.app.serve.limits import Limits

STATIC = Path(__file__).parent / "static"


class TranslateRequest(BaseModel):
    text: str = Field(description="One sentence in the source language.")
    model: str | None = Field(None, description="A served translation model's name (default: the first).")
    beam_size: int | None = Field(None, ge=1, le=16, description="Beam size; 1 is greedy (default: the run's).")
    attention: bool = Field(False, description="Also return the tokens and the alignment map.")


class TranslateResponse(BaseModel):
    model: str
    translation: str
    source_tokens: list[str] | None = None
    target_tokens: list[str] | None = None
    alignment: list[list[float]] | None = Field(None, description="(target tokens, source tokens), rows sum to 1.")


class Detection(BaseModel):
    box: list[float] = Field(description="x0, y0, x1, y1 in pixels of the uploaded image.")
    score: float
    label: int
    name: str
    attention: list[list[float]] | None = Field(None, description="Decoder attention over the feature map, peak 1.")


class DetectResponse(BaseModel):
    model: str
    width: int
    height: int
    detections: list[Detection]


class ErrorResponse(BaseModel):
    error: str


ERRORS: dict[int | str, dict[str, Any]] = {status: {"model": ErrorResponse} for status in (404, 413, 415, 422)}


class BatchesResponse(BaseModel):
    batches: int
    requests: int
    largest: int
    sizes: dict[int, int] = Field(description="batch size -> how many batches had it")


def create_app(models: dict[str, served_models.ServedModel], limits: Limits = Limits(),
               batcher: Batcher | None = None) -> FastAPI:
    """The app serving MODELS; BATCHER (default: up to 8 requests within 5 ms) groups concurrent requests."""
    batcher = batcher or Batcher()
    app = FastAPI(title="attnkit", version="0.1.0", description="Translation and detection with attention maps.")
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)
    _error_handlers(app)

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/api/models")
    def list_models() -> list[dict[str, str]]:
        return [{"name": m.name, "kind": m.kind} for m in models.values()]

    @app.get("/api/batches", response_model=BatchesResponse)
    def batches() -> dict:
        stats = batcher.stats
        return {"batches": stats.batches, "requests": stats.requests, "largest": stats.largest,
                "sizes": dict(sorted(stats.sizes.items()))}

    @app.post("/api/translate", response_model=TranslateResponse, response_model_exclude_none=True, responses=ERRORS)
    async def translate(request: Request, body: TranslateRequest) -> dict:
        _require_json(request)
        text = body.text.strip()
        if not text:
            raise HTTPException(422, "text is empty")
        if len(text) > limits.max_text_chars:
            raise HTTPException(413, f"text has {len(text)} characters; the limit is {limits.max_text_chars}")
        served = _model(models, body.model, "translation")
        return await batcher.submit((served.name, body.beam_size), (text, body.attention),
                                    lambda batch: served_models.translate(served, batch, body.beam_size))

    @app.post("/api/detect", response_model=DetectResponse, response_model_exclude_none=True, responses=ERRORS)
    async def detect(image: UploadFile = File(description="An image file (PNG, JPEG, ...)."),
                     threshold: float = Form(0.5, ge=0.0, le=1.0), attention: bool = Form(False),
                     model: str | None = Form(None)) -> dict:
        served = _model(models, model, "detection")
        picture = _read_image(await image.read(), image.content_type, limits.max_pixels)
        return await batcher.submit((served.name,), (picture, threshold, attention),
                                    lambda batch: served_models.detect(served, batch, limits.max_threshold_queries))

    return app


def _model(models: dict, name: str | None, kind: str) -> served_models.ServedModel:
    if name is None:
        found = next((m for m in models.values() if m.kind == kind), None)
        if found is None:
            raise HTTPException(404, f"no {kind} model is served")
        return found
    if name not in models or models[name].kind != kind:
        known = [m.name for m in models.values() if m.kind == kind]
        raise HTTPException(404, f"no {kind} model named {name!r} (served: {', '.join(known) or 'none'})")
    return models[name]


def _require_json(request: Request) -> None:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise HTTPException(415, f"send JSON (Content-Type: application/json), not {kind or 'no content type'}")


def _read_image(data: bytes, content_type: str | None, max_pixels: int) -> Image.Image:
    """The upload as an RGB image; 415 if it is not declared an image, 422 if it does not decode, 413 if too big."""
    if content_type and not content_type.lower().startswith(("image/", "application/octet-stream")):
        raise HTTPException(415, f"the upload is {content_type}, not an image")
    if not data:
        raise HTTPException(422, "the uploaded image is empty")
    try:
        picture = Image.open(io.BytesIO(data))
        if picture.width * picture.height > max_pixels:
            raise HTTPException(413, f"image of {picture.width}x{picture.height} pixels; the limit is {max_pixels}")
        picture.load()
        return picture.convert("RGB")
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        raise HTTPException(422, f"not a readable image ({type(error).__name__})") from None


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        if request.url.path == "/api/translate":  # a body that is not JSON fails validation first
            try:
                _require_json(request)
            except HTTPException as wrong_type:
                return JSONResponse({"error": str(wrong_type.detail)}, status_code=415)
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in error.errors())
        return JSONResponse({"error": problems or "invalid request"}, status_code=422)

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"error": f"internal error: {type(error).__name__}"}, status_code=500)
