"""Edge statistics: latency from production to dispatch, and the consumer's share of it
(arrival -> dispatch) only for items that arrived from another process."""
from hypothesis import given
from hypothesis import strategies as st

from cluster.trace_store import edge_table
from runtime.edge_stats import EdgeRecorder, EdgeStats, percentile

times = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@given(st.lists(st.tuples(times, times, times), min_size=1, max_size=40))
def test_waits_are_the_arrival_to_dispatch_share_of_each_latency(hops):
    stats = EdgeStats()
    for produced, transit, wait in hops:
        stats.add(1e9 + produced, 1e9 + produced + transit + wait, None, 1e9 + produced + transit)
    a = stats.attributes()
    waits = sorted(w for _, _, w in hops)
    assert a["starmesh.items"] == len(hops)
    assert abs(a["starmesh.consumer_wait_us.p50"] - percentile(waits, 0.5)) < 1e-3
    assert abs(a["starmesh.consumer_wait_us.p99"] - percentile(waits, 0.99)) < 1e-3
    assert a["starmesh.consumer_wait_us.p99"] <= a["starmesh.latency_us.max"] + 1e-3


def test_items_handed_over_in_process_record_no_wait():
    stats = EdgeStats()
    stats.add(100.0, 250.0, None)  # received_us 0: no arrival, the producer is this process
    assert stats.attributes()["starmesh.latency_us.p50"] == 150.0
    assert not any(k.startswith("starmesh.consumer_wait_us") for k in stats.attributes())


def _tracer():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter


def test_the_trace_table_shows_the_consumer_wait_of_both_span_kinds():
    (tracer, exporter), rec = _tracer(), EdgeRecorder()
    for i in range(5):  # per-item edge: one aggregated span
        rec.hop("a.x -> b.x", 1000.0 * i, 1000.0 * i + 500, None, 1000.0 * i + 400 - 10 * i)
    for i in range(3):  # chunked edge: a span per chunk
        rec.chunk("b.y -> c.y", [(None, 10_000.0 + i)], 0, 10_900.0 + i, 10_880.0 + i - 20 * i)
    rec.chunk("b.y -> c.y", [(None, 20_000.0)], 0, 20_100.0)  # handed over in-process: no wait
    rec.emit_spans(tracer, None, "r")
    spans = [{"name": s.name, "attributes": dict(s.attributes)} for s in exporter.get_finished_spans()]
    rows = {r["edge"]: r for r in edge_table(spans)}
    assert rows["a.x -> b.x"]["wait_p50_us"] == 120.0 and rows["a.x -> b.x"]["p50_us"] == 500.0
    assert rows["b.y -> c.y"]["wait_p50_us"] == 40.0 and rows["b.y -> c.y"]["items"] == 4


def test_a_long_stream_keeps_its_exact_count_and_maximum_and_a_bounded_even_sample():
    from runtime.edge_stats import SAMPLE_CAP

    stats, n = EdgeStats(), 20 * SAMPLE_CAP + 7
    for i in range(n):
        stats.add(0.0, float(i % 1000) + (5000.0 if i == n - 3 else 0.0), None)
    a = stats.attributes()
    assert a["starmesh.items"] == n and a["starmesh.latency_us.max"] == 5000.0 + (n - 3) % 1000
    assert SAMPLE_CAP // 2 <= len(stats.latencies_us) <= SAMPLE_CAP
    assert abs(a["starmesh.latency_us.p50"] - 500.0) < 50.0  # latencies 0..999 in turn: the sample keeps the spread
