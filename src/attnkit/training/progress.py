"""What a long job shows while it runs: steps, loss, learning rate, throughput and time left.

On a terminal this is a tqdm bar whose postfix is refreshed at every log interval; when stderr is
not a terminal (a log file, a batch job) it is one plain line per log interval instead.
"""

from __future__ import annotations

import math
import sys
from typing import TextIO

from tqdm import tqdm


def format_duration(seconds: float | None) -> str:
    """3725 -> '1:02:05'; None or infinite -> '?'."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class Progress:
    """A progress display for a training loop (`enabled=False` shows nothing)."""

    def __init__(self, total_steps: int | None, initial_step: int, items_name: str = "items",
                 enabled: bool = True, stream: TextIO | None = None) -> None:
        self.items_name = items_name
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.interactive = enabled and self.stream.isatty()
        self._bar = tqdm(total=total_steps, initial=initial_step, unit="step", dynamic_ncols=True,
                         file=self.stream, disable=not self.interactive, leave=True)

    @property
    def total(self) -> int | None:
        return self._bar.total

    def set_total(self, total_steps: int) -> None:
        """Set the number of steps once it is known (an epoch budget, after the first epoch's length)."""
        self._bar.total = total_steps
        self._bar.refresh()

    def advance(self, steps: int = 1) -> None:
        self._bar.update(steps)

    def report(self, step: int, loss: float, lr: float, items_per_s: float, eta_s: float | None) -> None:
        """Show the latest training statistics (called every log interval)."""
        fields = {"loss": f"{loss:.4g}", "lr": f"{lr:.3g}",
                  f"{self.items_name}/s": f"{items_per_s:,.0f}", "eta": format_duration(eta_s)}
        if self.interactive:
            self._bar.set_postfix(fields, refresh=True)
        elif self.enabled:
            total = f"/{self._bar.total}" if self._bar.total else ""
            print(f"step {step}{total}  " + "  ".join(f"{key} {value}" for key, value in fields.items()),
                  file=self.stream, flush=True)

    def write(self, message: str) -> None:
        """A line of text that does not break the bar (validation results, checkpoints)."""
        if self.interactive:
            self._bar.write(message, file=self.stream)
        elif self.enabled:
            print(message, file=self.stream, flush=True)

    def warn(self, message: str) -> None:
        """A warning, shown even when the progress display is off."""
        if self.interactive:
            self._bar.write(f"warning: {message}", file=self.stream)
        else:
            print(f"warning: {message}", file=self.stream, flush=True)

    def close(self) -> None:
        self._bar.close()


def estimate_eta(remaining: list[float | None]) -> float | None:
    """Seconds left: the soonest of the budgets' estimates (steps, epochs, minutes) that are known."""
    known = [seconds for seconds in remaining if seconds is not None and math.isfinite(seconds)]
    return max(0.0, min(known)) if known else None
