"""The audio-token -> code rule and the streaming window rule, on hand-made token streams."""
from __future__ import annotations

import torch

from engine.models.orpheus.audio_codes import AudioCodeCounter, audio_codes, token_of_code
from engine.models.orpheus.windows import is_regular, is_valid, reference_windows, snac_levels, window_ends
from tests.fixtures.tiny_orpheus import reference_codes, reference_frames


def frame_tokens(codes: list[int], start: int = 0) -> list[int]:
    return [token_of_code(c, (start + i) % 7) for i, c in enumerate(codes)]


def test_codes_follow_the_frame_position_of_the_accepted_count():
    tokens = frame_tokens([5, 6, 7, 8, 9, 10, 11, 12])
    assert audio_codes(tokens) == [5, 6, 7, 8, 9, 10, 11, 12]


def test_text_ids_code_zero_and_earlier_groups_are_skipped():
    counter = AudioCodeCounter()
    assert counter.accept(1000) is None                         # a text id
    assert counter.accept(128258) is None                       # end of speech: custom token 2
    assert counter.accept(token_of_code(0, 0)) is None          # code 0: c <= 0
    assert counter.accept(token_of_code(17, 0)) == 17 and counter.num_accepted == 1
    assert counter.accept(token_of_code(17, 0)) is None         # group 0 where group 1 is due
    assert counter.num_accepted == 1


def test_a_later_group_is_accepted_out_of_range():
    codes = audio_codes([token_of_code(3, 0), token_of_code(4, 2)])  # position 2 where 1 is due
    assert codes == [3, 4 + 4096] and not is_valid(torch.tensor(codes[:1] * 6 + codes[1:]))


def test_the_rule_equals_the_reference_written_from_its_facts():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(128256, 128256 + 10 + 7 * 4096, (2000,), generator=g).tolist() + list(range(50))
    assert audio_codes(tokens) == reference_codes(tokens)


def test_windows_every_seven_codes_once_more_than_27():
    assert window_ends(27) == [] and window_ends(28) == [28] and window_ends(41) == [28, 35]
    assert [end for end, _ in reference_windows(list(range(1, 50)))] == [28, 35, 42, 49]


def test_regular_windows_are_the_sliding_window_chunks_but_not_the_residual():
    assert is_regular(28, 0, 0) and is_regular(28, 21, 7)
    assert not is_regular(28, 24, 3)  # the residual: the last 28 codes, 4 new
    assert not is_regular(20, 0, 0)   # a stream shorter than a window


def test_levels_are_the_reference_layout():
    window = list(range(1, 29))
    ours = snac_levels(torch.tensor([window]))
    for got, want in zip(ours, reference_frames(window)):
        assert got.tolist() == want.tolist()
    assert reference_frames([4096] + window[1:]) is None and not is_valid(torch.tensor([4096] + window[1:]))
