"""Ctrl-C during training: the first press asks the loop to stop after the step under way, the second aborts."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from attnkit.training.messages import note


@contextlib.contextmanager
def ctrl_c_as_flag() -> Iterator[threading.Event]:
    """The first Ctrl-C sets the flag (the loop stops at the end of the step); a second aborts at once."""
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def handler(signum: int, frame: Any) -> None:
        if pressed.is_set():
            raise KeyboardInterrupt
        pressed.set()
        note("\nCtrl-C: stopping after this step and saving the training state (again to abort)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, previous)
