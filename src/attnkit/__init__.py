"""attnkit: attention models end to end (self-attention, multi-head attention, positional
encodings, the Transformer for translation, DETR for detection).

`import attnkit` is cheap: `attnkit.Detector` and `attnkit.Translator` are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from attnkit.detection.detector import Detector
    from attnkit.translation.translator import Translator

_LAZY = {"Detector": "attnkit.detection.detector", "Translator": "attnkit.translation.translator"}
__all__ = ["Detector", "Translator", "__version__"]


def __getattr__(name: str) -> Any:
    """attnkit.Detector.from_run(RUN), attnkit.Translator.from_run(RUN): imported when first asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")
