"""Text to image (SD3): encode -> Loop(steps){ Parallel(cond, uncond) -> combine } -> VAE.

Walks (the first is picked by the request's inputs):
  image_gen         prompt (UTF-8 bytes, uint8 [n]) -> CLIP-L, CLIP-G, T5 and the initial
                    latent in parallel -> join_text -> the denoising loop -> decode
  image_gen_embeds  precomputed prompt_embeds, pooled_prompt_embeds, negative_prompt_embeds,
                    negative_pooled_prompt_embeds -> init_latent -> the loop -> decode

The loop spans services (the branches may sit on two dit replicas: CFG-parallel), so
the conductor drives it one iteration at a time; each request stops after its own
params.steps (combine.done), and every iteration's combine.step [k + 1, steps] is
streamed to the client as a step event. The fused variant (fused=True) is the same
computation as one node, denoise_loop, whose loop runs inside one DiT replica (no
conductor round trip per step; no CFG-parallel). Outputs: step, image (uint8 [H, W, 3]) and,
with params.return_float, image_float ([H, W, 3] in [0, 1]).

Per-request params (engine.models.sd3.params.ImageParams): steps, guidance, renorm, width,
height, seed, negative_prompt, max_sequence_length, return_float.
"""
from __future__ import annotations

from graph.composites import DynamicLoop, Parallel, Sequential, StopRule
from graph.edge import GraphEdge as E
from graph.node import GraphNode as N
from graph.walk import WalkGraph
from graph.walk import Walk
from engine.models.sd3.params import MAX_PROMPT_BYTES, MAX_STEPS, ImageParams

DENOISE_LOOP = "denoise"
EMBED_INPUTS = ("prompt_embeds", "pooled_prompt_embeds", "negative_prompt_embeds", "negative_pooled_prompt_embeds")
TEXT_NODES = ("clip_l", "clip_g", "t5", "join_text")
JOINED = ("join_text.prompt_embeds", "join_text.pooled", "join_text.negative_prompt_embeds",
          "join_text.negative_pooled")
BRANCH_INPUTS = ("denoise_cond.embeds", "denoise_cond.pooled", "denoise_uncond.embeds", "denoise_uncond.pooled")
FUSED_INPUTS = ("denoise_loop.embeds", "denoise_loop.pooled", "denoise_loop.negative_embeds",
                "denoise_loop.negative_pooled")
# Runs that are DiT forwards: on a dlo_group (AllGather offload) each pairs with one forward
# on every other rank, so the conductor pads them to every rank (conductor.lockstep).
LOCKSTEP_NODES = ("denoise_cond", "denoise_uncond")
# The walks' outputs (conductor.model.OUTPUT_KINDS): step [k, steps], image uint8 [H, W, 3],
# image_float [H, W, 3] in [0, 1].
OUTPUT_KINDS = {"step": "progress", "image": "image", "image_float": "image"}


def _nodes(fused: bool) -> list[N]:
    nodes = [
        N("clip_l", ("prompt",), ("embeds", "pooled")),
        N("clip_g", ("prompt",), ("embeds", "pooled")),
        N("t5", ("prompt",), ("embeds",)),
        N("join_text", ("clip_l_embeds", "clip_l_pooled", "clip_g_embeds", "clip_g_pooled", "t5_embeds"),
          ("prompt_embeds", "negative_prompt_embeds", "pooled", "negative_pooled")),
        N("init_latent", (), ("latent",)),
        N("decode", ("latent",), ("image", "image_float")),
    ]
    if fused:
        return nodes + [N("denoise_loop", ("latent", "embeds", "pooled", "negative_embeds", "negative_pooled"),
                          ("step", "latent", "done"))]
    branch = dict(inputs=("latent", "embeds", "pooled"), outputs=("noise",), speculative=False)
    return nodes + [N("denoise_cond", **branch), N("denoise_uncond", **branch),
                    N("combine", ("latent", "cond", "uncond"), ("latent", "step", "done"), speculative=False)]


def _loop(max_steps: int, fused: bool) -> DynamicLoop:
    """Both branches, then the guided Euler update; the latent is carried to the next step.
    Fused: one node whose loop runs inside its DiT replica (the same steps, no round trips)."""
    if fused:
        return DynamicLoop(DENOISE_LOOP, "denoise_loop", max_iters=max_steps,
                           stop=StopRule("denoise_loop.done", stop_token_ids=(1,)))
    carry = [E("combine.latent", f"{n}.latent") for n in ("denoise_cond", "denoise_uncond", "combine")]
    return DynamicLoop(DENOISE_LOOP, Parallel("denoise_cond", "denoise_uncond"), "combine", max_iters=max_steps,
                       stop=StopRule("combine.done", stop_token_ids=(1,)), carry=carry)


def _loop_edges(conditioning: tuple[str, ...], fused: bool) -> list[E]:
    """The loop's inputs (latent, the four conditioning tensors), its outputs and the VAE."""
    update = "denoise_loop" if fused else "combine"
    edges = [E(src, dst) for src, dst in zip(conditioning, FUSED_INPUTS if fused else BRANCH_INPUTS)]
    edges += [E("init_latent.latent", f"{n}.latent")
              for n in (("denoise_loop",) if fused else ("denoise_cond", "denoise_uncond", "combine"))]
    if not fused:
        edges += [E("denoise_cond.noise", "combine.cond"), E("denoise_uncond.noise", "combine.uncond")]
    return edges + [E(f"{update}.step", "output.step"), E(f"{update}.latent", "decode.latent"),
                    E("decode.image", "output.image"), E("decode.image_float", "output.image_float")]


def _text_walk(max_steps: int, fused: bool) -> Walk:
    encode = Parallel("clip_l", "clip_g", "t5", "init_latent")
    edges = [E("input.prompt", f"{n}.prompt") for n in ("clip_l", "clip_g", "t5")]
    edges += [E("clip_l.embeds", "join_text.clip_l_embeds"), E("clip_l.pooled", "join_text.clip_l_pooled"),
              E("clip_g.embeds", "join_text.clip_g_embeds"), E("clip_g.pooled", "join_text.clip_g_pooled"),
              E("t5.embeds", "join_text.t5_embeds")]
    body = Sequential(encode, "join_text", _loop(max_steps, fused), "decode")
    return Walk("image_gen", body, edges + _loop_edges(JOINED, fused))


def _embeds_walk(max_steps: int, fused: bool) -> Walk:
    inputs = tuple(f"input.{name}" for name in EMBED_INPUTS)
    body = Sequential("init_latent", _loop(max_steps, fused), "decode")
    return Walk("image_gen_embeds", body, _loop_edges(inputs, fused))


def _first_walk(inputs, wanted) -> str:
    return "image_gen_embeds" if "prompt_embeds" in inputs else "image_gen"


def text_to_image_graph(name: str = "sd3", max_steps: int = MAX_STEPS, fused: bool = False) -> WalkGraph:
    """fused=False: the CFG branches are nodes the conductor joins (one replica or two);
    fused=True: the loop runs inside one DiT replica (node denoise_loop, inner loop)."""
    walks = [_text_walk(max_steps, fused), _embeds_walk(max_steps, fused)]
    return WalkGraph(name, _nodes(fused), walks, first_walk=_first_walk)


def placement_dict(graph: WalkGraph, text: str, dit: str, vae: str, dit_uncond: str | None = None,
                   dlo_group: tuple[str, ...] = ()) -> dict:
    """A deployment mapping for `graph`: text encoders, DiT and VAE services by endpoint.
    With `dit_uncond`, the unconditional branch runs on that second dit replica
    (CFG-parallel); equal endpoints share one service (co-location, `starmesh serve sd3`).
    `dlo_group`: the dit endpoints of a dlo_group in rank order (lockstep group "dlo"; an
    endpoint no node is placed on still joins, as service dit_rank<r>)."""
    if (dit_uncond or dlo_group) and "denoise_uncond" not in graph.node_by_name:
        raise ValueError("CFG-parallel and dlo groups need the branch nodes: build the graph with fused=False")
    endpoints = {"text": text, "dit": dit, "vae": vae, **({"dit_uncond": dit_uncond} if dit_uncond else {})}
    endpoints.update({f"dit_rank{r}": e for r, e in enumerate(dlo_group) if e not in endpoints.values()})
    services: dict[str, dict] = {}
    service_of: dict[str, str] = {}
    for role, endpoint in endpoints.items():
        name = next((s for s, spec in services.items() if spec["replicas"] == [endpoint]), role)
        services.setdefault(name, {"replicas": [endpoint]})
        service_of[role] = name
    role = {n: "text" for n in TEXT_NODES} | {"decode": "vae"}
    if dit_uncond:
        role["denoise_uncond"] = "dit_uncond"
    placement = {n.name: service_of[role.get(n.name, "dit")] for n in graph.nodes}
    out = {"model": graph.name, "services": services, "placement": placement}
    if dlo_group:
        by_endpoint = {spec["replicas"][0]: name for name, spec in services.items()}
        out["lockstep_groups"] = {"dlo": [by_endpoint[e] for e in dlo_group]}
    return out


def served_model(name: str, text: str, dit: str, vae: str, dit_uncond: str | None = None,
                 fused: bool = False, max_steps: int = MAX_STEPS, dlo_group: tuple[str, ...] = ()):
    """The conductor's ServedModel: the graph placed on these endpoints (dlo_group: see
    placement_dict)."""
    from conductor.placement import Placement

    graph = text_to_image_graph(name, max_steps, fused)
    placement = Placement.from_dict(placement_dict(graph, text, dit, vae, dit_uncond, tuple(dlo_group)))
    return image_model(name, graph, placement, fused)


def image_model(name: str, graph: WalkGraph, placement, fused: bool):
    """A text-to-image graph as the conductor serves it (fused: the loop runs inside its DiT
    replica; else the branch runs are padded across a dlo_group's ranks)."""
    from conductor.model import ServedModel
    from pipelines.prompt_format import Utf8Prompt

    return ServedModel(name, graph, placement, inner_loops={DENOISE_LOOP} if fused else (),
                       lockstep_nodes=() if fused else LOCKSTEP_NODES, params=ImageParams,
                       output_kinds=OUTPUT_KINDS, prompt=Utf8Prompt("prompt"), input_specs=input_specs())


def input_specs() -> dict:
    """The walks' inputs: the prompt's UTF-8 bytes (bounded before any encoder tokenizes
    them), or the four precomputed conditioning tensors (embeds [B, L, D], pooled [B, P])."""
    from core.input_spec import InputSpec

    embeds, pooled = InputSpec("float", 3, what="[B, L, D]"), InputSpec("float", 2, what="[B, P]")
    return {"prompt": InputSpec("bytes", 1, max_bytes=MAX_PROMPT_BYTES, what="UTF-8 prompt"),
            "prompt_embeds": embeds, "negative_prompt_embeds": embeds,
            "pooled_prompt_embeds": pooled, "negative_pooled_prompt_embeds": pooled}


def sd3_model(name: str, placement, fused: bool = False, max_steps: int | None = None):
    """What the registry builds for a deployment: the graph on `placement`; `fused` runs
    the denoising loop inside one DiT replica, which a lockstep group's replicas cannot."""
    from core.errors import GraphError

    graph = text_to_image_graph(name, fused=fused, **({"max_steps": max_steps} if max_steps else {}))
    if fused and placement.lockstep_groups:  # the fused loop runs both branches on one replica
        raise GraphError(f"models.{name}.options.fused: the fused denoising loop cannot run on a dlo_group "
                         f"({sorted(placement.lockstep_groups)}), whose replicas step in lockstep")
    return image_model(name, graph, placement, fused)


def in_process_graph(name: str) -> tuple[WalkGraph, set[str]]:
    """(graph, inner loops) when every node runs in one process (`starmesh imagine
    --checkpoint`): the denoising loop fused into the DiT."""
    return text_to_image_graph(name, fused=True), {DENOISE_LOOP}
