"""A GenerateRequest checked and converted at the front door, before any work starts.

    model = served_model(models, request.model)               # InvalidArgument: not served here
    parsed = parse_generate_request(request, model, limits)   # InvalidArgument naming the field
    executor.generate(parsed.request_id, parsed.inputs, parsed.params)

Every field a client sets is bounded (conductor.input_limits): names and the request id
by length, text by its size before it is tokenized (conductor.prompt_size), input_ids by
count and value, each named tensor by name (an input of the model), rank, bytes, and by
what the model declares of it (core.input_spec, checked by conductor.input_check: dtype,
rank, ids >= 0), the params by encoded size and by the model's typed params (NaN,
infinities, overflowing integers, wrong types and unknown keys are refused there), and
the request as a whole by bytes.
The servicer runs this off the event loop (conductor.request_intake).
`input_ids` travel at the narrowest integer width that holds them (uint8, int16, int32 or
int64): a prompt of any real vocabulary goes as int32, not widened to int64; every
consumer reads ids of any integer dtype. Messages echo a client's strings cut short: a
megabyte of model name must not come back as a megabyte of status details.
"""
from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from conductor.chat_request import prompt_inputs
from conductor.client_events import WantedOutputs
from conductor.input_limits import InputLimits
from conductor.input_check import check_input
from conductor.model import ServedModel
from conductor.prompt_size import check_prompt_size
from core.errors import InvalidArgument
from protos.starmesh.v1 import conductor_pb2 as pb
from protos.starmesh.v1 import tensor_pb2
from runtime.item_proto import params_from_struct
from transport.dtypes import ELEMENT_SIZES
from transport.ref_proto import ref_from_proto

# (dtype name, exclusive upper bound): the first that holds every id is used.
ID_WIDTHS = (("uint8", 1 << 8), ("int16", 1 << 15), ("int32", 1 << 31), ("int64", 1 << 63))
_ID_SIZES = {"uint8": 1, "int16": 2, "int32": 4, "int64": 8}


@dataclass(frozen=True)
class GenerateInputs:
    """inputs: walk input name -> a one-item tuple (a tensor, or a client's TensorRef)."""

    request_id: str
    inputs: dict[str, tuple]
    params: dict[str, Any]
    nbytes: int  # what the request brought: inputs, params and text
    wanted: WantedOutputs = WantedOutputs()


def short(text: str, limit: int = 64) -> str:
    """repr of a client's string, cut to `limit` characters."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def served_model(models: Mapping[str, ServedModel], name: str) -> ServedModel:
    model = models.get(name)
    if model is None:
        # INVALID_ARGUMENT naming the field (the request is malformed for this conductor), not NOT_FOUND.
        raise InvalidArgument(f"model {short(name)} is not served here (served: {sorted(models)})")
    return model


def parse_generate_request(req, model: ServedModel, limits: InputLimits, tokenizer=None) -> GenerateInputs:
    """req: a starmesh.v1.GenerateRequest for `model`; tokenizer: the model's (for text and
    messages: conductor.chat_request)."""
    request_id = _request_id(req.request_id, limits)
    wanted = wanted_outputs(req, model, limits)
    total = check_prompt_size(req, model, limits, exact=True)
    total += sum(_media_bytes(p) for m in req.messages for p in m.content)
    inputs: dict[str, tuple] = {}
    if len(req.input_ids):
        if "input_ids" not in model.input_names:
            raise InvalidArgument(f"input_ids: model {model.name!r} takes no input_ids (its inputs: "
                                  f"{sorted(model.input_names)})")
        ids, nbytes = input_ids_tensor(req.input_ids, limits)
        inputs["input_ids"], total = (ids,), total + nbytes
    if len(req.inputs) > limits.max_inputs:
        raise InvalidArgument(f"inputs has {len(req.inputs)} tensors, over the limit of {limits.max_inputs} "
                              "(max_inputs)")
    for i, nt in enumerate(req.inputs):
        ref = _named_tensor(nt, i, inputs, limits, model)
        inputs[nt.name], total = (ref,), total + ref.nbytes
    params = _params(req, model, limits)
    total += req.params.ByteSize()
    if total > limits.max_request_bytes:
        raise InvalidArgument(f"request is {total} bytes of inputs, params and text, over the limit of "
                              f"{limits.max_request_bytes} (max_request_bytes)")
    inputs.update(prompt_inputs(req, model, tokenizer, params, limits))  # the text counted above; its ids bounded there
    return GenerateInputs(request_id, inputs, params, total, wanted)


def _media_bytes(part) -> int:
    """A media part's file bytes (0 for text, counted with the text, or a part with nothing set)."""
    kind = part.WhichOneof("part")
    return len(getattr(part, kind).data) if kind not in (None, "text") else 0


def _request_id(value: str, limits: InputLimits) -> str:
    if not value:
        return uuid.uuid4().hex
    if len(value) > limits.max_name_len or not value.isprintable():
        raise InvalidArgument(f"request_id must be at most {limits.max_name_len} printable characters "
                              f"(max_name_len), got {short(value)}")
    return value


def wanted_outputs(req, model: ServedModel, limits: InputLimits) -> WantedOutputs:
    """raw_outputs must name outputs of the model's walks; output_modalities, what it makes."""
    if len(req.raw_outputs) > limits.max_outputs:
        raise InvalidArgument(f"raw_outputs has {len(req.raw_outputs)} names, over the limit of "
                              f"{limits.max_outputs} (max_outputs)")
    names = {name for walk in model.graph.walks for name in walk.output_names}
    for i, name in enumerate(req.raw_outputs):
        if len(name) > limits.max_name_len:
            raise InvalidArgument(f"raw_outputs[{i}] is {len(name)} characters, over the limit of "
                                  f"{limits.max_name_len} (max_name_len)")
        if name not in names:
            raise InvalidArgument(f"raw_outputs[{i}] {short(name)} is not an output of model {model.name!r} "
                                  f"(outputs: {sorted(names)})")
    modalities = []
    for i, value in enumerate(req.output_modalities):
        name = pb.Modality.Name(value).removeprefix("MODALITY_").lower() if value in pb.Modality.values() else ""
        if name not in model.modalities():
            raise InvalidArgument(f"output_modalities[{i}] is {name or value!r}: model {model.name!r} makes "
                                  f"{list(model.modalities())}")
        modalities.append(name)
    return WantedOutputs(frozenset(modalities), frozenset(req.raw_outputs))


def input_ids_tensor(ids, limits: InputLimits):
    """(tensor [n] at the narrowest width holding every id, its bytes); ids are >= 0."""
    import torch

    if len(ids) > limits.max_input_ids:
        raise InvalidArgument(f"input_ids has {len(ids)} ids, over the limit of {limits.max_input_ids} "
                              "(max_input_ids)")
    wide = torch.tensor(list(ids), dtype=torch.int64)  # [n]
    low = int(wide.min())
    if low < 0:
        at = int(torch.nonzero(wide < 0)[0])
        raise InvalidArgument(f"input_ids[{at}] is {int(wide[at])}: ids are >= 0")
    high = int(wide.max())
    dtype = next(name for name, bound in ID_WIDTHS if high < bound)
    nbytes = len(ids) * _ID_SIZES[dtype]
    if nbytes > limits.max_input_bytes:
        raise InvalidArgument(f"input_ids is {nbytes} bytes as {dtype}, over the limit of "
                              f"{limits.max_input_bytes} (max_input_bytes)")
    return wide.to(getattr(torch, dtype)), nbytes


def _named_tensor(nt, i: int, inputs: dict, limits: InputLimits, model: ServedModel):
    if not nt.name:
        raise InvalidArgument(f"inputs[{i}].name is empty")
    if len(nt.name) > limits.max_name_len:
        raise InvalidArgument(f"inputs[{i}].name is {len(nt.name)} characters, over the limit of "
                              f"{limits.max_name_len} (max_name_len)")
    field = f"inputs[{nt.name}]"
    if nt.name in inputs:
        also = " (also sent as input_ids)" if nt.name == "input_ids" else ""
        raise InvalidArgument(f"{field}: the name is given twice{also}")
    if not nt.HasField("tensor"):
        raise InvalidArgument(f"{field}.tensor is not set")
    if len(nt.tensor.shape) > limits.max_rank:
        raise InvalidArgument(f"{field}.shape has {len(nt.tensor.shape)} dimensions, over the limit of "
                              f"{limits.max_rank} (max_rank)")
    nbytes = _claimed_nbytes(nt.tensor)  # from dtype and shape: a tensor past the limit is not copied out
    if nbytes > limits.max_input_bytes:
        raise InvalidArgument(f"{field} is {nbytes} bytes, over the limit of {limits.max_input_bytes} "
                              "(max_input_bytes)")
    ref = ref_from_proto(nt.tensor, field)
    if ref.kind != "inline":
        # An shm or Mooncake reference names memory of some process in the mesh; the
        # conductor hands no arena to clients, so none of those is a client's to name.
        raise InvalidArgument(f"{field}.tensor is a {ref.kind} reference: a client sends its tensors inline "
                              "(inline_bytes)")
    if nt.name not in model.input_names:
        raise InvalidArgument(f"{field}: {short(nt.name)} is not an input of model {model.name!r} (its inputs: "
                              f"{sorted(model.input_names)})")
    spec = model.input_specs.get(nt.name)
    if spec is not None:
        check_input(spec, field, ref, model.name)
    return ref


def _claimed_nbytes(msg) -> int:
    """The bytes a TensorRef message's dtype and shape make (0 where they make none: an
    unknown dtype or a negative dimension, which ref_from_proto then refuses by name)."""
    if msg.dtype not in tensor_pb2.DType.values() or any(d < 0 for d in msg.shape):
        return 0
    name = tensor_pb2.DType.Name(msg.dtype).removeprefix("DTYPE_").lower()  # DTYPE_FLOAT32 -> float32
    if name not in ELEMENT_SIZES:
        return 0
    return ELEMENT_SIZES[name] * math.prod(msg.shape)


def _params(req, model: ServedModel, limits: InputLimits) -> dict[str, Any]:
    size = req.params.ByteSize()
    if size > limits.max_params_bytes:
        raise InvalidArgument(f"params is {size} bytes, over the limit of {limits.max_params_bytes} "
                              "(max_params_bytes)")
    params = model.with_defaults(params_from_struct(req.params))
    model.parse_params(params)  # a bad param fails before any work, naming its key
    model.check_voice(params)
    return params
