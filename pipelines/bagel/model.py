"""BAGEL as the conductor serves it: one backbone, five walks, CFG branches that may sit
on two backbone replicas.

Walks (picked by the request's inputs and the outputs it wants):
  understand  media + prompt, text wanted -> media_encoder (ViT) -> prefill_und -> answer
  chat        prompt, text wanted         -> prefill_chat -> answer
  generate    prompt                      -> prefill_t2i (+ prefill_t2i_cfg) -> plan -> init_latent
                                             -> Loop{ Parallel(velocity_*) -> combine } -> decode
  edit        media (one image) + prompt  -> image_in -> encode (VAE), media_encoder (ViT)
                                             -> prefill_edit (+ _cfg) -> plan -> ... -> decode
  edit_held   an edit whose image the kept context it continues holds (the conductor's
              `held_media` input, core/held_media.py)
                                          -> image_in -> encode (VAE) -> prefill_edit_held (+ _cfg)
                                             -> plan -> ... -> decode: no ViT run, the image's
                                             ViT tokens are the context's
"Think" is params.think on any walk: the prefills put the thinking system prompt first,
and `plan` (a no-op otherwise) decodes the plan on the `gen` replica and appends it to
`gen` only; understand answers with its reasoning.

Each denoising iteration fans out to velocity_gen, velocity_cfg_text and velocity_cfg_img
(a branch the step does not need answers at once with nothing) and joins in combine
(guidance, renorm, the Euler step); the conductor drives the loop and streams combine's
step [k, steps - 1]. Where the branches run decides where the contexts are built:
prefill_* runs where velocity_gen does and builds gen, prefill_*_cfg where the cfg
branches do (on one replica the second prefill finds the contexts built), so no KV moves.

Outputs: text (the answer, or the plan), step, image (uint8 [H, W, 3]), image_float.
Params: engine.models.bagel.params.BagelParams.
"""
from __future__ import annotations

from graph.composites import DynamicLoop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph
from core.held_media import is_held
from engine.models.bagel.params import MAX_STEPS

DENOISE_LOOP = "denoise"
BRANCHES = ("gen", "cfg_text", "cfg_img")
VELOCITY = tuple(f"velocity_{b}" for b in BRANCHES)
ENCODED = ("rows", "deepstack", "parts", "seconds")
OUTPUT_KINDS = {"text": "text", "step": "progress", "image": "image", "image_float": "image"}
HELD_PREFILLS = ("prefill_edit_held", "prefill_edit_held_cfg")
BACKBONE_NODES = ("image_in", "prefill_chat", "prefill_und", "answer", "prefill_t2i", "prefill_edit",
                  "prefill_edit_held", "plan", "init_latent", "velocity_gen", "combine")
CFG_NODES = ("prefill_t2i_cfg", "prefill_edit_cfg", "prefill_edit_held_cfg", "velocity_cfg_text", "velocity_cfg_img")


def _nodes() -> list[N]:
    state = dict(stateful=True)
    loop = dict(stateful=True, speculative=False)
    edit = ("prompt", *ENCODED, "latent")
    return [
        N("image_in", ("media", "media_parts"), ("image",)),
        N("media_encoder", ("media", "media_parts"), ENCODED),
        N("encode", ("image",), ("latent",)),
        N("prefill_chat", ("prompt",), ("ready",), **state),
        N("prefill_und", ("prompt", *ENCODED), ("ready",), **state),
        N("answer", ("ready",), ("text",), **state),
        N("prefill_t2i", ("prompt",), ("size",), **state), N("prefill_t2i_cfg", ("prompt",), ("size",), **state),
        N("prefill_edit", edit, ("size",), **state), N("prefill_edit_cfg", edit, ("size",), **state),
        *(N(p, ("prompt", "latent"), ("size",), **state) for p in HELD_PREFILLS),
        N("plan", ("size",), ("text", "size"), **state),
        N("init_latent", ("size",), ("latent",)),
        *(N(v, ("latent", "size"), ("v",), **loop) for v in VELOCITY),
        N("combine", ("latent", "size", *BRANCHES), ("latent", "step", "done"), speculative=False),
        N("decode", ("latent",), ("image", "image_float")),
    ]


def _loop(max_steps: int) -> DynamicLoop:
    carry = [E("combine.latent", f"{n}.latent") for n in (*VELOCITY, "combine")]
    return DynamicLoop(DENOISE_LOOP, Parallel(*VELOCITY), "combine", max_iters=max_steps,
                       stop=StopRule("combine.done", stop_token_ids=(1,)), carry=carry)


def _image_edges(prefill: str) -> list[E]:
    """From the prefills to the image: plan on gen's replica, the loop, the VAE."""
    edges = [E(f"{prefill}.size", "plan.size"), E("plan.text", "output.text"), E("plan.size", "init_latent.size")]
    edges += [E("init_latent.latent", f"{n}.latent") for n in (*VELOCITY, "combine")]
    edges += [E("plan.size", "velocity_gen.size"), E("plan.size", "combine.size")]
    edges += [E(f"{prefill}_cfg.size", f"{v}.size") for v in VELOCITY[1:]]
    edges += [E(f"velocity_{b}.v", f"combine.{b}") for b in BRANCHES]
    return edges + [E("combine.step", "output.step"), E("combine.latent", "decode.latent"),
                    E("decode.image", "output.image"), E("decode.image_float", "output.image_float")]


def _image_tail(prefill: str, max_steps: int) -> tuple:
    return Parallel(prefill, f"{prefill}_cfg"), "plan", "init_latent", _loop(max_steps), "decode"


def _walks(max_steps: int) -> list[Walk]:
    media = [E(f"input.{p}", f"media_encoder.{p}") for p in ("media", "media_parts")]
    encoded = lambda dst: [E(f"media_encoder.{p}", f"{dst}.{p}") for p in ENCODED]  # noqa: E731
    understand = Walk("understand", Sequential("media_encoder", "prefill_und", "answer"),
                      media + [E("input.prompt", "prefill_und.prompt"), *encoded("prefill_und"),
                               E("prefill_und.ready", "answer.ready"), E("answer.text", "output.text")])
    chat = Walk("chat", Sequential("prefill_chat", "answer"),
                [E("input.prompt", "prefill_chat.prompt"), E("prefill_chat.ready", "answer.ready"),
                 E("answer.text", "output.text")])
    generate = Walk("generate", Sequential(*_image_tail("prefill_t2i", max_steps)),
                    [E("input.prompt", f"{p}.prompt") for p in ("prefill_t2i", "prefill_t2i_cfg")]
                    + _image_edges("prefill_t2i"))
    prefills = ("prefill_edit", "prefill_edit_cfg")
    edit_edges = media + [E(f"input.{p}", f"image_in.{p}") for p in ("media", "media_parts")]
    edit_edges += [E("image_in.image", "encode.image")]
    for p in prefills:
        edit_edges += [E("input.prompt", f"{p}.prompt"), *encoded(p), E("encode.latent", f"{p}.latent")]
    edit = Walk("edit", Sequential(Parallel(Sequential("image_in", "encode"), "media_encoder"),
                                   *_image_tail("prefill_edit", max_steps)), edit_edges + _image_edges("prefill_edit"))
    return [understand, chat, generate, edit, _edit_held(max_steps)]


def _edit_held(max_steps: int) -> Walk:
    edges = [E(f"input.{p}", f"image_in.{p}") for p in ("media", "media_parts")] + [E("image_in.image", "encode.image")]
    for p in HELD_PREFILLS:
        edges += [E("input.prompt", f"{p}.prompt"), E("encode.latent", f"{p}.latent")]
    return Walk("edit_held", Sequential("image_in", "encode", *_image_tail(HELD_PREFILLS[0], max_steps)),
                edges + _image_edges(HELD_PREFILLS[0]))


def _first_walk(inputs, wanted) -> str:
    has_media = "media" in inputs
    if wanted and "image" not in wanted and "progress" not in wanted:
        return "understand" if has_media else "chat"
    if has_media and is_held(inputs):
        return "edit_held"
    return "edit" if has_media else "generate"


def bagel_graph(name: str = "bagel", max_steps: int = MAX_STEPS) -> WalkGraph:
    return WalkGraph(name, _nodes(), _walks(max_steps), first_walk=_first_walk)


def placement_dict(graph: WalkGraph, backbone: str, encoder: str, vae: str, backbone_cfg: str | None = None) -> dict:
    """A deployment mapping: the backbone's nodes on `backbone`, the cfg branches (and
    their prefills) on `backbone_cfg` when given (CFG-parallel), the ViT on `encoder`,
    encode / decode on `vae`."""
    endpoints = {"bagel": backbone, "encoder": encoder, "vae": vae, "bagel_cfg": backbone_cfg or backbone}
    services: dict[str, dict] = {}
    service_of: dict[str, str] = {}
    for role, endpoint in endpoints.items():  # equal endpoints: one service (co-location)
        name = next((s for s, spec in services.items() if spec["replicas"] == [endpoint]), role)
        services.setdefault(name, {"replicas": [endpoint]})
        service_of[role] = name
    placement = {n: service_of["bagel"] for n in BACKBONE_NODES} | {n: service_of["bagel_cfg"] for n in CFG_NODES}
    placement |= {"media_encoder": service_of["encoder"], "encode": service_of["vae"], "decode": service_of["vae"]}
    return {"model": graph.name, "services": services, "placement": placement}


def input_specs(graph: WalkGraph) -> dict:
    from core.input_spec import MEDIA_SPECS, InputSpec, specs_for

    return specs_for(graph, {"prompt": InputSpec("bytes", 1, what="UTF-8 prompt"), **MEDIA_SPECS})


def bagel_model(name: str, placement, max_steps: int | None = None):
    """What the registry builds for a deployment: the graph on `placement`."""
    from conductor.model import ServedModel
    from engine.models.bagel.params import BagelParams
    from pipelines.prompt_format import Utf8Prompt

    graph = bagel_graph(name, **({"max_steps": max_steps} if max_steps else {}))
    return ServedModel(name, graph, placement, params=BagelParams, output_kinds=OUTPUT_KINDS,
                       tokenizer_node="answer", prompt=Utf8Prompt("prompt"), input_specs=input_specs(graph))


def served_model(name: str, backbone: str, encoder: str, vae: str, backbone_cfg: str | None = None):
    """The conductor's ServedModel on these endpoints (tests, benches)."""
    from conductor.placement import Placement

    graph = bagel_graph(name)
    return bagel_model(name, Placement.from_dict(placement_dict(graph, backbone, encoder, vae, backbone_cfg)))
