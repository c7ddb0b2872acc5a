"""Audio tokens -> SNAC codes, the rule of the reference decoder.

With k the number of codes accepted so far, a token with id >= CUSTOM_TOKEN_BASE
(custom number N = id - CUSTOM_TOKEN_BASE) gives c = N - 10 - (k mod 7) * 4096; it is
accepted (k advances) only if c > 0. Other ids and c <= 0 (so also code 0) are skipped.
A token of a later group is accepted with a code >= 4096: out of range, it spoils the
windows that hold it (windows.py). Seven accepted codes make one frame.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.models.orpheus import CUSTOM_TOKEN_BASE

CODES_PER_FRAME = 7
CODEBOOK_SIZE = 4096
CUSTOM_OFFSET = 10   # custom tokens 0..9 are control tokens


def token_of_code(code: int, position: int) -> int:
    """The token id that carries `code` at frame position `position` (0..6): the rule's inverse."""
    return CUSTOM_TOKEN_BASE + CUSTOM_OFFSET + position * CODEBOOK_SIZE + code


@dataclass
class AudioCodeCounter:
    """One request's running state: how many codes were accepted."""

    num_accepted: int = 0

    def accept(self, token_id: int) -> int | None:
        """The code `token_id` carries, or None when the rule skips it."""
        if token_id < CUSTOM_TOKEN_BASE:
            return None
        code = token_id - CUSTOM_TOKEN_BASE - CUSTOM_OFFSET - (self.num_accepted % CODES_PER_FRAME) * CODEBOOK_SIZE
        if code <= 0:
            return None
        self.num_accepted += 1
        return code


def audio_codes(token_ids: list[int]) -> list[int]:
    """Every accepted code of a token stream, in order."""
    counter = AudioCodeCounter()
    return [c for c in (counter.accept(t) for t in token_ids) if c is not None]
