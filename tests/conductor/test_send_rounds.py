"""SendRounds: one post per target per round; lingering items ride with the next post
to their target (first in it), or go alone once linger_s is up."""
from __future__ import annotations

import asyncio

import pytest

from conductor.send_rounds import SendRounds

pytestmark = pytest.mark.timeout(30)


class Target:
    def __init__(self, name: str) -> None:
        self.name = name
        self.posts: list[list] = []
        self.posted = asyncio.Event()

    def post(self, items: list) -> None:
        self.posts.append(list(items))
        self.posted.set()


def test_one_post_per_target_per_round_and_lingering_items_go_first():
    async def main():
        a, b = Target("a"), Target("b")
        rounds = SendRounds(linger_s=30.0)  # longer than the test: only a post to `a` takes them
        rounds.send(a, "open-1")
        rounds.send(b, "accept-1")
        rounds.send(a, "open-2")
        rounds.flush()
        rounds.linger(a, "cancel-old")
        rounds.linger(b, "cancel-old")
        rounds.flush()  # nothing to send this round: they wait
        assert rounds.num_lingering == 2 and len(a.posts) == 1
        rounds.send(a, "open-old")  # the id reused: its clean-up must reach `a` first
        rounds.flush()
        left = rounds.num_lingering
        rounds.flush_all()
        return a.posts, b.posts, left

    a_posts, b_posts, left = asyncio.run(main())
    assert a_posts == [["open-1", "open-2"], ["cancel-old", "open-old"]]
    assert b_posts == [["accept-1"], ["cancel-old"]]
    assert left == 1  # b's waited for the final flush_all


def test_lingering_items_go_alone_once_their_time_is_up():
    async def main():
        a = Target("a")
        rounds = SendRounds(linger_s=0.01)
        rounds.linger(a, "cancel")
        rounds.flush()
        await asyncio.wait_for(a.posted.wait(), 20)  # the timer, not the test, posts it
        return a.posts, rounds.num_lingering

    assert asyncio.run(main()) == ([["cancel"]], 0)


def test_no_linger_and_no_loop_send_at_once():
    a = Target("a")
    now = SendRounds(linger_s=0)
    now.linger(a, "cancel")
    now.flush()
    waits = SendRounds(linger_s=5)
    waits.linger(a, "cancel-2")
    waits.flush()  # outside an event loop there is no timer to wait on: it goes now
    assert a.posts == [["cancel"], ["cancel-2"]]
    with pytest.raises(ValueError, match="linger_s"):
        SendRounds(linger_s=-1)
