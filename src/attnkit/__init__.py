"""attnkit: attention models end to end (self-attention, multi-head attention, positional
encodings, the Transformer for translation, DETR for detection)."""

__version__ = "0.1.0"

from attnkit.detection.detector import Detector  # noqa: E402  (attnkit.Detector.from_run(RUN))
from attnkit.translation.translator import Translator  # noqa: E402  (attnkit.Translator.from_run(RUN))
