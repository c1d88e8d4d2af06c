"""The property tests write each generated example's files into a folder of its own (`tempfile.mkdtemp`:
hypothesis runs many examples per test, and a function-scoped `tmp_path` would be shared by all of them).
Those folders go under pytest's temporary folder, which pytest prunes to its last three runs, not into the
system's temporary folder, where every run left over a thousand behind."""

from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(autouse=True, scope="module")
def _examples_under_pytest_temporary_folder(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(tmp_path_factory.mktemp("examples")))
        yield
