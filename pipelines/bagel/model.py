"""BAGEL as the conductor serves it: one backbone, five walks, CFG branches that may sit
on two backbone replicas.

Walks (picked by the request's inputs and the outputs it wants):
  understand  media + prompt, text wanted -> media_encoder (ViT) -> prefill_und -> answer
  chat        prompt, text wanted         -> prefill_chat -> answer
  generate    prompt                      -> prefill_t2i (+ prefill_t2i_cfg) -> plan -> init_latent
                                             -> the denoising loop -> decode
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

The denoising loop takes one of two forms, picked from the placement (bagel_model):
- fused, when velocity_gen, velocity_cfg_text and velocity_cfg_img sit on one service (the
  default deployment): Loop{ denoise }, one node whose loop runs inside that backbone
  replica (an inner loop, as its text decodes are): every update queries the branches it
  needs in one forward, batched with every other request's loop in flight, and streams
  step [k + 1, steps - 1]; no conductor round trip per update;
- fan-out (CFG-parallel: the branches on two replicas): Loop{ Parallel(velocity_*) ->
  combine }, each iteration fans out to the three velocity nodes (a branch the step does
  not need answers at once with nothing) and joins in combine (guidance, renorm, the
  Euler step); the conductor drives the loop and streams combine's step.
Both compute the same update (services/bagel/model_nodes.py). Where the branches run
decides where the contexts are built: prefill_* runs where velocity_gen does and builds
gen, prefill_*_cfg where the cfg branches do (on one replica the second prefill finds the
contexts built), so no KV moves. `denoise` reads both prefills' size (size_cfg orders it
after the cfg prefill, which claims the cfg contexts it reads).

Outputs: text (the answer, or the plan), step, image (uint8 [H, W, 3]), image_float.
Params: engine.models.bagel.params.BagelParams.
"""
from __future__ import annotations

from graph.composites import DynamicLoop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import Walk, WalkGraph
from core.errors import GraphError
from core.held_media import is_held
from engine.models.bagel.params import MAX_STEPS

DENOISE_LOOP = "denoise"
BRANCHES = ("gen", "cfg_text", "cfg_img")
VELOCITY = tuple(f"velocity_{b}" for b in BRANCHES)
ENCODED = ("rows", "deepstack", "parts", "seconds")
OUTPUT_KINDS = {"text": "text", "step": "progress", "image": "image", "image_float": "image"}
HELD_PREFILLS = ("prefill_edit_held", "prefill_edit_held_cfg")
BACKBONE_NODES = ("image_in", "prefill_chat", "prefill_und", "answer", "prefill_t2i", "prefill_edit",
                  "prefill_edit_held", "plan", "init_latent", "velocity_gen", "combine", "denoise")
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
        N("denoise", ("latent", "size", "size_cfg"), ("step", "latent", "done"), **loop),
        N("decode", ("latent",), ("image", "image_float")),
    ]


def _loop(max_steps: int, fused: bool) -> DynamicLoop:
    if fused:  # run inside the backbone replica (inner_loops): it stops itself after params.steps - 1
        return DynamicLoop(DENOISE_LOOP, "denoise", max_iters=max_steps,
                           stop=StopRule("denoise.done", stop_token_ids=(1,)))
    carry = [E("combine.latent", f"{n}.latent") for n in (*VELOCITY, "combine")]
    return DynamicLoop(DENOISE_LOOP, Parallel(*VELOCITY), "combine", max_iters=max_steps,
                       stop=StopRule("combine.done", stop_token_ids=(1,)), carry=carry)


def _image_edges(prefill: str, fused: bool) -> list[E]:
    """From the prefills to the image: plan on gen's replica, the loop, the VAE."""
    edges = [E(f"{prefill}.size", "plan.size"), E("plan.text", "output.text"), E("plan.size", "init_latent.size")]
    if fused:
        edges += [E("init_latent.latent", "denoise.latent"), E("plan.size", "denoise.size"),
                  E(f"{prefill}_cfg.size", "denoise.size_cfg")]
    else:
        edges += [E("init_latent.latent", f"{n}.latent") for n in (*VELOCITY, "combine")]
        edges += [E("plan.size", "velocity_gen.size"), E("plan.size", "combine.size")]
        edges += [E(f"{prefill}_cfg.size", f"{v}.size") for v in VELOCITY[1:]]
        edges += [E(f"velocity_{b}.v", f"combine.{b}") for b in BRANCHES]
    update = "denoise" if fused else "combine"
    return edges + [E(f"{update}.step", "output.step"), E(f"{update}.latent", "decode.latent"),
                    E("decode.image", "output.image"), E("decode.image_float", "output.image_float")]


def _image_tail(prefill: str, max_steps: int, fused: bool) -> tuple:
    return Parallel(prefill, f"{prefill}_cfg"), "plan", "init_latent", _loop(max_steps, fused), "decode"


def _walks(max_steps: int, fused: bool) -> list[Walk]:
    media = [E(f"input.{p}", f"media_encoder.{p}") for p in ("media", "media_parts")]
    encoded = lambda dst: [E(f"media_encoder.{p}", f"{dst}.{p}") for p in ENCODED]  # noqa: E731
    understand = Walk("understand", Sequential("media_encoder", "prefill_und", "answer"),
                      media + [E("input.prompt", "prefill_und.prompt"), *encoded("prefill_und"),
                               E("prefill_und.ready", "answer.ready"), E("answer.text", "output.text")])
    chat = Walk("chat", Sequential("prefill_chat", "answer"),
                [E("input.prompt", "prefill_chat.prompt"), E("prefill_chat.ready", "answer.ready"),
                 E("answer.text", "output.text")])
    generate = Walk("generate", Sequential(*_image_tail("prefill_t2i", max_steps, fused)),
                    [E("input.prompt", f"{p}.prompt") for p in ("prefill_t2i", "prefill_t2i_cfg")]
                    + _image_edges("prefill_t2i", fused))
    prefills = ("prefill_edit", "prefill_edit_cfg")
    edit_edges = media + [E(f"input.{p}", f"image_in.{p}") for p in ("media", "media_parts")]
    edit_edges += [E("image_in.image", "encode.image")]
    for p in prefills:
        edit_edges += [E("input.prompt", f"{p}.prompt"), *encoded(p), E("encode.latent", f"{p}.latent")]
    edit = Walk("edit", Sequential(Parallel(Sequential("image_in", "encode"), "media_encoder"),
                                   *_image_tail("prefill_edit", max_steps, fused)),
                edit_edges + _image_edges("prefill_edit", fused))
    return [understand, chat, generate, edit, _edit_held(max_steps, fused)]


def _edit_held(max_steps: int, fused: bool) -> Walk:
    edges = [E(f"input.{p}", f"image_in.{p}") for p in ("media", "media_parts")] + [E("image_in.image", "encode.image")]
    for p in HELD_PREFILLS:
        edges += [E("input.prompt", f"{p}.prompt"), E("encode.latent", f"{p}.latent")]
    return Walk("edit_held", Sequential("image_in", "encode", *_image_tail(HELD_PREFILLS[0], max_steps, fused)),
                edges + _image_edges(HELD_PREFILLS[0], fused))


def _first_walk(inputs, wanted) -> str:
    has_media = "media" in inputs
    if wanted and "image" not in wanted and "progress" not in wanted:
        return "understand" if has_media else "chat"
    if has_media and is_held(inputs):
        return "edit_held"
    return "edit" if has_media else "generate"


def bagel_graph(name: str = "bagel", max_steps: int = MAX_STEPS, fused: bool = False) -> WalkGraph:
    """fused: the denoising loop is the `denoise` node (run inside its backbone replica,
    inner loop DENOISE_LOOP); else the fan-out to the velocity nodes and combine. Either
    graph has every node, so one placement serves both."""
    return WalkGraph(name, _nodes(), _walks(max_steps, fused), first_walk=_first_walk)


def branch_service(placement) -> str | None:
    """The one service every guidance branch's velocity node is placed on, else None."""
    services = {placement.node_to_service.get(v) for v in VELOCITY}
    return services.pop() if len(services) == 1 else None


def with_denoise(placement):
    """`placement` with `denoise` on the service of the guidance branches when they share
    one and the file does not place it (a deployment written before the fused loop)."""
    import dataclasses

    service = branch_service(placement)
    if "denoise" in placement.node_to_service or service is None:
        return placement
    return dataclasses.replace(placement, node_to_service={**placement.node_to_service, "denoise": service})


def fuses(placement) -> bool:
    """Whether `placement` (conductor.placement.Placement) runs every guidance branch on one
    service, where the loop then runs (`denoise` must be placed there: GraphError naming
    placement.denoise otherwise)."""
    service = branch_service(placement)
    if service is None:
        return False
    if placement.node_to_service.get("denoise") != service:
        raise GraphError(f"placement.denoise: the guidance branches all run on service {service}, where the "
                         f"denoising loop then runs: place denoise there (it is on "
                         f"{placement.node_to_service.get('denoise')})")
    return True


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


def bagel_model(name: str, placement, max_steps: int | None = None, fused: bool | None = None):
    """What the registry builds for a deployment: the graph on `placement`, its denoising
    loop fused into the backbone when the placement puts every branch on one service
    (fuses), else fanned out. fused=False (options.fused) keeps the fan-out anyway;
    fused=True where the branches are split is refused, named."""
    from conductor.model import ServedModel
    from engine.models.bagel.params import BagelParams
    from pipelines.prompt_format import Utf8Prompt

    placement = with_denoise(placement)
    one_service = fuses(placement)
    if fused and not one_service:
        raise GraphError(f"models.{name}.options.fused: the fused denoising loop runs every guidance branch on "
                         "one backbone replica; this placement splits velocity_gen, velocity_cfg_text and "
                         "velocity_cfg_img")
    fused = one_service if fused is None else fused
    graph = bagel_graph(name, fused=fused, **({"max_steps": max_steps} if max_steps else {}))
    return ServedModel(name, graph, placement, inner_loops={DENOISE_LOOP} if fused else (), params=BagelParams,
                       output_kinds=OUTPUT_KINDS, tokenizer_node="answer", prompt=Utf8Prompt("prompt"),
                       input_specs=input_specs(graph))


def served_model(name: str, backbone: str, encoder: str, vae: str, backbone_cfg: str | None = None,
                 fused: bool | None = None):
    """The conductor's ServedModel on these endpoints (tests, benches); fused as bagel_model's."""
    from conductor.placement import Placement

    graph = bagel_graph(name)
    placement = Placement.from_dict(placement_dict(graph, backbone, encoder, vae, backbone_cfg))
    return bagel_model(name, placement, fused=fused)
