import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """One intra-op thread per test process: `make test` runs two processes on two cores, and OpenMP threads
    beyond the free cores spin-wait on each other, inflating every timing 10x or more."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
