"""`attnkit serve`: the trained models behind a JSON HTTP API and a single web page.

Its web packages are the optional extra `serve`: they are imported on first use of `create_app` (or of
`attnkit.app.serve.app`), so the rest of attnkit runs without them.
"""

from attnkit.app.serve.limits import Limits
from attnkit.app.serve.models import ServedModel, load_models

__all__ = ["Limits", "ServedModel", "create_app", "load_models"]


def __getattr__(name: str):
    if name == "create_app":
        from attnkit.app.serve.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
