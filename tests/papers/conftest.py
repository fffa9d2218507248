"""Fixtures of the papers' tests."""
import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The papers' tests use tiny tensors: one thread is fastest (and what the workflow's jobs use, one
    per rule thread); on a shared machine it is many times faster than two. Restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
