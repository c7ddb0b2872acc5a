"""The producer half of a routed edge: whatever order a node's runs report in, its
consumer gets the items in stream order, cut by the policy, within the window."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graph.chunking import FixedChunk, LeftContext, SlidingWindow
from runtime.items import EdgeRoute
from runtime.route_out import OutboundRoutes

POLICIES = st.sampled_from([FixedChunk(1), FixedChunk(3), LeftContext(2, 1), SlidingWindow(4, 2), LeftContext(3, 2, first=1)])


def route(policy, window=4096) -> EdgeRoute:
    return EdgeRoute("y", "sink", "y", policy, (), window, "peer:1", "h", "tok", "mid.y -> sink.y")


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 12), policy=POLICIES, data=st.data())
def test_items_reach_the_consumer_in_stream_order(n, policy, data):
    out = OutboundRoutes()
    out.open("r", "mid", (), (route(policy),))
    empty = data.draw(st.sets(st.integers(0, max(0, n - 1)), max_size=n))  # runs with no output
    order = data.draw(st.permutations(range(n)))
    sends = []
    for k in order:
        if k in empty:
            sends += out.skip("r", "mid", (k,))
        else:
            sends += out.output("r", "mid", (k,), {"y": torch.tensor([float(k)])})
    sends += out.end("r", "mid", ())
    new = []
    for s in sends:
        items = s.tensors.get("y", torch.zeros(0))
        new += items[s.push.num_context:].tolist()
    assert new == [float(k) for k in range(n) if k not in empty]
    assert sends[-1].push.end_of_stream and sum(s.push.end_of_stream for s in sends) == 1
    assert [s.push.start for s in sends] == sorted(s.push.start for s in sends)
    out.check_integrity()


def test_the_window_counts_buffered_and_unacknowledged_items():
    out = OutboundRoutes()
    out.open("r", "src", (), (route(FixedChunk(1), window=3),))
    for k in range(3):
        out.output("r", "src", (k,), {"y": torch.tensor([1.0])})
    assert not out.has_room("r", "src", ())  # 3 pushed, none credited back
    back = out.credit("tok", 2)
    assert back is not None and out.has_room("r", "src", ()) and out.keys_of(back) == [("r", "src", ())]
    assert out.peak_fill[("mid.y -> sink.y", 3)] == 3
    out.cancel("r")
    assert out.credit("tok", 1) is None and out.streams == {}
