"""One intra-op thread per test: on a shared 2-core machine, torch's default of one thread per core
makes small models many times slower when other processes compete for the cores."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
