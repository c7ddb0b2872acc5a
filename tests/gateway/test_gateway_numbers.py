"""Every numeric field of every route refuses what is not a number in its range (NaN and
the infinities, which Python's json reads; wrong types; integers past 64 bits; values out
of the model's range) with a 400 naming the field, and no bad input is ever a 5xx: the
battery of bench.gateway_bad_inputs and a property test over the same fields, against
the real gateway and conductor."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.chaos_gateway import send_battery
from bench.gateway_bad_inputs import NumericField, battery, numeric_fields
from tests.gateway.gateway_mesh import KEY

pytestmark = pytest.mark.timeout(300)
MODELS = {"speech": "omni", "chat": "omni", "image": "sd3"}


@pytest.fixture(scope="module")
def cards(mesh):
    from client.connection import Connection
    from client.session import ConductorSession

    async def models():
        async with ConductorSession(Connection(mesh.conductor, KEY)) as session:
            return await session.models()

    return asyncio.run(models())


@pytest.fixture(scope="module")
def http(mesh):
    with httpx.Client(base_url=mesh.url, timeout=120, headers={"authorization": f"Bearer {KEY}"}) as client:
        yield client


def test_the_battery_is_refused_naming_each_field_and_never_5xx(mesh, cards):
    bad = battery(cards, **MODELS)
    fields = {(f.path, f.name) for f in numeric_fields(cards, **MODELS)}
    # every route's numbers are in it: speed, n, max_tokens, temperature, seed, steps, ...
    assert {("/v1/audio/speech", "speed"), ("/v1/audio/speech", "max_frames"), ("/v1/chat/completions", "max_tokens"),
            ("/v1/chat/completions", "seed"), ("/v1/images/generations", "n"),
            ("/v1/images/generations", "seed"), ("/v1/images/generations", "steps")} <= fields
    results = send_battery(mesh.url, bad, KEY)
    assert results["gateway_5xx_on_bad_input"] == 0, results["gateway_bad_input_failures"]
    assert results["gateway_bad_input_accepted"] == 0, results["gateway_bad_input_failures"]
    assert results["gateway_bad_input_unnamed"] == 0, results["gateway_bad_input_failures"]


def _bad_number(f: NumericField):
    """JSON literals f must refuse: non-finite, wrong types, past 64 bits, out of range."""
    options = [st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e999"]),
               st.text(max_size=8).map(json.dumps), st.booleans().map(json.dumps),
               st.lists(st.integers(-3, 3), max_size=3).map(json.dumps),
               st.dictionaries(st.text(max_size=3), st.integers(), max_size=2).map(json.dumps)]
    if f.kind == "int":
        options += [st.integers(min_value=1 << 63).map(str), st.integers(max_value=-(1 << 63) - 1).map(str),
                    st.floats(-1e6, 1e6).filter(lambda x: x != int(x)).map(repr)]
    if f.max is not None:
        above = st.integers(int(f.max) + 1, 1 << 62) if f.kind == "int" else \
            st.floats(f.max, 1e300, exclude_min=True)
        options.append(above.map(repr))
    if f.min is not None:
        below = st.integers(-(1 << 62), int(f.min) - 1) if f.kind == "int" else \
            st.floats(-1e300, f.min, exclude_max=not f.exclusive_min)
        options.append(below.map(repr))
    return st.one_of(options)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_bad_number_in_any_numeric_field_is_a_400_naming_it(cards, http, data):
    f = data.draw(st.sampled_from(numeric_fields(cards, **MODELS)), label="field")
    literal = data.draw(_bad_number(f), label="value")
    r = http.post(f.path, content=f.body(literal), headers={"content-type": "application/json"})
    assert r.status_code == 400, (f.path, f.name, literal, r.status_code, r.text[:300])
    assert r.json()["error"]["param"] == f.name, (f.path, f.name, literal, r.text[:300])
