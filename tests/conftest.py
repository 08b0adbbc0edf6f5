"""Fixtures several test files share (plain helpers are in ``tests/helpers.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """The tensors of these tests are tiny: a second thread only adds synchronisation (a lot on a busy machine).

    ``make unit`` already runs one thread per worker; this keeps a plain ``pytest tests/test_x.py`` as quick.
    A module that wants it everywhere says ``pytestmark = pytest.mark.usefixtures("one_thread")``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
