"""One request's walk outputs as the GenerateEvents a client reads.

    events = RequestEvents(model, outputs, request_id, tokenizer, wanted, t0)
    for name, value in walk outputs:  yield from events.of(name, value, now)
    yield from events.end(now)        # the text held back, then Usage

The events are made by a form: GenerateEvents (the default) makes the messages the
Generate RPCs send; a session's turn, which reads them in the conductor itself, takes
plain data (conductor.session_generate.TurnEvents) and no message is built.

By the output's kind (ServedModel.output_kinds):
    text      ids [n]          -> TextDelta (ids; decoded text when the model has a tokenizer)
    audio     float32 [S]      -> AudioChunk (PCM_F32LE at the model's sample rate, numbered)
    image     uint8 [H, W, 3]  -> Image (PNG bytes, size, index)
    progress  [k, steps]       -> StepEvent
    anything else, and every name in `raw_outputs` -> a tensor event (conductor.client_outputs)
`WantedOutputs` drops what the client did not ask for.
"""
from __future__ import annotations

from dataclasses import dataclass

from conductor.client_outputs import ClientOutputs
from conductor.detokenizer import IncrementalDetokenizer
from conductor.model import ServedModel
from conductor.png import MIME_TYPE, encode_png
from conductor.text_hold import is_text
from protos.starmesh.v1 import conductor_pb2 as pb
from runtime.received_rows import RowsView
from transport.codec import view
from transport.ref_proto import inline_to_proto

# Output kind -> the modality a client asks for to get it (conductor.model.OUTPUT_KINDS).
KIND_MODALITY = {"text": "text", "audio": "audio", "image": "image", "progress": "image"}
TYPED_EVENT = {"text": "text", "audio": "audio", "image": "image", "progress": "step"}


def numel(value) -> int:
    """Elements of a tensor (a method) or of a TensorRef (a property)."""
    n = getattr(value, "numel", 0)
    return int(n() if callable(n) else n)


@dataclass(frozen=True)
class WantedOutputs:
    """modalities: "text", "audio", "image" (empty: all, and outputs of no modality too);
    raw: output names sent as tensor events."""

    modalities: frozenset[str] = frozenset()
    raw: frozenset[str] = frozenset()

    def kinds(self, output_kinds: dict[str, str]) -> frozenset[str]:
        """The output kinds the request needs made (the walk it starts with): its
        modalities and the kinds of its raw outputs; empty: all."""
        if not self.modalities:
            return frozenset()
        return self.modalities | {output_kinds.get(name, "") for name in self.raw}

    def silent(self, output_kinds: dict[str, str], names) -> frozenset[str]:
        """Outputs among `names` the request never needs delivered: not wanted and not text
        (text is counted for Usage, wanted or not)."""
        return frozenset(n for n in names if output_kinds.get(n, "") != "text"
                         and not self.wants(n, output_kinds.get(n, "")))

    def wants(self, name: str, kind: str) -> bool:
        if not self.modalities or name in self.raw:
            return True
        return KIND_MODALITY.get(kind) in self.modalities


class GenerateEvents:
    """The form of RequestEvents' events: one event of each kind from plain values, here
    starmesh.v1.GenerateEvent messages."""

    @staticmethod
    def text(request_id: str, ids: list[int], text: str) -> pb.GenerateEvent:
        return pb.GenerateEvent(request_id=request_id, text=pb.TextDelta(token_ids=ids, text=text))

    @staticmethod
    def audio(request_id: str, samples: bytes, sample_rate: int, sequence_number: int,
              num_samples: int) -> pb.GenerateEvent:
        return pb.GenerateEvent(request_id=request_id, audio=pb.AudioChunk(
            samples=samples, sample_rate=sample_rate, format=pb.AUDIO_FORMAT_PCM_F32LE,
            sequence_number=sequence_number, num_samples=num_samples))

    @staticmethod
    def image(request_id: str, png: bytes, width: int, height: int, index: int) -> pb.GenerateEvent:
        return pb.GenerateEvent(request_id=request_id, image=pb.Image(data=png, mime_type=MIME_TYPE, width=width,
                                                                      height=height, index=index))

    @staticmethod
    def step(request_id: str, node: str, step: int, num_steps: int) -> pb.GenerateEvent:
        return pb.GenerateEvent(request_id=request_id, step=pb.StepEvent(node=node, step=step, num_steps=num_steps))

    @staticmethod
    def tensor(outputs: ClientOutputs, request_id: str, name: str, value) -> pb.GenerateEvent:
        return outputs.event(request_id, name, value)

    @staticmethod
    def tensor_rows(request_id: str, name: str, rows: RowsView) -> list[pb.GenerateEvent]:
        """A tensor event per entry of the rows (inline), as `tensor` makes for each."""
        col = rows.column
        dtype, trailing, data, bounds, counts = col.dtype, col.trailing, col.data, col.bounds, col.counts
        events = []
        for i in rows.entries:
            event = pb.GenerateEvent(request_id=request_id)
            event.tensor.name = name
            inline_to_proto(dtype, (counts[i],) + trailing, data[bounds[i]:bounds[i + 1]], event.tensor.tensor)
            events.append(event)
        return events

    @staticmethod
    def usage(request_id: str, counts: dict, metrics: dict) -> pb.GenerateEvent:
        """counts: Usage's fields by name; metrics: its free-form metrics."""
        usage = pb.Usage(**counts)
        usage.metrics.update(metrics)
        return pb.GenerateEvent(request_id=request_id, usage=usage)

    is_text = staticmethod(is_text)


class RequestEvents:
    def __init__(self, model: ServedModel, outputs: ClientOutputs, request_id: str, tokenizer=None,
                 wanted: WantedOutputs = WantedOutputs(), t0: float = 0.0, prompt_tokens: int = 0,
                 form=GenerateEvents) -> None:
        """form: what makes each event (GenerateEvents' methods)."""
        self.model, self.outputs, self.request_id, self.wanted = model, outputs, request_id, wanted
        self.form = form
        self.detokenizer = IncrementalDetokenizer(tokenizer) if tokenizer is not None else None
        self.t0 = t0
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0
        self.audio_samples = 0
        self.num_audio = 0
        self.num_images = 0
        self.num_outputs = 0
        self.first_audio_s: float | None = None
        self.report: dict = {}  # what its nodes said about kept contexts (RequestRun.note)

    @property
    def wants_audio(self) -> bool:
        """The client gets audio chunks (it asked for audio, or for everything)."""
        return any(self.wanted.wants(n, k) for n, k in self.model.output_kinds.items() if k == "audio")

    def is_heavy(self, name: str) -> bool:
        """Its events take milliseconds to make (an image is PNG-encoded)."""
        return self.model.output_kinds.get(name) == "image" and name not in self.wanted.raw

    def of(self, name: str, value, now: float) -> list:
        """The events of one walk output (none when the client does not want it)."""
        self.num_outputs += 1
        kind = self.model.output_kinds.get(name, "")
        if kind == "text":  # made, so counted, whether or not the client wants it
            self.completion_tokens += numel(value)
        if not self.wanted.wants(name, kind):
            return []
        if self._is_tensor_event(name, kind):
            return [self.form.tensor(self.outputs, self.request_id, name, value)]
        ref = self.outputs.by_value(value)
        tensor = view(ref.location.data, ref.dtype, ref.shape)
        if kind == "image" and (tensor.dtype.is_floating_point or tensor.dim() != 3):
            # image_float: fidelity checks read it raw
            return [self.form.tensor(self.outputs, self.request_id, name, value)]
        return [getattr(self, f"_{kind}")(name, tensor, now)]

    def of_rows(self, name: str, rows: RowsView, now: float) -> list:
        """The events of several outputs of one name, in order: made straight from the rows
        where the client takes them as tensor events and the form can (tensor_rows),
        else of() for each."""
        tensor_rows = getattr(self.form, "tensor_rows", None)
        kind = self.model.output_kinds.get(name, "")
        if tensor_rows is None or not self._is_tensor_event(name, kind) or kind == "text":
            return [ev for ref in rows.refs() for ev in self.of(name, ref, now)]
        self.num_outputs += len(rows)
        return tensor_rows(self.request_id, name, rows) if self.wanted.wants(name, kind) else []

    def _is_tensor_event(self, name: str, kind: str) -> bool:
        """The client gets this output as a tensor event: asked raw, or of no typed kind."""
        return name in self.wanted.raw or kind not in TYPED_EVENT

    def _text(self, name: str, ids, now: float):
        ids = [int(i) for i in ids.reshape(-1).tolist()]
        text = self.detokenizer.push(ids) if self.detokenizer is not None else ""
        return self.form.text(self.request_id, ids, text)

    def _audio(self, name: str, samples, now: float):
        import torch

        pcm = samples.reshape(-1).to(torch.float32)  # [S]
        if self.first_audio_s is None:
            self.first_audio_s = now - self.t0
        event = self.form.audio(self.request_id, pcm.numpy().astype("<f4").tobytes(), self.model.sample_rate,
                                self.num_audio, int(pcm.numel()))
        self.num_audio += 1
        self.audio_samples += int(pcm.numel())
        return event

    def _image(self, name: str, rgb, now: float):
        height, width = int(rgb.shape[0]), int(rgb.shape[1])
        event = self.form.image(self.request_id, encode_png(rgb), width, height, self.num_images)
        self.num_images += 1
        return event

    def _progress(self, name: str, step, now: float):
        k, steps = (int(x) for x in step.reshape(-1).tolist()[:2])
        return self.form.step(self.request_id, name, k, steps)

    def end(self, now: float) -> list:
        """The text still held back (an incomplete character), then Usage."""
        out = []
        rest = self.detokenizer.finish() if self.detokenizer is not None else ""
        if rest:
            out.append(self.form.text(self.request_id, [], rest))
        metrics = {"num_outputs": self.num_outputs, "num_images": self.num_images}
        return out + [self.form.usage(self.request_id, self.usage(now), metrics)]

    def usage(self, now: float) -> dict:
        """Usage's fields by name (starmesh.v1.Usage's)."""
        audio_s = self.audio_samples / self.model.sample_rate if self.model.sample_rate else 0.0
        latency_s = now - self.t0
        # a continued context's tokens are prompt tokens too (cached ones): the engine's count
        prompt_tokens = max(self.prompt_tokens, self.report.get("prompt_tokens", 0))
        return {"prompt_tokens": prompt_tokens, "completion_tokens": self.completion_tokens,
                "audio_seconds": audio_s, "latency_ms": 1e3 * latency_s,
                "time_to_first_audio_ms": 1e3 * self.first_audio_s if self.first_audio_s is not None else 0.0,
                "real_time_factor": latency_s / audio_s if audio_s else 0.0,
                "context_id": self.report.get("context_id", ""),
                "cached_prompt_tokens": self.report.get("cached_prompt_tokens", 0)}
