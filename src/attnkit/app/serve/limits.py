"""What `attnkit serve` accepts: request size, image pixels, text length."""

from __future__ import annotations

from dataclasses import dataclass

from attnkit.errors import ConfigError


@dataclass(frozen=True)
class Limits:
    """Bounds on one request; anything larger gets a 413 JSON error before the model sees it."""

    max_body_bytes: int = 8 * 1024 * 1024  # the whole HTTP request body
    max_pixels: int = 4096 * 4096  # width * height of an uploaded image, read from its header before decoding
    max_text_chars: int = 2000  # one sentence to translate
    max_threshold_queries: int = 100  # at most this many detections returned

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_pixels", "max_text_chars", "max_threshold_queries"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
