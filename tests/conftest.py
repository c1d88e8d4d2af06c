"""Shared test setup.

One intra-op thread: the tests use tiny tensors, where torch's thread pool costs more than it
saves, and on a busy machine its threads wait on each other (the suite ran about 4x slower).
"""

import torch

torch.set_num_threads(1)
