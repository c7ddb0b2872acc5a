"""The one model registry: one entry per served model, one name used everywhere.

A model's name is its served name (`qwen3-omni`, `vjepa2-ac`): what a deployment file's
`pipeline:` names, what `starmesh make-tiny` builds, what ListModels and the gateway show.
Its folders are that name with `-` -> `_` (`engine/models/qwen3_omni/`,
`pipelines/qwen3_omni/`, and `services/qwen3_omni/` for a component only it uses).

An entry names, as "module:callable" paths imported only when used (the CLI starts
without importing every model):
- pipeline: (served name, Placement, **options) -> conductor.model.ServedModel;
- tiny: (directory, seed=0, **tiny_options) -> the checkpoint path it wrote;
- components: the components only this model serves, by the name deployments give them;
- hooks: for a shared component (SHARED_COMPONENTS), the model's hook: a callable
  taking the checkpoint directory and returning the model's specifics for that
  component, or None when the checkpoint is not this model's;
- runner: the in-process reference runner (the mesh's fidelity and speed baseline);
- client_prompt: (tokenizer directory, text, voice or None) -> prompt ids, for a client
  that tokenizes itself (`starmesh speak --tokenizer`);
- client_preset: (voice or None, whether the client tokenizes) -> the params a client's
  request starts from (e.g. a released model's sampling defaults);
- in_process: (graph builder (name) -> (graph, inner loops), components factory
  (checkpoint) -> components) when every node can run in one process;
- client_params: a CLI option -> the model's param of that meaning, where the names
  differ (`starmesh imagine --guidance` is BAGEL's `cfg_text_scale`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from core.errors import GraphError

# Components several models share; each takes a model's specifics through its hooks.
SHARED_COMPONENTS: Mapping[str, str] = MappingProxyType({
    "thinker": "services.thinker.component:ThinkerComponent.from_checkpoint",
    "codec": "services.codec.factory:codec_from_checkpoint",
    "encoder": "services.encoder.component:encoders_from_checkpoint",
    "dit": "services.dit.denoiser:DitComponent.from_checkpoint",
    "vae": "services.vae.component:VaeComponent.from_checkpoint",
})


@dataclass(frozen=True)
class ModelEntry:
    name: str
    pipeline: str
    tiny: str | None = None
    tiny_options: Mapping[str, Any] = field(default_factory=dict)
    components: Mapping[str, str] = field(default_factory=dict)
    hooks: Mapping[str, str] = field(default_factory=dict)
    runner: str | None = None
    client_prompt: str | None = None
    client_preset: str | None = None
    in_process: tuple[str, str] | None = None
    client_params: Mapping[str, str] = field(default_factory=dict)
    has_folders: bool = True  # False: an architecture of the engine's table, served by shared parts only

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.lower() or "_" in self.name:
            raise ValueError(f"ModelEntry.name {self.name!r}: lower case, words joined by '-'")
        paths = [self.pipeline, self.tiny, self.runner, self.client_prompt, self.client_preset,
                 *(self.in_process or ()), *self.components.values(), *self.hooks.values()]
        for path in filter(None, paths):
            if ":" not in path:
                raise ValueError(f"ModelEntry {self.name}: {path!r} is not 'module:callable'")
        for shared in self.hooks:
            if shared not in SHARED_COMPONENTS:
                raise ValueError(f"ModelEntry {self.name}: hook for {shared!r}, not a shared component "
                                 f"({sorted(SHARED_COMPONENTS)})")
        for key in ("tiny_options", "components", "hooks", "client_params"):
            object.__setattr__(self, key, MappingProxyType(dict(getattr(self, key))))

    @property
    def folder(self) -> str:
        """The name of the model's folders under engine/models, pipelines and services."""
        return self.name.replace("-", "_")


CHAT_PROMPT = "pipelines.chat_prompt:chat_prompt_ids"  # a user turn in the checkpoint's chat template


def _text(name: str) -> ModelEntry:
    """A text model of the engine's architecture table: the shared LLM component alone."""
    return ModelEntry(name, "pipelines.text_generation:text_model", "engine.checkpoints.tiny_text:make_tiny_text",
                      {"kind": name}, client_prompt=CHAT_PROMPT, has_folders=False)


MODELS: tuple[ModelEntry, ...] = (
    ModelEntry(
        "qwen3-omni", "pipelines.qwen3_omni.model:speech_model", "engine.models.qwen3_omni.tiny:make_tiny_omni",
        components={"talker": "services.qwen3_omni.talker:TalkerComponent.from_checkpoint",
                    "talker+codec": "services.qwen3_omni.talker_codec:make_talker_codec"},
        hooks={"codec": "services.qwen3_omni.code2wav:codec_hook",
               "thinker": "services.qwen3_omni.thinker_hook:thinker_hook",
               "encoder": "services.qwen3_omni.encoder_hook:encoder_hook"},
        runner="pipelines.qwen3_omni.runner:SpeechRunner", client_prompt=CHAT_PROMPT),
    ModelEntry(
        "orpheus", "pipelines.orpheus.model:orpheus_model", "engine.models.orpheus.tiny:make_tiny_orpheus",
        components={"orpheus_lm": "services.orpheus.component:make_orpheus_lm"},
        hooks={"codec": "services.orpheus.codec:codec_hook"},
        runner="pipelines.orpheus.runner:OrpheusRunner", client_prompt="pipelines.orpheus.params:client_prompt_ids",
        client_preset="pipelines.orpheus.params:client_preset"),
    ModelEntry(
        "sd3", "pipelines.sd3.model:sd3_model", "engine.models.sd3.tiny:make_tiny_sd3",
        components={"text_encoder": "services.sd3.text:TextEncoderComponent.from_checkpoint",
                    "sd3": "services.sd3.colocated:make_sd3"},
        hooks={"dit": "services.sd3.dit_hook:dit_hook", "vae": "services.sd3.vae_hook:vae_hook"},
        in_process=("pipelines.sd3.model:in_process_graph", "services.sd3.colocated:sd3_components")),
    ModelEntry(
        "vjepa2-ac", "pipelines.vjepa2_ac.model:world_model", "engine.models.vjepa2_ac.tiny:make_tiny_vjepa2",
        components={"world": "services.vjepa2_ac.world:WorldComponent.from_checkpoint"}),
    ModelEntry(
        "bagel", "pipelines.bagel.model:bagel_model", "engine.models.bagel.tiny:make_tiny_bagel",
        components={"bagel_backbone": "services.bagel.component:BagelComponent.from_checkpoint",
                    "bagel": "services.bagel.colocated:make_bagel"},
        hooks={"encoder": "services.bagel.vit_tower:encoder_hook", "vae": "services.bagel.vae_hook:vae_hook"},
        runner="pipelines.bagel.runner:BagelRunner", client_params={"guidance": "cfg_text_scale"}),
    ModelEntry(
        "toy-tagger", "pipelines.toy_tagger.model:tagger_model", "engine.models.toy_tagger.tiny:make_tiny_tagger",
        components={"tagger": "services.toy_tagger.component:TaggerComponent.from_checkpoint"}),
    _text("qwen3"),
    _text("qwen3-moe"),
    _text("llama"),
)


def _index(entries: tuple[ModelEntry, ...]) -> tuple[dict[str, ModelEntry], dict[str, str]]:
    """Entries by name and every component's factory path; a name registered twice fails."""
    by_name: dict[str, ModelEntry] = {}
    components: dict[str, str] = dict(SHARED_COMPONENTS)
    for entry in entries:
        if entry.name in by_name:
            raise ValueError(f"model {entry.name!r} is registered twice")
        by_name[entry.name] = entry
        for name, path in entry.components.items():
            if name in components:
                raise ValueError(f"component {name!r} of model {entry.name!r} is registered twice")
            components[name] = path
    return by_name, components


_BY_NAME, _COMPONENTS = _index(MODELS)


def names() -> list[str]:
    return sorted(_BY_NAME)


def entry(name: str, field_name: str = "pipeline") -> ModelEntry:
    """The entry of `name`; GraphError naming `field_name` and the registered names otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise GraphError(f"{field_name} {name!r} is not a registered model (have {names()})") from None


def load(path: str) -> Callable[..., Any]:
    """The callable a "module:attr.attr" path names (imported now; InvalidArgument naming
    the path when it names nothing): the same resolver the shared components load their
    hooks with."""
    from services.model_hooks import load_hook

    return load_hook(path)


def build_model(pipeline: str, name: str, placement, options: Mapping[str, Any]):
    """The ServedModel of registered model `pipeline`, served as `name`."""
    builder = load(entry(pipeline).pipeline)
    try:
        return builder(name, placement, **dict(options))
    except TypeError as e:  # an option the builder does not take
        raise GraphError(f"models.{name}.options: {e}") from None


def tiny_kinds() -> list[str]:
    return sorted(e.name for e in MODELS if e.tiny)


def build_tiny(kind: str, directory, seed: int = 0):
    """Writes a tiny random checkpoint of registered model `kind` into `directory`."""
    model = entry(kind, "tiny checkpoint kind")
    if model.tiny is None:
        raise GraphError(f"tiny checkpoint kind {kind!r} has no tiny builder (have {tiny_kinds()})")
    from pathlib import Path

    return Path(load(model.tiny)(directory, seed=seed, **model.tiny_options))


def component_names() -> list[str]:
    return sorted(_COMPONENTS)


def hooks_for(component: str) -> tuple[str, ...]:
    """Every registered model's hook path for shared `component`, in registry order."""
    return tuple(e.hooks[component] for e in MODELS if component in e.hooks)


def component_factory(spec: str) -> tuple[str, dict[str, Any]]:
    """The factory path of a registered component name (or `spec` itself when it is a
    "module:callable" path) and the keyword arguments the registry adds: a shared
    component gets its models' hooks."""
    path = _COMPONENTS.get(spec, spec)
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"unknown component {spec!r}: not a registered name ({', '.join(component_names())}) "
                         "nor 'module:callable'")
    hooks = hooks_for(spec) if spec in SHARED_COMPONENTS else ()
    return path, ({"hooks": hooks} if hooks else {})


def model_folders() -> dict[str, ModelEntry]:
    """Folder name -> entry, for the models that own folders (the layering test's rule)."""
    return {e.folder: e for e in MODELS if e.has_folders}


def resolve_factory(spec: str) -> Callable[..., Any]:
    """The factory callable of a registered component name or "module:callable" path."""
    path, _ = component_factory(spec)
    factory = load(path)
    if not callable(factory):
        raise ValueError(f"component factory {path!r} is not callable")
    return factory


def build_component(spec: str, **kwargs: Any) -> Any:
    """The component of `spec`: its factory called with `kwargs` (and, for a shared
    component, the hooks of every registered model)."""
    _, extra = component_factory(spec)
    return resolve_factory(spec)(**extra, **kwargs)
