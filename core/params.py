"""Typed request params: a frozen dataclass whose fields are declared with `param(...)`.

A request's params arrive as a dict (a protobuf Struct on the wire: every number is a
float, NaN and the infinities are the strings "NaN", "Infinity", "-Infinity"). Each field
is one key: its declaration (name, kind, default, range, help) is data, so the same
table validates a request, parses it into the dataclass and can be listed for clients.
Every bad value is InvalidArgument naming `params.<key>`.

    @dataclass(frozen=True)
    class ImageParams(RequestParams):
        steps: int = param(28, min=1, max=1000, help="denoising iterations")

    ImageParams.from_params({"steps": 4.0})       # ImageParams(steps=4)
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping

from core.errors import InvalidArgument

# How a Struct carries the non-finite floats (protobuf's JSON mapping).
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
KINDS = (int, float, bool, str, tuple)  # tuple: a list of non-negative integer ids
_SPEC = "starmesh.param"
_GROUP = "starmesh.param_group"


@dataclass(frozen=True)
class ParamSpec:
    """One request key. kind: int, float (always finite), bool, str, or tuple (a list of
    non-negative integer ids). default None makes the key optional (absent: None).
    min/max bound numbers inclusively; exclusive_min makes `min` a strict bound."""

    name: str
    kind: type
    default: Any
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False
    help: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgument(f"param {self.name}: kind must be one of {[k.__name__ for k in KINDS]}, "
                                  f"got {self.kind!r}")
        if (self.min is not None or self.max is not None) and self.kind not in (int, float):
            raise InvalidArgument(f"param {self.name}: only int and float params take a range")

    def check(self, value: Any) -> Any:
        """The value as its kind (a Struct's float 4.0 -> int 4, a list -> tuple), in range."""
        if value is None and self.default is None:
            return None
        value = _READERS[self.kind](self.name, value)
        if self.kind in (int, float):
            self._check_range(value)
        return value

    def _check_range(self, value: float) -> None:
        low_ok = self.min is None or (value > self.min if self.exclusive_min else value >= self.min)
        high_ok = self.max is None or value <= self.max
        if not (low_ok and high_ok):
            raise InvalidArgument(f"params.{self.name} must be {self.range_text()}, got {value!r}")

    def range_text(self) -> str:
        """The range in words: "in [1, 1000]", "in (0, 1]", ">= 0", "> 0" or "<= 8"."""
        low, high = _number(self.min), _number(self.max)
        if self.min is not None and self.max is not None:
            return f"in {'(' if self.exclusive_min else '['}{low}, {high}]"
        if self.min is not None:
            return f"{'>' if self.exclusive_min else '>='} {low}"
        return f"<= {high}" if self.max is not None else "any value"


def param(default: Any, *, kind: type | None = None, min: float | None = None, max: float | None = None,
          exclusive_min: bool = False, help: str = "") -> Any:
    """A dataclass field that is one request key (the field's name). kind defaults to the
    default's type; give it when the default is None (an optional key)."""
    if kind is None:
        kind = tuple if isinstance(default, (tuple, list)) else type(default)
    if isinstance(default, list):
        default = tuple(default)
    spec = ParamSpec("", kind, default, min, max, exclusive_min, help)  # named in specs()
    return dataclasses.field(default=default, metadata={_SPEC: spec})


def group(cls: type) -> Any:
    """A dataclass field holding another RequestParams class, read from the same keys
    (e.g. the thinker's and the talker's params of one speech request)."""
    return dataclasses.field(default_factory=cls, metadata={_GROUP: cls})


class RequestParams:
    """Base of a frozen dataclass of request params declared with `param` and `group`.

    __post_init__ checks (and normalises) every field, so a directly built instance is
    as valid as a parsed one; a subclass with cross-field rules extends it."""

    def __post_init__(self) -> None:
        for name, spec, group_cls in _fields_of(type(self)):
            if spec is not None:
                object.__setattr__(self, name, spec.check(getattr(self, name)))
            elif group_cls is not None and not isinstance(getattr(self, name), group_cls):
                raise InvalidArgument(f"{type(self).__name__}.{name} must be a {group_cls.__name__}")

    @classmethod
    def specs(cls) -> tuple[ParamSpec, ...]:
        """Every key this class reads, groups flattened, each name once (first wins)."""
        return _specs_of(cls)

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None, strict: bool = False):
        """Parses a request's params. Absent keys (or null values) take their default;
        strict: a key no field reads is InvalidArgument too (a pipeline's full set, where
        a typo must not pass silently; a service reads only its part of a request)."""
        params = params or {}
        if strict:
            check_known(params, (s.name for s in cls.specs()))
        values = {}
        for name, spec, group_cls in _fields_of(cls):
            if group_cls is not None:
                values[name] = group_cls.from_params(params)
            elif spec is not None and params.get(name) is not None:
                values[name] = params[name]
        return cls(**values)


# A params class's declarations are fixed once the class exists: read them once per class
# (every request parses its params through them, a few times over).
@functools.cache
def _fields_of(cls: type) -> tuple[tuple[str, ParamSpec | None, type | None], ...]:
    """(field name, its ParamSpec named after it or None, its group's class or None), in order."""
    out = []
    for f in dataclasses.fields(cls):
        spec = f.metadata.get(_SPEC)
        out.append((f.name, dataclasses.replace(spec, name=f.name) if spec is not None else None,
                    f.metadata.get(_GROUP)))
    return tuple(out)


@functools.cache
def _specs_of(cls: type) -> tuple[ParamSpec, ...]:
    out: dict[str, ParamSpec] = {}
    for name, spec, group_cls in _fields_of(cls):
        if spec is not None:
            out.setdefault(name, spec)
        elif group_cls is not None:
            for inner in group_cls.specs():
                out.setdefault(inner.name, inner)
    return tuple(out.values())


def check_known(params: Mapping[str, Any], names) -> None:
    """InvalidArgument naming the first key of `params` that is not in `names`."""
    known = set(names)
    for key in params:
        if key not in known:
            raise InvalidArgument(f"params.{key} is not a parameter of this model (it takes {sorted(known)})")


def _int(name: str, value: Any) -> int:
    # bool is an int subclass but never a count; a Struct sends 4 as 4.0. Every integer a
    # request carries ends in a 64-bit slot (a seed, a count): 1e30 is refused here.
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or value != int(value):
        raise InvalidArgument(f"params.{name} must be an integer, got {value!r}")
    if not INT64_MIN <= int(value) <= INT64_MAX:
        raise InvalidArgument(f"params.{name} must be a 64-bit integer, in [-2^63, 2^63 - 1], got {value!r}")
    return int(value)


def _float(name: str, value: Any) -> float:
    if isinstance(value, str) and value in NON_FINITE:
        value = NON_FINITE[value]
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"params.{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise InvalidArgument(f"params.{name} must be a finite number, got {value!r}")
    return float(value)


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"params.{name} must be true or false, got {value!r}")
    return value


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"params.{name} must be a string, got {value!r}")
    return value


def _ids(name: str, value: Any) -> tuple[int, ...]:
    bad = InvalidArgument(f"params.{name} must be a list of non-negative integer ids, got {value!r}")
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise bad
    ids = tuple(value)
    if any(isinstance(i, bool) or not isinstance(i, numbers.Real) or not math.isfinite(i) or i != int(i) or i < 0
           or i > INT64_MAX for i in ids):
        raise bad
    return tuple(int(i) for i in ids)


_READERS = {int: _int, float: _float, bool: _bool, str: _str, tuple: _ids}


def _number(x: float | None) -> str:
    return str(int(x)) if x is not None and float(x).is_integer() else str(x)
