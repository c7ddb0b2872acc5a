"""evolve: the same instance `dataclasses.replace` makes, minus the re-validation."""
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.evolve import evolve
from runtime.items import ChunkInfo, OpenNode, PushChunk


@given(st.lists(st.integers(0, 50), max_size=4), st.integers(0, 9), st.booleans())
def test_evolve_equals_replace_and_leaves_the_original_alone(iteration, start, is_last):
    template = OpenNode("r", "mid", walk="w", params={"a": 1}, credits={"y": 4})
    changes = {"iteration": tuple(iteration), "inputs": {}, "chunk": ChunkInfo(start, 0, is_last)}
    evolved = evolve(template, **changes)
    assert evolved == replace(template, **changes) and type(evolved) is OpenNode
    assert template.iteration == () and template.chunk is None
    with pytest.raises(AttributeError):  # still frozen
        evolved.node = "other"


def test_an_unknown_field_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="no field.*tensor'"):
        evolve(PushChunk("r", "n", "x"), tensor={})


def test_evolve_skips_the_checks_it_is_documented_to_skip():
    # the contract: callers change only fields no check covers; a request_id is covered
    assert evolve(OpenNode("r", "n"), request_id="").request_id == ""
    with pytest.raises(ValueError):
        replace(OpenNode("r", "n"), request_id="")
