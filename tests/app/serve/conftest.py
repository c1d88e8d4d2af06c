"""The app serving the tiny runs of tests/conftest.py."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def served(translation_run, detection_run):
    from attnkit.app.serve import load_models

    torch.set_num_threads(1)
    return load_models([translation_run, detection_run])
