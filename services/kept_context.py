"""Kept KV contexts between a node run and its engine: what the conductor asked
(OpenNode.contexts) as the engine's request, and what the engine did as the metadata of
the run's outputs (the conductor reads it for Usage and for routing: RequestRun.note)."""
from __future__ import annotations


def engine_context(item):
    """The engine's context request for a run (None: the run names no context). Only a
    run's first context use is an engine's: one engine keeps one context per request."""
    if not item.contexts:
        return None
    from engine.contexts import ContextRequest

    use = item.contexts[0]
    return ContextRequest(owner=use.owner, context_id=use.read_id or None, keep=bool(use.keep_id),
                          keep_id=use.keep_id or None)


SUMMARY_NAMES = 256  # block names a prefix summary carries (conductor.prefix_directory keeps as many)


def prefix_summary(engine) -> dict | None:
    """What a replica publishes about the blocks it holds, for the conductor to choose the
    replica with the longest cached prefix of a prompt (None: the engine caches nothing)."""
    if not engine.scheduler.cache.enabled:
        return None
    return {"seed": engine.prefix_seed.hex(), "block_size": engine.scheduler.pool.block_size,
            "names": [n.hex() for n in engine.cached_block_hashes(SUMMARY_NAMES)]}


def context_report(out, prefill: bool = False, summary: dict | None = None) -> dict:
    """Metadata of the output made from engine step output `out`: on the prompt's first
    token, how many prompt tokens came from the cache (of how many) and the replica's
    prefix summary; on the request's last output, the id of the context it kept. Empty
    otherwise (outputs without metadata travel batched)."""
    report = {}
    if prefill:
        report.update(cached_prompt_tokens=out.num_cached_prompt_tokens, prompt_tokens=out.num_prompt_tokens)
    if summary is not None:
        report["prefix_summary"] = summary
    if getattr(out, "context_id", None):
        report["context_kept"] = out.context_id
    return report
