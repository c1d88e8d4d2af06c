"""`--set KEY=VALUE`: the one parser of config overrides, and the one rule for what a resumed run refuses.

Every task's config is a frozen dataclass saved as a JSON document (config.json). An override
names a leaf of that document by its dotted path (`train.lr`, `model.num_queries`, `grad_clip`)
and gives a value read as JSON where it parses (`3`, `1e-4`, `true`, `[480, 512]`), `none` or
`null` for None, and the raw string otherwise. The document is rebuilt into the config, whose
own validation then speaks; a key the document lacks is refused with the keys it has.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from attnkit.errors import ConfigError, refuse_changes

Config = TypeVar("Config")


def parse_value(raw: str) -> Any:
    """The value of `KEY=RAW`: JSON where it parses (true/false in any case), None for none/null, else RAW."""
    lowered = raw.strip().lower()
    if lowered in ("none", "null"):
        return None
    try:
        return json.loads(lowered if lowered in ("true", "false") else raw)
    except json.JSONDecodeError:
        return raw


def leaf_keys(document: Mapping[str, Any], sections: Sequence[str] | None = None) -> list[str]:
    """The dotted keys `--set` may name: the document's non-dict leaves (under SECTIONS only, if given)."""
    keys = []
    for name, value in document.items():
        if sections is not None and name not in sections:
            continue
        if isinstance(value, Mapping):
            keys += [f"{name}.{key}" for key in leaf_keys(value)]
        else:
            keys.append(name)
    return keys


def apply_overrides(document: Mapping[str, Any], assignments: Iterable[str],
                    sections: Sequence[str] | None = None) -> dict[str, Any]:
    """A copy of DOCUMENT with each `KEY=VALUE` of ASSIGNMENTS applied; ConfigError for a malformed or unknown KEY."""
    values = copy.deepcopy(dict(document))
    known = leaf_keys(values, sections)
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set: expected KEY=VALUE, got '{assignment}'")
        if key not in known:
            raise ConfigError(f"--set: unknown config key '{key}' (known: {', '.join(known)})")
        *path, name = key.split(".")
        target = values
        for part in path:
            target = target[part]
        target[name] = parse_value(raw)
    return values


def override(config: Config, assignments: Sequence[str], from_dict: Callable[[dict[str, Any]], Config],
             sections: Sequence[str] | None = None) -> Config:
    """CONFIG with ASSIGNMENTS applied, rebuilt by FROM_DICT (so the config validates the new values)."""
    values = apply_overrides(config.to_dict(), assignments, sections)  # type: ignore[attr-defined]
    try:
        return from_dict(values)
    except (TypeError, ValueError) as error:  # ConfigError is a ValueError; TypeError: a value of the wrong type
        raise ConfigError(f"--set {' '.join(assignments)}: {error}") from None


def check_kept(config: Config, assignments: Sequence[str], overridden: Callable[[Config, list[str]], Config]) -> None:
    """ConfigError if ASSIGNMENTS give a key another value than CONFIG (a resumed run's config.json) has:
    a resumed run keeps its config, and an option it would ignore is refused rather than dropped."""
    keys = [assignment.partition("=")[0] for assignment in assignments]
    refuse_changes(config.to_dict(), overridden(config, list(assignments)).to_dict(), keys)  # type: ignore[attr-defined]
