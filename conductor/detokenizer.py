"""Token ids to text as they arrive, never splitting a UTF-8 character.

A byte-level tokenizer's id may be part of a character (a CJK character or an emoji is
2-4 byte ids); decoding it alone gives U+FFFD. So each push decodes a window of ids
twice, from `prefix` (the start of the last emitted piece, kept as context so a
tokenizer's leading-space rules see the same neighbours as in a full decode):

    ids:   ... | prefix ... read | read ... end |
    delta = decode(ids[prefix:end])[len(decode(ids[prefix:read])):]

and emits the delta only when it does not end in U+FFFD (an incomplete character);
otherwise it waits for more ids. `finish` emits what is left. Invariant: the
concatenation of every delta equals tokenizer.decode(all ids, skip_special_tokens=True)
(tests/conductor/test_detokenizer.py). Each push decodes O(window) ids, not the whole text.
"""
from __future__ import annotations

REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer) -> None:
        """tokenizer: a transformers tokenizer (its decode)."""
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # start of the context window
        self.read = 0    # ids up to here are emitted

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, ids: list[int]) -> str:
        """The text `ids` complete (may be "" while a character is incomplete)."""
        self.ids.extend(int(i) for i in ids)
        return self._advance(final=False)

    def finish(self) -> str:
        """The text of ids still held back (an incomplete character at the end decodes as U+FFFD)."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        if self.read == len(self.ids):
            return ""
        before = self._decode(self.ids[self.prefix:self.read])
        text = self._decode(self.ids[self.prefix:])
        if not final and (len(text) <= len(before) or text.endswith(REPLACEMENT)):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return text[len(before):]
