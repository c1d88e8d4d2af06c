"""Where a command's progress and messages go: stderr, so that stdout carries results only.

`attnkit translate ... | sort` must see translations, not "exporting ..." or "preset: tiny". In a
torchrun job every process runs the same command; only rank 0 says anything (the others still
show their warnings and errors).
"""

from __future__ import annotations

import sys

from attnkit.training import distributed


def note(message: str) -> None:
    """Print MESSAGE on stderr (rank 0 only in a torchrun job)."""
    if distributed.is_main():
        print(message, file=sys.stderr, flush=True)
