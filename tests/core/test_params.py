"""core.params: declared request keys parse a Struct's values (floats for every number,
strings for NaN and the infinities) into typed fields, and every bad value is
InvalidArgument naming its key."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from core.errors import InvalidArgument
from core.params import ParamSpec, RequestParams, check_known, group, param


@dataclass(frozen=True)
class Inner(RequestParams):
    steps: int = param(4, min=1, max=10, help="iterations")
    seed: int | None = param(None, kind=int)


@dataclass(frozen=True)
class Outer(RequestParams):
    inner: Inner = group(Inner)
    scale: float = param(1.0, min=0, max=1, exclusive_min=True)
    name: str = param("a")
    flag: bool = param(False)
    ids: tuple[int, ...] = param(())


def test_struct_values_become_typed_fields():
    p = Outer.from_params({"steps": 7.0, "seed": -3.0, "scale": 0.5, "name": "b", "flag": True, "ids": [1.0, 2.0]})
    assert p == Outer(Inner(7, -3), 0.5, "b", True, (1, 2))
    assert type(p.inner.steps) is int and type(p.ids[0]) is int
    assert Outer.from_params({}) == Outer() and Outer.from_params(None) == Outer()
    assert Outer.from_params({"steps": None, "seed": None}).inner == Inner()  # a Struct null: the default


@pytest.mark.parametrize("params, words", [
    ({"steps": 2.5}, "params.steps must be an integer, got 2.5"),
    ({"steps": True}, "params.steps must be an integer, got True"),
    ({"steps": "x"}, "params.steps must be an integer, got 'x'"),
    ({"steps": math.inf}, "params.steps must be an integer"),
    ({"steps": 0}, "params.steps must be in [1, 10], got 0"),
    ({"steps": 11}, "params.steps must be in [1, 10], got 11"),
    ({"scale": 0}, "params.scale must be in (0, 1], got 0.0"),
    ({"scale": "NaN"}, "params.scale must be a finite number, got nan"),
    ({"scale": "Infinity"}, "params.scale must be a finite number, got inf"),
    ({"scale": math.nan}, "params.scale must be a finite number"),
    ({"scale": "0.5"}, "params.scale must be a number, got '0.5'"),
    ({"name": 3}, "params.name must be a string, got 3"),
    ({"flag": 1}, "params.flag must be true or false, got 1"),
    ({"ids": [1, -2]}, "params.ids must be a list of non-negative integer ids"),
    ({"ids": "12"}, "params.ids must be a list of non-negative integer ids"),
    ({"ids": [0.5]}, "params.ids must be a list of non-negative integer ids"),
])
def test_every_bad_value_names_its_key(params, words):
    with pytest.raises(InvalidArgument) as e:
        Outer.from_params(params)
    assert words in str(e.value)


def test_a_directly_built_instance_is_checked_too():
    with pytest.raises(InvalidArgument, match=r"params\.steps must be in \[1, 10\]"):
        Inner(steps=0)
    assert Inner(steps=3.0).steps == 3


def test_strict_parsing_rejects_unknown_keys():
    assert Outer.from_params({"stpes": 3}).inner.steps == 4  # a service reads only its keys
    with pytest.raises(InvalidArgument, match=r"params\.stpes is not a parameter of this model"):
        Outer.from_params({"stpes": 3}, strict=True)
    with pytest.raises(InvalidArgument, match=r"params\.x is not"):
        check_known({"a": 1, "x": 2}, ["a"])


def test_specs_are_declarative_and_flatten_groups():
    specs = {s.name: s for s in Outer.specs()}
    assert list(specs) == ["steps", "seed", "scale", "name", "flag", "ids"]
    assert specs["steps"] == ParamSpec("steps", int, 4, 1, 10, help="iterations")
    assert specs["seed"].kind is int and specs["seed"].default is None
    assert specs["scale"].range_text() == "in (0, 1]" and specs["ids"].kind is tuple


def test_a_bad_declaration_fails_at_import():
    with pytest.raises(InvalidArgument, match="only int and float params take a range"):
        param("x", min=1)
    with pytest.raises(InvalidArgument, match="kind must be one of"):
        param(None)
