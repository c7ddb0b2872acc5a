"""ListModels' answer for one model: what it takes and makes, and every request param,
generated from the pipeline's typed params (core.params.RequestParams: the same table
that checks a request), so the description cannot drift from what is enforced."""
from __future__ import annotations

from google.protobuf import struct_pb2

from conductor.client_events import TYPED_EVENT
from conductor.model import ServedModel
from protos.starmesh.v1 import conductor_pb2 as pb

TYPE_NAMES = {int: "int", float: "float", bool: "bool", str: "string", tuple: "ids"}


def model_info(model: ServedModel, has_tokenizer: bool) -> pb.ModelInfo:
    outputs = sorted({name for walk in model.graph.walks for name in walk.output_names})
    inputs = sorted({name for walk in model.graph.walks for name in walk.input_names})
    info = pb.ModelInfo(
        name=model.name, walks=[w.name for w in model.graph.walks], inputs=inputs,
        output_modalities=[pb.Modality.Value(f"MODALITY_{m.upper()}") for m in model.modalities()],
        accepts_text=model.prompt is not None and (has_tokenizer or not model.prompt.needs_tokenizer),
        voices=list(model.voices), voice_param=model.voice_param, sample_rate=model.sample_rate)
    for name in outputs:
        kind = model.output_kinds.get(name, "")
        info.outputs.add(name=name, kind=kind, event=TYPED_EVENT.get(kind, "tensor"))
    for spec in model.params.specs() if model.params is not None else ():
        param = info.params.add(name=spec.name, type=TYPE_NAMES[spec.kind], exclusive_min=spec.exclusive_min,
                                help=spec.help)
        param.default_value.CopyFrom(_value(model.default_params.get(spec.name, spec.default)))
        if spec.min is not None:
            param.min = float(spec.min)
        if spec.max is not None:
            param.max = float(spec.max)
    return info


def _value(value) -> struct_pb2.Value:
    if value is None:
        return struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)
    if isinstance(value, bool):
        return struct_pb2.Value(bool_value=value)
    if isinstance(value, (int, float)):
        return struct_pb2.Value(number_value=float(value))
    if isinstance(value, str):
        return struct_pb2.Value(string_value=value)
    return struct_pb2.Value(list_value=struct_pb2.ListValue(values=[_value(v) for v in value]))
