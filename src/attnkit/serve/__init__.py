"""`attnkit serve`: the trained models behind a JSON HTTP API and a single web page."""

from attnkit.serve.app import create_app
from attnkit.serve.limits import Limits
from attnkit.serve.models import ServedModel, load_models

__all__ = ["Limits", "ServedModel", "create_app", "load_models"]
