"""The project's error types and how the command line reports them.

A `UserError` is something the user can fix (a missing file, a malformed JSON line, an unknown
option value, a checkpoint from another model). The CLI prints it as one line, `error: ...`, on
stderr and exits with code 2, without a traceback. Programming errors stay exceptions.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

USER_ERROR_EXIT_CODE = 2


class UserError(Exception):
    """Bad input from the user: the message says what is wrong and where."""


class ConfigError(UserError, ValueError):
    """An invalid configuration value (also a ValueError for library callers)."""


def refuse_changes(saved: Mapping[str, Any], asked: Mapping[str, Any], keys: Iterable[str]) -> None:
    """ConfigError naming each KEY (dotted: `train.lr` reads `saved["train"]["lr"]`) whose ASKED value differs
    from the SAVED one, a resumed run's config.json: a resumed run keeps its config, and an option it would
    ignore is refused rather than dropped."""
    def value(values: Mapping[str, Any], key: str) -> Any:
        for part in key.split("."):
            values = values[part]
        return values

    changed = [f"{key} {value(saved, key)!r} (asked: {value(asked, key)!r})" for key in dict.fromkeys(keys)
               if value(asked, key) != value(saved, key)]
    if changed:
        raise ConfigError(f"--resume continues with the run's config.json, which has {', '.join(changed)}; "
                          "resume without that option, or start a new run (another --out) to change it")


class DataError(UserError, ValueError):
    """A data file that cannot be read as promised: names the file and the entry."""


class CheckpointError(UserError):
    """A run folder or weights file that is missing, corrupt, or from another model."""


def require_extra(extra: str, modules: Iterable[str], needed_by: str) -> None:
    """ConfigError naming the missing MODULES of the optional EXTRA (pyproject's optional-dependencies) that
    NEEDED_BY (a command or option) uses, and the pip command that installs them."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{needed_by} needs {', '.join(missing)}, of the optional extra `{extra}`: "
                          f"pip install 'attnkit[{extra}]'")


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a UserError (and a few OS errors about user paths) into `error: ...` and exit code 2."""
    try:
        yield
    except UserError as error:
        _fail(str(error))
    except FileNotFoundError as error:
        _fail(f"file not found: {error.filename or error}")
    except IsADirectoryError as error:
        _fail(f"expected a file but found a folder: {error.filename or error}")
    except PermissionError as error:
        _fail(f"permission denied: {error.filename or error}")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(USER_ERROR_EXIT_CODE) from None
