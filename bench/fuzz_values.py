"""The values of hostile messages, as hypothesis strategies (bench.fuzz_hostile builds
the messages): NaN, infinities, integers past 64 bits, wrong types, unknown names,
request params with hostile keys and values, tensor references whose shapes overflow or
lie about their bytes, over-limit tensors, huge id lists.

Strategies are built once, here (building one per draw costs hypothesis more than the
draw). Values that make a valid request expensive (max_new_tokens, steps, width, ...)
are either invalid or small (COSTLY): a legitimately valid message costs the mesh one
prefill or a small image.
"""
from __future__ import annotations

import math

from hypothesis import strategies as st

HUGE_TEXT = "x" * 100_000
BAD_FLOATS = (math.nan, math.inf, -math.inf, 1e30, -1e30, 1e308, -1.0, 2.0 ** 63, 2.0 ** 64)
NAMES = ("prompt", "input_ids", "latent", "prompt_embeds", "x", "", "bogus", "a/../../b", "\x00", "x" * 300)
NODES = ("prefill", "decode", "talker", "code2wav", "clip_l", "t5", "denoise_cond", "init_latent", "bogus", "")
# The typed params of every model bench.fuzz_mesh serves: every key they read is fuzzed.
PARAM_CLASSES = ("engine.sampling_params:TextParams", "pipelines.qwen3_omni.params:SpeechParams",
                 "engine.models.sd3.params:ImageParams", "pipelines.orpheus.params:OrpheusParams",
                 "engine.models.vjepa2_ac.params:WorldParams")


def model_param_keys() -> tuple[str, ...]:
    """Every key of PARAM_CLASSES, in a fixed order (the same examples for the same seed)."""
    import importlib

    keys: dict[str, None] = {}
    for path in PARAM_CLASSES:
        module, name = path.split(":")
        keys.update((spec.name, None) for spec in getattr(importlib.import_module(module), name).specs())
    return tuple(keys)


PARAM_KEYS = model_param_keys() + ("bogus", "", "x" * 300)
# Keys whose large valid values cost real work: only invalid or small values are sent.
COSTLY = {"max_new_tokens", "max_frames", "min_frames", "steps", "width", "height", "max_sequence_length",
          "first_chunk", "horizon", "num_candidates", "num_iterations", "num_elites"}
SMALL_VALID = {"width": 64, "height": 64, "steps": 1, "max_sequence_length": 8, "horizon": 1, "num_candidates": 4,
               "num_iterations": 1, "num_elites": 2}
DIMS = (0, 1, 2, 3, 8, 64, -1, 1 << 31, 1 << 62, (1 << 63) - 1)
ID_VALUES = (0, 1, 10, 255, 256, 1 << 15, (1 << 31) - 1, 1 << 31, (1 << 63) - 1, -1, -(1 << 63))
DTYPE_VALUES = tuple(range(0, 12)) + (-1, 1 << 20)  # the enum's values and some it does not have
ELEMENT_SIZES = {1: 4, 2: 2, 3: 2, 4: 8, 5: 4, 6: 2, 7: 1, 8: 1, 9: 1}
MAX_INLINE = 64 << 10  # a consistent inline tensor is built only up to this size
OVER_LIMIT_BYTES, OVER_LIMIT_PERCENT = 17 << 20, 3  # how big, and how often, a tensor past the limit is

S_NAME, S_NODE, S_ID = st.sampled_from(NAMES), st.sampled_from(NODES), st.sampled_from(ID_VALUES)
S_DTYPE, S_WIRE_DTYPE, S_DIM = st.sampled_from(DTYPE_VALUES), st.sampled_from((1, 5, 8)), st.sampled_from(DIMS)
S_RANK = st.sampled_from((0, 1, 1, 2, 3, 9, 70))
S_WHERE = st.sampled_from(("inline", "inline", "inline", "shm", "mooncake", "none"))
S_ARENA = st.sampled_from(("", "starmesh-nope", "../../etc/passwd", "/dev/shm/x"))
S_U64 = st.sampled_from((0, 1, 1 << 40, (1 << 64) - 1))
S_SESSION = st.sampled_from(("", "127.0.0.1:1", "nope"))
S_U32 = st.sampled_from((0, 1, 2, 7, (1 << 32) - 1))
S_COUNT = st.sampled_from((0, 1, 1, 2, 3, 20))
S_PERCENT = st.integers(0, 99)
S_STRING = st.one_of(st.text(max_size=12), st.sampled_from(("", HUGE_TEXT, "\n", "a\x00b", "\U0001f4a5" * 50)))
S_SHORT = st.text(max_size=12)
S_PORT = st.sampled_from(("token", "codes", "", "bogus"))
S_PARAM_KEY = st.sampled_from(PARAM_KEYS)
S_PARAM_KEYS = st.lists(S_PARAM_KEY, max_size=5, unique=True)
S_CONSISTENT = st.sampled_from((True, True, False))
S_BYTES = {**{n: st.binary(min_size=n, max_size=n) for n in range(65)}, -1: st.binary(max_size=64)}
S_IDS_SIZE = st.sampled_from(("none",) * 6 + ("small",) * 13 + ("huge",))
S_IDS = st.lists(st.one_of(st.integers(0, 300), S_ID), min_size=1, max_size=24)


def hostile_number():
    return st.one_of(st.sampled_from(BAD_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
                     st.integers(-(1 << 70), 1 << 70).map(float))


def hostile_value(key: str = ""):
    scalars = st.one_of(hostile_number(), st.booleans(), st.none(),
                        st.sampled_from(("NaN", "Infinity", "-Infinity", "", "ethan", "4", HUGE_TEXT)))
    if key in COSTLY:
        small = st.just(float(SMALL_VALID.get(key, 2)))
        return st.one_of(small, st.sampled_from((math.nan, math.inf, -1.0, 0.0, 1e30, 2.5, 63.0, 65.0)),
                         st.booleans(), st.just("2"), st.none())
    lists = st.lists(st.one_of(hostile_number(), st.sampled_from(ID_VALUES).map(float), st.text(max_size=3)),
                     max_size=6)
    nested = st.dictionaries(st.text(max_size=4), scalars, max_size=3)
    return st.one_of(scalars, lists, nested)


S_VALUES = {key: hostile_value(key) for key in PARAM_KEYS}


@st.composite
def params(draw) -> dict:
    keys = draw(S_PARAM_KEYS)
    out = {key: draw(S_VALUES[key]) for key in keys}
    for key in COSTLY:  # a cheap bound on every costly key the draw left out
        out.setdefault(key, float(SMALL_VALID.get(key, 2)))
    return out


def fill_struct(msg, values: dict) -> None:
    """Struct.update refuses nothing a Struct can hold; huge ints arrive as doubles."""
    msg.update(values)


@st.composite
def tensor_ref(draw):
    from protos.starmesh.v1 import tensor_pb2

    ref = tensor_pb2.TensorRef()
    ref.dtype = draw(S_DTYPE) if draw(st.booleans()) else draw(S_WIRE_DTYPE)
    rank = draw(S_RANK)
    shape = [draw(S_DIM) for _ in range(rank)]
    ref.shape.extend(shape)
    where = draw(S_WHERE)
    if where == "inline":
        ref.inline_bytes = _inline_bytes(draw, ref.dtype, shape)
    elif where == "shm":
        ref.shm.arena = draw(S_ARENA)
        ref.shm.offset, ref.shm.nbytes = draw(S_U64), _claimed(ref.dtype, shape)
        ref.shm.lease_id = draw(S_U64)
    elif where == "mooncake":
        ref.mooncake.session, ref.mooncake.address = draw(S_SESSION), 1
        ref.mooncake.nbytes = _claimed(ref.dtype, shape)
    return ref


S_TENSOR = tensor_ref()


def _claimed(dtype: int, shape: list[int]) -> int:
    n = ELEMENT_SIZES.get(dtype, 1) * math.prod(shape) if all(d >= 0 for d in shape) else 7
    return n if 0 <= n < 1 << 64 else 7


def _inline_bytes(draw, dtype: int, shape: list[int]) -> bytes:
    nbytes = _claimed(dtype, shape)
    if draw(S_CONSISTENT) and nbytes <= MAX_INLINE:  # consistent with the shape
        return draw(S_BYTES[nbytes]) if nbytes <= 64 else bytes(nbytes)
    return draw(S_BYTES[-1])


def over_limit_tensor():
    """A uint8 prompt past the conductor's 16 MiB per input."""
    from protos.starmesh.v1 import tensor_pb2

    nbytes = OVER_LIMIT_BYTES
    ref = tensor_pb2.TensorRef(dtype=tensor_pb2.DTYPE_UINT8, shape=[nbytes], inline_bytes=bytes(nbytes))
    return tensor_pb2.NamedTensor(name="prompt", tensor=ref)


OVER_LIMIT_TENSOR = over_limit_tensor()


@st.composite
def named_tensors(draw) -> list:
    from protos.starmesh.v1 import tensor_pb2

    n = draw(S_COUNT)
    return [tensor_pb2.NamedTensor(name=draw(S_NAME), tensor=draw(S_TENSOR)) for _ in range(n)]


S_PARAMS = params()


@st.composite
def input_ids(draw) -> list[int]:
    size = draw(S_IDS_SIZE)
    if size == "none":
        return []
    if size == "huge":  # past max_input_ids
        return [7] * ((1 << 18) + 1)
    return draw(S_IDS)


S_TENSORS, S_INPUT_IDS = named_tensors(), input_ids()
