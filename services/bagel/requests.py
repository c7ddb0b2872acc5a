"""What the BAGEL component keeps per request: its contexts on this replica and which of
them the request's nodes here read (freed as soon as the last one has been read)."""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.contexts import ContextRequest
from engine.models.bagel.kept import KeptContexts
from engine.models.bagel.kv_contexts import BagelKV
from engine.models.bagel.params import BagelParams
from engine.models.bagel.request_contexts import CFG_IMG, CFG_TEXT, GEN, RequestContexts

# A prefill node's role: the contexts its replica's velocity nodes will read.
ROLES = {"gen": (GEN,), "cfg": (CFG_TEXT, CFG_IMG)}


@dataclass
class BagelRequest:
    ctx: RequestContexts
    params: BagelParams
    size: tuple[int, int] = (0, 0)                   # (height, width) of the image to make
    claimed: set[str] = field(default_factory=set)   # contexts some node here reads
    read_out: set[str] = field(default_factory=set)  # contexts whose last read is done
    planned: bool = False
    use: ContextRequest | None = None                # the kept context it continues and / or keeps


class RequestTable:
    def __init__(self, kv: BagelKV, markers: tuple[int, int], kept: KeptContexts | None = None) -> None:
        self.kv, self.markers = kv, markers
        self.kept = kept if kept is not None else KeptContexts(kv)
        self.requests: dict[str, BagelRequest] = {}
        self.kept_by: dict[tuple[str, str, tuple], str] = {}  # (request, node, iteration) -> the id it kept

    def get(self, request_id: str) -> BagelRequest | None:
        return self.requests.get(request_id)

    def open(self, request_id: str, params: BagelParams, guided: bool,
             use: ContextRequest | None = None) -> tuple[BagelRequest, bool]:
        """(the request's state, whether it is new: its contexts are still to build);
        use: the kept context it continues (NotFound naming params.context_id) and / or keeps."""
        req = self.requests.get(request_id)
        if req is not None:
            return req, False
        kept = self.kept.get(use.context_id, use.owner) if use is not None and use.context_id else None
        ctx = RequestContexts(self.kv, request_id, self.markers, guided, kept)
        req = self.requests[request_id] = BagelRequest(ctx, params, use=use)
        return req, True

    def read_last(self, request_id: str, name: str, run: tuple) -> None:
        """Context `name` was read for the last time by `run` (node, iteration): once every
        claimed one is, the request's contexts are kept (when asked) and all go."""
        req = self.requests.get(request_id)
        if req is None:
            return
        req.read_out.add(name)
        if req.claimed <= req.read_out:
            self.finish(request_id, run)

    def finish(self, request_id: str, run: tuple) -> None:
        """The request is done here: kept (its use says keep) under the conductor's id, then freed."""
        req = self.requests.get(request_id)
        if req is not None and req.use is not None and req.use.keep:
            self.kept_by[(request_id, *run)] = self.kept.keep(req.ctx, req.use.owner, req.use.keep_id)
        self.drop(request_id)

    def drop(self, request_id: str) -> None:
        req = self.requests.pop(request_id, None)
        if req is not None:
            req.ctx.free()
        else:
            self.kv.free_request(request_id)
