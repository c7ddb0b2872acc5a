"""The CUDA half of ModelRunner.run: one step of the engine on a CUDA device.

ModelRunner builds a step's flat inputs and metadata on the host (numpy), as on CPU,
and hands them here. A step then:
  1. moves them to the device (pinned staging, non_blocking copies);
  2. decode-only steps that fit a captured size replay a CUDA graph
     (engine/cuda_graphs.py); other steps plan FlashInfer from the host metadata
     (reusing the plan made ahead when it matches) and launch the model eagerly;
  3. plans attention for the likely next step (engine/plan_ahead.py) while the GPU
     runs this one: the host is otherwise idle until the logits come back;
  4. copies the sampled rows' logits (and captured hidden states / embeddings) back
     to the host for the sampler: the only point where the host waits for the GPU.

Attention: FlashInfer for fp16/bf16 models when it imports and a smoke test passes;
otherwise the torch backend, run under `torch.device(device)` so the tensors it builds
without a device land on the GPU (a logged fallback: slower, no plan ahead, no graphs).
With FlashInfer the model gets metadata whose slot_mapping is on the device and whose
other fields stay on the host: FlashInfer's forward reads only the slot mapping, and
the page table reaches the device through the plan, without a device sync.

device "cpu" is accepted so CPU tests can drive this path (no pinning, no graphs).
"""
from __future__ import annotations

import logging
from contextlib import nullcontext

import torch

from engine.attention.flashinfer_backend import FlashInferBackend
from engine.attention.metadata import AttentionMetadata
from engine.device_option import to_device
from engine.plan_ahead import predict_next_decode

log = logging.getLogger("engine.cuda")


def flashinfer_backend(model, device: torch.device) -> FlashInferBackend | None:
    """FlashInferBackend for the model, or None (logged) where it cannot serve it."""
    dtype = next(model.parameters()).dtype
    if dtype not in (torch.float16, torch.bfloat16):
        log.warning("attention: FlashInfer runs fp16/bf16, the model is %s; using the torch backend", dtype)
        return None
    try:
        backend = FlashInferBackend.for_config(model.config, device, dtype)
        _smoke_test(backend, model.config.num_kv_heads, model.config.head_dim)
    except Exception as e:  # ImportError, or a kernel that cannot be built/launched here
        log.warning("attention: FlashInfer unavailable (%s: %s); using the torch backend", type(e).__name__, e)
        return None
    backend.num_plans = backend.num_reused = 0  # count the engine's steps only
    return backend


def _smoke_test(backend: FlashInferBackend, num_kv_heads: int, head_dim: int) -> None:
    """One prefill (2 tokens) and one decode (1 token, 3 cached) over a scratch cache: fails
    here, at load, where kernels cannot be compiled or launched, not at the first request."""
    device, block_size = backend.device, 4
    cache = torch.zeros(1, block_size, num_kv_heads, head_dim, dtype=backend.dtype, device=device)
    for query_len in (2, 1):
        meta = AttentionMetadata(query_start_loc=torch.tensor([0, query_len], dtype=torch.int32),
                                 seq_lens=torch.tensor([3], dtype=torch.int32),
                                 block_tables=torch.zeros(1, 1, dtype=torch.int32),
                                 slot_mapping=to_device(torch.arange(3 - query_len, 3), device), block_size=block_size)
        plan = backend.plan(meta)
        q = torch.zeros(query_len, backend.num_heads, head_dim, dtype=backend.dtype, device=device)
        kv = torch.zeros(query_len, num_kv_heads, head_dim, dtype=backend.dtype, device=device)
        backend.forward(plan, q, kv, kv, cache, cache.clone(), head_dim ** -0.5)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_meta(meta: AttentionMetadata, device: torch.device, full: bool) -> AttentionMetadata:
    """meta with its slot_mapping on `device` (and every field when `full`: the torch backend
    indexes the cache with them; building it then syncs once, to validate the counts)."""
    if device.type == "cpu":
        return meta
    move = (lambda t: to_device(t, device)) if full else (lambda t: t)
    return AttentionMetadata(query_start_loc=move(meta.query_start_loc), seq_lens=move(meta.seq_lens),
                             block_tables=move(meta.block_tables), slot_mapping=to_device(meta.slot_mapping, device),
                             block_size=meta.block_size)


class CudaRunner:
    """Owned by a ModelRunner whose device is CUDA (its KV caches live there)."""

    def __init__(self, runner, graph_sizes: list[int]) -> None:
        self.runner, self.model, self.device = runner, runner.model, runner.device
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # FlashInfer and graph capture use the current device's stream
        if getattr(self.model, "offload_backend", None) is None:
            self.model.to(self.device)  # no-op when loaded there (load_model(device=...))
        self.graphs = None
        backend = flashinfer_backend(self.model, self.device) if self.device.type == "cuda" else None
        if backend is not None:
            self.model.set_attention_backend(backend)
            if graph_sizes:
                from engine.cuda_graphs import capture_decode_graphs

                num_blocks = runner.kv_caches[0][0].shape[0] - 1  # the last block is the graphs' scratch block
                self.graphs = capture_decode_graphs(self.model, backend, runner.kv_caches, graph_sizes,
                                                    runner.block_size, num_blocks, runner.capture_layer,
                                                    runner.return_embeddings)
        elif graph_sizes:
            log.warning("CUDA graphs off: they need the FlashInfer backend")

    def run(self, batch, pool, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
            media=None):
        """One step from host inputs (ModelRunner.prepare's) -> ForwardOutput with host logits.
        media (engine.prompt_media.StepMedia): a step with audio/image rows runs eagerly."""
        embeds_in = self.runner.input_embeds(batch)
        keep = [i for i, m in enumerate(batch.sample_mask) if m]  # rows that sample
        if self.graphs is not None and embeds_in is None and media is None and self.graphs.fits(meta):
            logits, hidden, captured, embeds = self.graphs.run(input_ids, positions, meta)  # [n, ...] views
            if len(keep) < meta.num_seqs:
                rows = to_device(torch.tensor(keep, dtype=torch.int64), self.device)
                logits, hidden = logits.index_select(0, rows), hidden.index_select(0, rows)
            hidden = hidden.clone()  # the graph's static output is overwritten by the next replay
        else:
            logits, hidden, captured, embeds = self._eager(input_ids, positions, meta, embeds_in, keep, media)
        self._plan_next(batch, pool)
        return self._output(logits, hidden, captured, embeds, meta)

    def _eager(self, input_ids, positions, meta, embeds_in, keep, media=None) -> tuple:
        backend = self.model.attn_backend
        flashinfer = isinstance(backend, FlashInferBackend)
        ids = to_device(input_ids, self.device)
        pos = to_device(positions if media is None else media.positions, self.device)
        dev_meta = device_meta(meta, self.device, full=not flashinfer)
        if flashinfer:
            backend.plan(dev_meta, meta)  # from the host metadata: no device sync
        rows = meta.last_token_rows  # [S] host
        if len(keep) < meta.num_seqs:
            rows = rows[torch.tensor(keep, dtype=torch.int64)]
        inputs_embeds = None if embeds_in is None else to_device(embeds_in, self.device)
        additions = None
        if media is not None:
            inputs_embeds = media.splice(self.model.embed(ids) if inputs_embeds is None else inputs_embeds)
            additions = [(to_device(r, self.device), to_device(v, self.device)) for r, v in media.additions]
        on_device = nullcontext() if flashinfer or self.device.type == "cpu" else torch.device(self.device)
        with on_device:
            hidden, captured = self.model(ids, pos, dev_meta, self.runner.kv_caches,
                                          capture_layer=self.runner.capture_layer, inputs_embeds=inputs_embeds,
                                          layer_additions=additions)
            if rows.numel() == hidden.shape[0]:
                sampled = hidden
            else:
                sampled = hidden.index_select(0, to_device(rows, self.device))
            logits = self.model.compute_logits(sampled)  # [num_sampled, V] fp32
            embeds = self.model.embed(ids) if self.runner.return_embeddings else None
        return logits, sampled, captured, embeds

    def _plan_next(self, batch, pool) -> None:
        """Plan the likely next step while this one runs (eager FlashInfer steps only: graph
        steps plan at replay, see engine/cuda_graphs.py)."""
        backend = self.model.attn_backend
        if not isinstance(backend, FlashInferBackend):
            return
        predicted = predict_next_decode(batch, pool, self.runner.block_size)
        if predicted is None or (self.graphs is not None and self.graphs.fits(predicted)):
            return
        backend.plan_ahead(predicted)

    def _output(self, logits, hidden, captured, embeds, meta: AttentionMetadata):
        from engine.model_runner import ForwardOutput

        out = ForwardOutput(logits.float().cpu(), hidden)  # waits for the step's kernels
        bounds = meta.query_start_loc.tolist()
        if captured is not None:
            captured = captured.cpu()
            out.hidden = [captured[a:b] for a, b in zip(bounds, bounds[1:])]
        if embeds is not None:
            embeds = embeds.cpu()
            out.embeds = [embeds[a:b] for a, b in zip(bounds, bounds[1:])]
        return out
