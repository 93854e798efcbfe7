"""Shared test setup."""

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tests use small tensors: one intra-op thread is faster than two, and far faster on shared
    cores (OpenMP threads wait on each other, 20-100x slowdowns measured)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
