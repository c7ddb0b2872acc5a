"""What a model's walk input takes, as its pipeline declares it (ServedModel.input_specs);
the conductor checks every client tensor against it before any of the request travels
(conductor/input_check.py).

    InputSpec("ids", 1)                      # token ids: any integer dtype, >= 0, [n]
    InputSpec("bytes", 1, max_bytes=64<<10)  # UTF-8 or file bytes: uint8 [n], at most 64 KiB
    InputSpec("float", 3)                    # floating [B, L, D] (values are the service's to check)
    InputSpec("int", 2)                      # an integer table [k, c]
"""
from __future__ import annotations

from dataclasses import dataclass

INTEGER_DTYPES = ("uint8", "int8", "int16", "int32", "int64")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
# kind -> (the dtypes it accepts, how a refusal says what it takes)
KINDS = {
    "ids": (INTEGER_DTYPES, "integers (uint8, int8, int16, int32 or int64), each >= 0"),
    "int": (INTEGER_DTYPES, "integers (an integer dtype)"),
    "bytes": (("uint8",), "bytes (uint8)"),
    "float": (FLOAT_DTYPES, "floating values (float32, float16 or bfloat16)"),
}


@dataclass(frozen=True)
class InputSpec:
    """kind: one of KINDS; rank: its number of dimensions; max_bytes: its own bound in
    bytes (0: only the conductor's max_input_bytes); what: a few words for refusals
    ("UTF-8 prompt")."""

    kind: str
    rank: int
    max_bytes: int = 0
    what: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"InputSpec.kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        for name in ("rank", "max_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"InputSpec.{name} must be an integer >= 0, got {value!r}")

    def describe(self) -> str:
        """What it takes, for refusals: "token ids: integers (...), each >= 0, 1 dimension"."""
        what = f"{self.what}: " if self.what else ""
        return f"{what}{KINDS[self.kind][1]}, {self.rank} dimension{'s' if self.rank != 1 else ''}"


TOKEN_IDS = InputSpec("ids", 1, what="token ids")
# A request's media parts as the walk inputs of a model with media walks (core.media_kinds).
MEDIA_SPECS = {"media": InputSpec("bytes", 1, what="every media part's file, concatenated"),
               "media_parts": InputSpec("int", 2, what="(kind code, byte length) per part")}


def specs_for(graph, specs: dict[str, InputSpec]) -> dict[str, InputSpec]:
    """The entries of `specs` whose names are inputs of `graph`'s walks (a pipeline whose
    graph varies, with or without its media walks, declares every input once)."""
    names = {name for walk in graph.walks for name in walk.input_names}
    return {name: spec for name, spec in specs.items() if name in names}
