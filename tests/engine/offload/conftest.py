"""One torch intra-op thread for these tests (as every starmesh service runs): with two
threads on two busy cores, OpenMP spin-waits cost seconds per tiny forward. The
previous count is restored after each module."""
import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
