"""Fixtures the summarisation tests share."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    # Tiny models gain nothing from a second thread, and on a busy machine two
    # spinning threads are 10-40x slower than one.
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
