"""The front door's parsing of a GenerateRequest, off the event loop every other request
shares: tokenizing a text, rendering a chat template, copying media parts, checking the
ids of a named tensor cost milliseconds to seconds, and a stalled event loop stalls every
stream of the conductor (heartbeats unread, health checks unanswered).

    intake = RequestIntake(limits)                          # IntakeConfig() by default
    parsed = await intake.parse(request, model, tokenizer)  # InvalidArgument naming the field
    intake.close()

On the event loop, only counts: messages, content parts and the text's characters
(conductor.prompt_size), so a text past its limit is refused at once, by its size,
before a worker takes it. A request with nothing to tokenize and little to check (no
text or messages; a few input_ids; named inputs of a few KiB) is parsed there too: the
thread hop (a worker woken, its answer handed back to the loop) would cost more CPU than
its parse.
Everything else runs conductor.generate_request.parse_generate_request on a pool of
`workers` threads; the tokenizers release the GIL while they tokenize, so workers take
cores, not the loop's turn. At most `max_waiting` requests are parsed or wait for a
worker; one more is refused with RESOURCE_EXHAUSTED and a retry hint, never queued
without bound. A request whose call is cancelled while it waits leaves the queue.

A worker hands its result or its refusal to the event loop through a plain loop future,
and a refusal without its traceback (nor the one of an error it was raised from): the
traceback's frames hold the request (up to the receive limit), and the futures
asyncio.wrap_future chains keep each other (and so the refusal) in a reference cycle
until a garbage collection, which a burst of refused requests outpaces (measured: +390
MB of conductor RSS over 1,000 fuzzed messages).
"""
from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from conductor.generate_request import GenerateInputs, parse_generate_request
from conductor.input_limits import InputLimits, check_counts
from conductor.model import ServedModel
from conductor.prompt_size import check_prompt_size
from core.errors import Overloaded, StarmeshError


def default_workers() -> int:
    """Half the cores, at least 2 (one long text leaves a worker for the others), at most 8."""
    return min(8, max(2, (os.cpu_count() or 2) // 2))


@dataclass(frozen=True)
class IntakeConfig:
    """workers: requests parsed at once; max_waiting: parsed or waiting for a worker (one
    more is refused: RESOURCE_EXHAUSTED, retry after retry_after_ms); a request without
    text or messages, with at most inline_ids input_ids and named inputs of at most
    inline_bytes (16 tensors at most), is parsed on the event loop."""

    workers: int = field(default_factory=default_workers)
    max_waiting: int = 256
    inline_ids: int = 4096
    inline_bytes: int = 16384
    retry_after_ms: int = 200

    def __post_init__(self) -> None:
        check_counts(self, "intake")


class RequestIntake:
    def __init__(self, limits: InputLimits, config: IntakeConfig | None = None) -> None:
        self.limits = limits
        self.config = config or IntakeConfig()
        self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="intake")
        self._lock = threading.Lock()  # the count is raised on the loop, lowered by a worker
        self.waiting = 0  # requests parsed or waiting for a worker

    async def parse(self, req, model: ServedModel, tokenizer=None) -> GenerateInputs:
        """req: a starmesh.v1.GenerateRequest for `model`; tokenizer: the model's (or None)."""
        check_prompt_size(req, model, self.limits)  # counts only: past the limit, no worker is taken
        if self._is_light(req):
            return parse_generate_request(req, model, self.limits, tokenizer)
        with self._lock:
            if self.waiting >= self.config.max_waiting:
                raise Overloaded(f"the conductor is parsing {self.waiting} requests (intake max_waiting "
                                 f"{self.config.max_waiting}); retry", self.config.retry_after_ms)
            self.waiting += 1
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        try:
            work = self._pool.submit(_parse, loop, answer, req, model, self.limits, tokenizer)
        except BaseException:
            self._finished(None)
            raise
        work.add_done_callback(self._finished)  # when the work ends, even for a call cancelled meanwhile
        try:
            ok, value = await answer
        except asyncio.CancelledError:
            work.cancel()  # not started yet: it never runs
            raise
        del answer  # holds the outcome: with `value`, it would tie a refusal to this frame
        if ok:
            return value
        try:
            raise value
        finally:
            del value  # the refusal's traceback holds this frame: no cycle back to the refusal

    def _is_light(self, req) -> bool:
        config = self.config
        if req.text or len(req.messages) or len(req.input_ids) > config.inline_ids:
            return False
        named = req.inputs
        return not named or (len(named) <= 16 and sum(nt.ByteSize() for nt in named) <= config.inline_bytes)

    def _finished(self, _work) -> None:
        with self._lock:
            self.waiting -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _parse(loop: asyncio.AbstractEventLoop, answer: asyncio.Future, *args) -> None:
    """On a worker: parse_generate_request(*args), its (True, result) or (False, error)
    set on `answer` in the loop. A refusal goes without its traceback (see above)."""
    try:
        outcome = (True, parse_generate_request(*args))
    except StarmeshError as e:
        e.__context__ = e.__cause__ = None  # an inner error's traceback reaches this frame too
        outcome = (False, e.with_traceback(None))
    except BaseException as e:  # a bug: logged with its traceback where the call ends
        outcome = (False, e)
    try:
        loop.call_soon_threadsafe(_answer, answer, outcome)
    except RuntimeError:  # the loop closed meanwhile: nobody waits
        pass


def _answer(answer: asyncio.Future, outcome: tuple) -> None:
    if not answer.done():  # a cancelled call's answer is dropped
        answer.set_result(outcome)
