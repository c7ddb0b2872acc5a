"""StatelessEngine: key-matched batching, fairness, abort, failure isolation."""
import pytest

from engine.stateless_engine import StatelessConfig, StatelessEngine, WorkItem


def _engine(max_batch_size=8, fail_on=None):
    batches = []

    def run(items):
        batches.append([i.payload for i in items])
        if fail_on is not None and any(i.payload == fail_on for i in items):
            raise ValueError(f"bad payload {fail_on}")
        return [i.payload * 10 for i in items]

    return StatelessEngine(run, StatelessConfig(max_batch_size=max_batch_size)), batches


def test_items_with_equal_keys_batch_and_the_oldest_key_runs_first():
    engine, batches = _engine(max_batch_size=2)
    for n, key in enumerate(["a", "b", "a", "a", "b"]):
        engine.add(WorkItem(f"r{n}", key, n))
    outs = []
    while engine.has_work():
        outs += [(r.item.request_id, r.output) for r in engine.step()]
    assert batches == [[0, 2], [1, 4], [3]]
    assert sorted(outs) == [("r0", 0), ("r1", 10), ("r2", 20), ("r3", 30), ("r4", 40)]
    assert engine.num_steps == 3 and engine.num_items == 5


def test_abort_drops_only_that_request():
    engine, batches = _engine()
    engine.add(WorkItem("keep", "k", 1))
    engine.add(WorkItem("drop", "k", 2))
    engine.add(WorkItem("drop", "k", 3))
    assert engine.abort("drop") == 2
    assert [r.output for r in engine.step()] == [10]
    assert not engine.has_work()
    engine.check_integrity()


def test_a_failing_item_fails_alone():
    engine, batches = _engine(fail_on=2)
    for n in (1, 2, 3):
        engine.add(WorkItem(f"r{n}", "k", n))
    results = {r.item.request_id: r for r in engine.step()}
    assert results["r1"].output == 10 and results["r3"].output == 30
    assert not results["r2"].ok and "bad payload" in str(results["r2"].error)
    assert batches == [[1, 2, 3], [1], [2], [3]]


def test_config_and_queue_bounds():
    with pytest.raises(ValueError, match="max_batch_size"):
        StatelessConfig(max_batch_size=0)
    engine = StatelessEngine(lambda items: items, StatelessConfig(max_queued=1))
    engine.add(WorkItem("a", "k", 0))
    assert not engine.can_add()
    with pytest.raises(OverflowError):
        engine.add(WorkItem("b", "k", 0))


def test_a_batch_stays_within_its_weight_and_one_heavy_item_still_runs():
    batches = []

    def run(items):
        batches.append([i.payload for i in items])
        return [i.payload for i in items]

    engine = StatelessEngine(run, StatelessConfig(max_batch_size=8, max_batch_weight=64))
    for n, weight in enumerate([29, 29, 29, 100, 4, 4]):  # one key: order is arrival
        engine.add(WorkItem(f"r{n}", "k", n, weight=weight))
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert batches == [[0, 1], [2], [3], [4, 5]]  # 29+29 fit 64; 29+100 does not; 100 alone


def test_the_weight_bound_is_checked_once():
    with pytest.raises(ValueError, match="max_batch_weight"):
        StatelessConfig(max_batch_weight=0)
