"""One request's contexts on a backbone (kv_contexts.BagelKV), built by upstream's rules.

    gen       everything the request put in;
    cfg_text  gen as it was before the last text input (after an image: gen with it);
    cfg_img   the text inputs only, at their own rope positions.

A guided request (an image is wanted) keeps all three; an understanding request only
gen. While no image has gone in, cfg_img equals gen, so it is not computed: it becomes a
fork of gen when the first image arrives (or at the end). Every fork shares its blocks
with gen; only the rows that differ are computed and stored.

Text is decoded with text_decode.py (start_decode / end_decode, so a caller may step
several requests' decodes together). With `batch` set (an ExtendBatch), inputs wait for
its flush: several requests' inputs go in in one forward.
"""
from __future__ import annotations

import torch

from engine.models.bagel import GENERATION
from engine.models.bagel.extend_batch import ExtendBatch
from engine.models.bagel.kv_contexts import BagelKV, KVContext
from engine.models.bagel.rows import image_rows, text_rows, vae_rows, vit_rows
from engine.models.bagel.text_decode import TextDecode, decode_alone

GEN, CFG_TEXT, CFG_IMG = "gen", "cfg_text", "cfg_img"
PLAN = "plan"  # a fork of gen a plan or an answer is decoded on


class RequestContexts:
    def __init__(self, kv: BagelKV, request_id: str, markers: tuple[int, int], guided: bool, kept=None) -> None:
        """kept: a kept context (engine/models/bagel/kept.py) the request continues: gen
        starts as its gen, cfg_img as its texts, both shared block for block."""
        self.kv, self.request_id, self.markers, self.guided = kv, request_id, markers, guided
        self.model = kv.model
        self.texts: list[list[int]] = [] if kept is None else list(kept.texts)  # what cfg_img holds, in order
        self.images: list[str] = [] if kept is None else list(kept.images)      # digests of gen's ViT images
        self.kept_images = frozenset(self.images)  # those the continued context holds already
        self._answer_fed = 0
        self.batch: ExtendBatch | None = None  # set: extends wait for its flush (side-by-side prefills)
        if kept is None:
            self.gen = kv.new(self.tag(GEN))
            self._img_twin = guided  # cfg_img holds what gen holds (not built yet)
        else:
            self.gen = kv.adopt(self.tag(GEN), *kept.gen)
            self._img_twin = False
            if guided:
                kv.adopt(self.tag(CFG_IMG), *kept.text_only)
        self.num_kept_rows = self.gen.num_cached_tokens  # gen's rows the kept context gave (not computed)
        if guided and kept is not None:  # replaced by the first input (every request has one)
            kv.fork(self.tag(GEN), self.tag(CFG_TEXT))
        elif guided:
            kv.new(self.tag(CFG_TEXT))

    def tag(self, name: str) -> tuple[str, str]:
        return (self.request_id, name)

    def context(self, name: str) -> KVContext:
        return self.kv.get(self.tag(name))

    # -- inputs ------------------------------------------------------------------------
    def add_text(self, ids: list[int]) -> None:
        """Framed text ids (im_start ... im_end) into gen and cfg_img; cfg_text = gen before."""
        if self.guided:
            self._fork(GEN, CFG_TEXT)
        self.add_system(ids)

    def add_system(self, ids: list[int]) -> None:
        """A system prompt: gen and cfg_img, not cfg_text (upstream puts it before the inputs)."""
        self.texts.append(list(ids))
        items = [(self.gen, text_rows(self.model, ids, self.gen.rope))]
        if self.guided and not self._img_twin:
            img = self.context(CFG_IMG)
            items.append((img, text_rows(self.model, ids, img.rope)))
        self._extend(items)

    def add_image(self, vae: tuple[torch.Tensor, torch.Tensor] | None, vit_tokens: torch.Tensor | None,
                  digest: str = "") -> None:
        """An image into gen: its VAE latent (patches [N, p*p*C], position ids [N]) first,
        then its ViT tokens [M, hidden]; cfg_text = gen with it, cfg_img without. digest
        names the image (a continuation knows its ViT tokens are in gen)."""
        if self.guided and self._img_twin:
            self._fork(GEN, CFG_IMG)
            self._img_twin = False
        if vae is not None:
            self._extend([(self.gen, vae_rows(self.model, self.markers, vae[0], vae[1], self.gen.rope))])
        if vit_tokens is not None:
            self._extend([(self.gen, vit_rows(self.model, self.markers, vit_tokens, self.gen.rope))])
            self.images.append(digest)
        if self.guided:
            self._fork(GEN, CFG_TEXT)

    def add_plan(self, ids: list[int]) -> None:
        """A decoded plan (framed ids) into gen only."""
        self.finish()
        self._extend([(self.gen, text_rows(self.model, ids, self.gen.rope))])

    def add_answer_end(self, start_id: int, ids: list[int], end_id: int) -> None:
        """After an answer decoded on gen (its im_start and ids are in gen): gen gets the
        closing im_end, and the framed answer counts among the texts (a kept context reads both)."""
        unfed = list(ids[self._answer_fed:])  # a decode stopped by its length did not feed its last id
        self._extend([(self.gen, text_rows(self.model, [*unfed, end_id], self.gen.rope))])
        self.texts.append([start_id, *ids, end_id])

    def finish(self) -> None:
        """The inputs are in: cfg_img, if still gen's twin, becomes a fork of it."""
        if self.guided and self._img_twin:
            self._fork(GEN, CFG_IMG)
            self._img_twin = False

    def _extend(self, items) -> None:
        """items: (context, (rows, its next rope)); computed now, or at the batch's flush."""
        rows = [(ctx, r) for ctx, (r, _) in items]
        if self.batch is not None:
            self.batch.add(rows)
        else:
            self.kv.extend(rows)
        for ctx, (_, rope) in items:
            ctx.rope = rope

    def _fork(self, source: str, name: str) -> KVContext:
        if self.batch is not None:  # the fork shares source's blocks: their rows first
            self.batch.flush()
        return self.kv.fork(self.tag(source), self.tag(name))

    # -- outputs ---------------------------------------------------------------------------
    def decode(self, start_id: int, end_id: int, max_new_tokens: int, on_fork: bool) -> list[int]:
        """Greedy text from gen (or from a fork of it, left as it was): fed start_id, up to
        max_new_tokens ids, stopping before end_id."""
        decode = self.start_decode(start_id, end_id, max_new_tokens, on_fork)
        try:
            return decode_alone(self.kv, decode)
        finally:
            self.end_decode(decode)

    def start_decode(self, start_id: int, end_id: int, max_new_tokens: int, on_fork: bool) -> TextDecode:
        """A decode from gen, or from a fork of it (a plan: gen is left as it was), for
        text_decode.decode_step to advance, alone or beside other requests' decodes;
        end_decode() when it is done (or abandoned)."""
        ctx = self._fork(GEN, PLAN) if on_fork else self.gen
        return TextDecode(ctx, start_id, end_id, max_new_tokens)

    def end_decode(self, decode: TextDecode) -> None:
        """A decode on gen leaves its answer's fed ids there (add_answer_end closes it); a
        plan's fork goes."""
        if decode.ctx is self.gen:
            self._answer_fed = decode.fed
        else:
            self.kv.free(decode.ctx.tag)

    def velocities(self, names: tuple[str, ...], tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The latent queries' input rows tokens [N, hidden] over the named contexts, one
        forward, nothing stored -> {name: velocity [N, p*p*C]}."""
        ctxs = [self.context(n) for n in names]
        items = [(c, image_rows(self.model, self.markers, tokens, GENERATION, c.rope)[0]) for c in ctxs]
        hidden = self.kv.query(items)
        return {n: self.model.latent_io.velocity(h[1:-1]) for n, h in zip(names, hidden)}

    def free(self) -> None:
        self.kv.free_request(self.request_id)
