"""What a conductor serves: a model = a walk graph + where its nodes run, and what its
pipeline declares about requests (typed params) and outputs (kinds, audio rate)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from conductor.placement import Placement
from core.errors import GraphError, InvalidArgument
from core.input_spec import InputSpec
from core.pace import NodePace
from graph.walk import WalkGraph

# What a walk output carries, for the conductor's metrics and for clients: "audio" is
# float32 samples [S] at the model's sample_rate, "image" uint8 [H, W, 3] (or its float
# twin), "text" token ids, "codes" codec frames, "progress" [k, steps] step events.
OUTPUT_KINDS = frozenset({"text", "codes", "audio", "image", "progress"})
MODALITIES = ("text", "audio", "image")  # the kinds a client asks for by name (GenerateRequest.output_modalities)


@dataclass(frozen=True)
class ServedModel:
    """name: what clients ask for; inner_loops: loops whose single node runs its loop
    inside its component; the conductor drives every other loop.
    lockstep_nodes: nodes whose runs are forwards of a block stack that a dlo_group's
    replicas gather in lockstep (the DiT's denoising branches): on the placement's
    lockstep groups every such run is padded to all ranks (conductor.lockstep).
    params: the pipeline's typed request params (a core.params.RequestParams class;
    None: not checked here, each service checks what it reads). output_kinds: walk
    output name -> one of OUTPUT_KINDS; sample_rate: samples per second of its "audio"
    outputs (required when it has one). tokenizer_node: the node whose service's checkpoint
    holds the model's tokenizer ("" for none); tokenizer_dir: that checkpoint's directory,
    filled in by whoever knows the deployment's checkpoints (cluster.conductor_process);
    decode_text: its text outputs are text (False: ids of something else, e.g. audio tokens).
    prompt: how `text`/`messages` become its input (pipelines/prompt_format.py; None: it takes
    no text). voice_param: the params key naming a voice; voices: its values (empty: any);
    read_voices(checkpoint dir) -> voices, for voices only the checkpoint knows. pacing: node
    -> NodePace, how its runs' items map to media time (the deadlines engines schedule by).
    max_held_text: for a request that gets audio, how many text deltas may wait to travel
    with its next audio chunk (conductor.text_hold; 0: each goes as it comes).
    default_params: the params every request starts from (e.g. a released model's sampling
    defaults, where they differ from the params class's); the request's own keys win, and
    ListModels shows these as the defaults. input_specs: walk input name -> what it takes
    (core.input_spec: dtype kind, rank, its own byte bound), checked at the front door;
    an input without one is bounded only by the InputLimits."""

    name: str
    graph: WalkGraph
    placement: Placement
    inner_loops: frozenset[str] = field(default_factory=frozenset)
    lockstep_nodes: frozenset[str] = field(default_factory=frozenset)
    params: type | None = None
    output_kinds: Mapping[str, str] = field(default_factory=dict)
    sample_rate: int = 0
    tokenizer_node: str = ""
    tokenizer_dir: str = ""
    decode_text: bool = True
    prompt: Any = None
    voice_param: str = ""
    voices: tuple[str, ...] = ()
    read_voices: Callable[[str], tuple[str, ...]] | None = None
    pacing: Mapping[str, NodePace] = field(default_factory=dict)  # node -> its items' media time (core.pace)
    ttfa_target_s: float = 0.0  # when a paced stream's first audio is due after admission (conductor.playback)
    max_held_text: int = 0  # a stream with audio: text deltas wait for its next batch, up to this many (text_hold)
    default_params: Mapping[str, Any] = field(default_factory=dict)
    input_specs: Mapping[str, InputSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("model.name is empty")
        object.__setattr__(self, "inner_loops", frozenset(self.inner_loops))
        object.__setattr__(self, "lockstep_nodes", frozenset(self.lockstep_nodes))
        object.__setattr__(self, "output_kinds", dict(self.output_kinds))
        self._check_outputs()
        if self.tokenizer_node and self.tokenizer_node not in self.graph.node_by_name:
            raise GraphError(f"model {self.name}: tokenizer_node {self.tokenizer_node!r} is not a node of its graph")
        object.__setattr__(self, "voices", tuple(self.voices))
        if isinstance(self.ttfa_target_s, bool) or not (isinstance(self.ttfa_target_s, (int, float))
                                                        and 0 <= self.ttfa_target_s < 60):
            raise GraphError(f"model {self.name}: ttfa_target_s must be in [0, 60) seconds, "
                             f"got {self.ttfa_target_s!r}")
        if isinstance(self.max_held_text, bool) or not (isinstance(self.max_held_text, int)
                                                        and 0 <= self.max_held_text <= 4096):
            raise GraphError(f"model {self.name}: max_held_text must be an int in [0, 4096], "
                             f"got {self.max_held_text!r}")
        if self.voice_param and self.params is not None and \
                self.voice_param not in {s.name for s in self.params.specs()}:
            raise GraphError(f"model {self.name}: voice_param {self.voice_param!r} is not one of its params")
        object.__setattr__(self, "default_params", MappingProxyType(dict(self.default_params)))
        if self.default_params and self.params is None:
            raise GraphError(f"model {self.name}: default_params need a params class to check them against")
        self.parse_params(self.default_params)  # each key one of its params, each value in range
        self._check_input_specs()
        self.placement.validate(self.graph)
        unknown = sorted(self.lockstep_nodes - set(self.graph.node_by_name))
        if unknown:
            raise ValueError(f"model {self.name}: lockstep_nodes {unknown} are not nodes of its graph")
        if self.placement.lockstep_groups and not self.lockstep_nodes:
            raise ValueError(f"model {self.name}: the placement has lockstep groups "
                             f"{sorted(self.placement.lockstep_groups)} but the model names no lockstep nodes "
                             "(the runs to pad across their ranks)")

    def _check_input_specs(self) -> None:
        object.__setattr__(self, "input_specs", MappingProxyType(dict(self.input_specs)))
        for name, spec in self.input_specs.items():
            if name not in self.input_names:
                raise GraphError(f"model {self.name}: input_specs[{name!r}] is not an input of its walks "
                                 f"(have {sorted(self.input_names)})")
            if not isinstance(spec, InputSpec):
                raise GraphError(f"model {self.name}: input_specs[{name!r}] must be an InputSpec, got {spec!r}")

    def _check_outputs(self) -> None:
        outputs = self.output_names
        for name, kind in self.output_kinds.items():
            if name not in outputs:
                raise GraphError(f"model {self.name}: output_kinds[{name!r}] is not an output of its walks "
                                 f"(have {sorted(outputs)})")
            if kind not in OUTPUT_KINDS:
                raise GraphError(f"model {self.name}: output_kinds[{name!r}] = {kind!r} is not one of "
                                 f"{sorted(OUTPUT_KINDS)}")
        rate = self.sample_rate
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 0:
            raise GraphError(f"model {self.name}: sample_rate must be an integer >= 0, got {rate!r}")
        if "audio" in self.output_kinds.values() and not rate:
            raise GraphError(f"model {self.name}: sample_rate is required: it has audio outputs")

    def with_defaults(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """`params` over the model's default_params."""
        return {**self.default_params, **params}

    def parse_params(self, params: Mapping[str, Any]) -> Any:
        """A request's params as the pipeline's typed params, every key checked (InvalidArgument
        naming the key); None when the model declares none."""
        return None if self.params is None else self.params.from_params(params, strict=True)

    def check_voice(self, params: Mapping[str, Any]) -> None:
        """InvalidArgument naming params.<voice_param> when it is not one of the voices."""
        voice = params.get(self.voice_param) if self.voice_param else None
        if voice is not None and self.voices and str(voice).lower() not in self.voices:
            raise InvalidArgument(f"params.{self.voice_param} {str(voice)[:32]!r} is not a voice of model "
                                  f"{self.name!r} (voices: {list(self.voices)})")

    def modalities(self) -> tuple[str, ...]:
        """What a client can ask of it (MODALITIES order)."""
        kinds = set(self.output_kinds.values())
        return tuple(m for m in MODALITIES if m in kinds)

    @property
    def input_names(self) -> frozenset[str]:
        """Every walk input of the model."""
        return frozenset(name for walk in self.graph.walks for name in walk.input_names)

    @property
    def output_names(self) -> frozenset[str]:
        """Every walk output of the model."""
        return frozenset(name for walk in self.graph.walks for name in walk.output_names)

    def outputs_of_kind(self, kind: str) -> frozenset[str]:
        return frozenset(name for name, k in self.output_kinds.items() if k == kind)
