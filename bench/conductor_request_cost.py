"""The conductor's CPU per item, split into what a request costs and what an item costs.

`conductor_cpu_us_per_item` divides everything the conductor spends by the items, so at
`--items` per request it carries each request's fixed cost (the Generate call, parsing,
spans, the dispatch and clean-up messages to three services) spread over its items. Two
saturation points that differ only in items per request separate the two:

    cpu per request at n items  C(n) = conductor_cpu_us_per_item(n) * n
    conductor_cpu_us_per_extra_item  = (C(LONG * n) - C(n)) / ((LONG - 1) * n)
    conductor_cpu_us_per_request     = C(n) - n * conductor_cpu_us_per_extra_item

Both points run at the saturation concurrency, `concurrency` requests of LONG * n items
against the sweep's point of n items. Upstream batching (items per client message)
differs between them a little, so the split is an estimate, not an identity.
"""
from __future__ import annotations

LONG = 4  # the long requests carry this many times --items
LONG_MODEL = "pipe-long"


def request_cost(client, items: int, short: dict, tag: str) -> dict:
    """short: the saturation sweep point (its concurrency and cpu_us_per_item)."""
    n, concurrency = LONG * items, short["concurrency"]
    r = client.run(model=LONG_MODEL, prefix=f"long{tag}", requests=concurrency, concurrency=concurrency, items=n,
                   params={"interval_s": 0.0})
    long_per_item = r["conductor_cpu_s"] / r["items"] * 1e6
    c_short, c_long = short["cpu_us_per_item"] * items, long_per_item * n
    per_item = (c_long - c_short) / (n - items)
    return {"conductor_cpu_us_per_item_long": long_per_item,
            "conductor_cpu_us_per_extra_item": per_item,
            "conductor_cpu_us_per_request": c_short - items * per_item}
