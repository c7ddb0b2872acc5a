"""Host registration (CUDA) logic with a fake driver: page ranges are coalesced, the
budget is checked before anything is registered, a failure rolls everything back."""
from __future__ import annotations

import pytest
import torch

from engine.offload.registration import PAGE, HostRegistration, page_ranges


class FakeRegistrar:
    def __init__(self, fail_at: int | None = None, fail_unregister: bool = False):
        self.live: dict[int, int] = {}
        self.calls, self.fail_at, self.fail_unregister = 0, fail_at, fail_unregister

    def register(self, start: int, nbytes: int) -> bool:
        self.calls += 1
        if self.calls == self.fail_at:
            return False
        self.live[start] = nbytes
        return True

    def unregister(self, start: int) -> bool:
        if self.fail_unregister:
            return False
        return self.live.pop(start, None) is not None


def spans() -> list[torch.Tensor]:
    """Views of two separate buffers: two touching views of one, one view of the other."""
    a, b = torch.empty(8 * PAGE, dtype=torch.uint8), torch.empty(4 * PAGE, dtype=torch.uint8)
    return [a[10:PAGE + 10], a[PAGE + 10:3 * PAGE], b[5:PAGE]]


def test_page_ranges_are_aligned_and_coalesced():
    views = spans()
    ranges = page_ranges(views)
    assert all(s % PAGE == 0 and e % PAGE == 0 for s, e in ranges)
    assert len(ranges) == 2  # the two views of `a` merge
    for v in views:
        assert any(s <= v.data_ptr() and v.data_ptr() + v.numel() <= e for s, e in ranges)


def test_all_or_nothing_within_the_budget():
    views = spans()
    fake = FakeRegistrar()
    reg = HostRegistration(views, budget_bytes=1, registrar=fake)
    assert not reg.register() and fake.calls == 0  # over budget: nothing is touched
    reg = HostRegistration(views, budget_bytes=1 << 30, registrar=fake)
    assert reg.register() and len(fake.live) == 2
    reg.unregister()
    assert not fake.live
    fake = FakeRegistrar(fail_at=2)
    reg = HostRegistration(views, budget_bytes=1 << 30, registrar=fake)
    assert not reg.register() and not fake.live and reg.registered == []  # rolled back


def test_a_failed_rollback_aborts():
    fake = FakeRegistrar()
    reg = HostRegistration(spans(), budget_bytes=1 << 30, registrar=fake)
    assert reg.register()
    fake.fail_unregister = True
    with pytest.raises(RuntimeError, match="aborting"):
        reg.unregister()
