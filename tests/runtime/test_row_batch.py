"""The batch contract for pushes: one `push_rows` call per step carries every entry for
open loop runs; an entry the component refuses fails alone; a co-located host hands
each member its own entries, one call where the member has push_rows, one push each
where it has not, and the results equal per-entry pushes."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.toys import Toy
from runtime.colocated import Colocated
from runtime.items import OpenNode, PushChunk, StreamInput
from runtime.row_batch import RowBatch, RowCollector, push_each


def _loop_toy(name: str, node: str) -> Toy:
    return Toy(name, {node: lambda i, p: {"y": i["x"] * 2}}, loops={node: {"y": "x"}})


class _PushOnly(Toy):
    """A member with `push` alone: hasattr(member, "push_rows") is False."""

    push_rows = property(lambda self: (_ for _ in ()).throw(AttributeError("push_rows")))


def _open(toy: Toy, rid: str, node: str) -> None:
    toy.open(OpenNode(rid, node, stream=StreamInput("x")), {"x": torch.zeros(1)})


def _batch(entries: list[tuple[str, str, list[float], int, bool]]) -> RowBatch:
    """entries: (request, node, values, num_context, end)."""
    rows, starts, stops = [], [], []
    for _, _, values, _, _ in entries:
        starts.append(len(rows))
        rows += values
        stops.append(len(rows))
    return RowBatch([e[0] for e in entries], [e[1] for e in entries], [()] * len(entries), ["x"] * len(entries),
                    torch.tensor(rows).reshape(-1, 1), starts, stops, [e[3] for e in entries], [e[4] for e in entries])


def _queues(toy: Toy) -> dict:
    return {k[0]: ([float(t) for t in run.queue], run.is_eos) for k, run in toy._loops.items()}


def test_an_entry_for_a_run_that_is_not_open_fails_alone():
    toy = _loop_toy("t", "loop")
    for rid in ("a", "c"):
        _open(toy, rid, "loop")
    failures = toy.push_rows(_batch([("a", "loop", [1.0, 2.0], 0, False), ("b", "loop", [3.0], 0, False),
                                     ("c", "loop", [4.0, 5.0], 1, True)]))
    assert list(failures) == [1]
    assert _queues(toy) == {"a": ([1.0, 2.0], False), "c": ([5.0], True)}


def test_a_collector_makes_one_call_and_reports_what_failed():
    toy = _loop_toy("t", "loop")
    _open(toy, "a", "loop")
    batch = _batch([("a", "loop", [1.0], 0, False), ("zz", "loop", [2.0], 0, False)])
    collector = RowCollector(batch.rows)
    for i in range(len(batch)):
        push = PushChunk(batch.request_ids[i], "loop", "x", (), {}, False)

        class _Rows:
            start, stop = batch.starts[i], batch.stops[i]

        collector.add(push, _Rows)
    [(index, got, error)] = collector.flush(toy)
    assert index == 1 and got.request_ids[index] == "zz" and isinstance(error, KeyError)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["p", "q"]),
                          st.lists(st.floats(-9, 9, allow_nan=False), max_size=3), st.booleans()), max_size=10))
def test_a_colocated_host_equals_per_entry_pushes(raw):
    entries = [(rid, node, values, 0, end) for rid, node, values, end in raw]

    def host():
        members = [_loop_toy("tp", "p"), _PushOnly("tq", {"q": lambda i, p: {"y": i["x"]}}, loops={"q": {"y": "x"}})]
        for rid in ("a", "b", "c"):  # "d" is open nowhere: its entries fail
            _open(members[0], rid, "p")
            _open(members[1], rid, "q")
        return members

    batched, single = host(), host()
    failures = Colocated(batched).push_rows(_batch(entries))
    expected = push_each(Colocated(single), _batch(entries))
    assert set(failures) == set(expected) == {i for i, e in enumerate(entries) if e[0] == "d"}
    assert [_queues(m) for m in batched] == [_queues(m) for m in single]
