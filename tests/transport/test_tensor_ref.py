"""TensorRef's construction checks: negative dims, rank, stride overflow, byte count."""
from __future__ import annotations

import pytest

from core.errors import BadTensorRef
from transport.refs import MAX_RANK, InlineLocation, TensorRef

pytestmark = pytest.mark.timeout(30)


def test_a_shape_past_the_rank_is_refused_by_rank_however_large_its_dims():
    hostile = (1 << 62,) * 200_000  # multiplied out, a 12-million-bit integer
    with pytest.raises(BadTensorRef, match=f"more than {MAX_RANK} dimensions"):
        TensorRef("uint8", hostile, InlineLocation(b""))


@pytest.mark.parametrize("shape, match", [((2, -1), "negative dimension"), ((0, 1 << 40, 1 << 40), "2\\^62"),
                                          ((1,) * (MAX_RANK + 1), "dimensions"), ((3,), "need 3")])
def test_shapes_that_are_no_tensors_or_do_not_match_the_bytes_are_refused(shape, match):
    with pytest.raises(BadTensorRef, match=match):
        TensorRef("uint8", shape, InlineLocation(b"ab"))


def test_a_matching_ref_is_accepted():
    ref = TensorRef("float32", (2, 0, 3), InlineLocation(b""))
    assert ref.numel == 0 and ref.nbytes == 0
    assert TensorRef("int16", (1,) * MAX_RANK, InlineLocation(b"xy")).nbytes == 2
