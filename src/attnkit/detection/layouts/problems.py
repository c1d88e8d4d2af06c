"""What a dataset reader finds wrong, named by file and line: raised at once when training, all listed by `data check`.

A reader reports through one `Problems` object. Errors are what would stop the reading (a
malformed line, a class id out of range, a missing image): with `raise_errors` (training) the
first one is a `DataError`; otherwise (`attnkit data check`, `--skip-bad-images`) every one is
listed and the bad line or file is left out. Warnings are what the data can be trained on but
probably does not mean (a box clamped to the image, an empty box, x1 y1 x2 y2 written where x y w h
belong); notes are worth knowing (an image without a label file: a background image).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from attnkit.errors import DataError

Severity = Literal["error", "warning", "note"]


Place = tuple[str, int | None]  # (file, line counted from 1, or None for the whole file)


@dataclass(frozen=True)
class Problem:
    """One finding: how bad, where (file and line; no file: the message names its place itself), what."""
    severity: Severity
    file: str
    line: int | None
    message: str

    @property
    def where(self) -> str:
        return where(self.file, self.line)

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.file else self.message


def where(path: Path | str, line: int | None = None) -> str:
    """"path:line" (line counted from 1), or "path" for a problem of the whole file: as messages write it."""
    return f"{path}:{line}" if line is not None else str(path)


def at(path: Path | str, line: int | None = None) -> Place:
    """The place of a problem: PATH, and the LINE (from 1) when it is one line's."""
    return str(path), line


@dataclass
class Problems:
    """The findings of one reading; with raise_errors, `error` raises the DataError instead of listing it."""
    raise_errors: bool = True
    found: list[Problem] = field(default_factory=list)

    def error(self, place: Place | str, message: str) -> None:
        problem = _problem("error", place, message)
        if self.raise_errors:
            raise DataError(str(problem))
        self.found.append(problem)

    def warning(self, place: Place | str, message: str) -> None:
        self.found.append(_problem("warning", place, message))

    def note(self, place: Place | str, message: str) -> None:
        self.found.append(_problem("note", place, message))

    def of(self, severity: Severity) -> list[Problem]:
        return [problem for problem in self.found if problem.severity == severity]


def _problem(severity: Severity, place: Place | str, message: str) -> Problem:
    file, line = (place, None) if isinstance(place, str) else place
    return Problem(severity, file, line, message)
