"""Where what is worked out once per dataset is kept: `.attnkit-cache/` beside the data, else a user cache folder.

A cache file belongs to one data file or folder (an annotation file, an image folder): it is
written into `.attnkit-cache/` in the folder that holds it, so that it goes where the data goes
and is shared by every run; when that folder cannot be written (read-only media, someone else's
files), into `$XDG_CACHE_HOME/attnkit/detection/` (`~/.cache/...`), named after the data's full
path; when `$ATTNKIT_DATA_CACHE` is set, into its `detection/` only. There is one file per data
file and kind, replaced when stale, so the cache does not grow run by run. A write is atomic (a
temporary file, then `os.replace`): a run that stops halfway, or two that write at once, leave
the old file or a whole new one. A cache that cannot be read or written is worked out again,
never an error: the cache only saves time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

FOLDER = ".attnkit-cache"
ENVIRONMENT = "ATTNKIT_DATA_CACHE"  # a folder for every dataset's cache instead (as translation's prepared corpora)


def cache_files(of: Path, kind: str) -> list[Path]:
    """Where the cache of kind KIND (a file suffix) of the file or folder OF may be: beside it, then the user's
    (or $ATTNKIT_DATA_CACHE's)."""
    of = Path(of).absolute()
    named = f"{hashlib.sha256(str(of).encode('utf-8')).hexdigest()[:16]}-{of.name}{kind}"  # by the full path
    if os.environ.get(ENVIRONMENT):
        return [Path(os.environ[ENVIRONMENT]) / "detection" / named]
    return [of.parent / FOLDER / f"{of.name}{kind}", user_cache() / named]


def user_cache() -> Path:
    """$XDG_CACHE_HOME/attnkit/detection (default ~/.cache/attnkit/detection)."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "attnkit" / "detection"


def write_cache(candidates: list[Path], write: Callable[[IO[bytes]], None]) -> Path | None:
    """WRITE the cache into the first of CANDIDATES that can be written (atomically); where it went, or None.

    A candidate's stale copy further down the list is left: it is checked, found stale and ignored.
    """
    for path in candidates:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        except OSError:
            continue
        try:
            with os.fdopen(handle, "wb") as file:
                write(file)
            os.chmod(temporary, 0o644)  # mkstemp's 0o600 would keep the cache from the data's other users
            os.replace(temporary, path)
            return path
        except OSError:
            Path(temporary).unlink(missing_ok=True)
    return None


def stamp(path: Path) -> dict[str, int | str]:
    """What says whether PATH changed: its full name, size and modification time (ns); OSError if it is not there."""
    status = Path(path).stat()
    return {"path": str(Path(path).absolute()), "size": status.st_size, "mtime_ns": status.st_mtime_ns}
