"""Speculation phase of bench.conductor: a DynamicLoop spanning two services, run with
speculation off and on, beside formula (9). See bench.conductor for the mapping."""
from __future__ import annotations

import statistics
import time


async def node_round_trip_s(address: str, node: str, inputs: dict, params: dict, repeats: int) -> float:
    """Median seconds of one bare node run on a service's Run stream: open -> done."""
    from runtime.run_client import ComponentClient
    from runtime.items import Cancel, OpenNode
    from transport.codec import inline_ref

    times = []
    async with ComponentClient(address) as run:
        for i in range(repeats + 2):
            rid = f"probe-{node}-{i}"
            refs = {k: inline_ref(v) for k, v in inputs.items()}
            t0 = time.perf_counter()
            await run.send([OpenNode(rid, node, inputs=refs, params=params)])
            await run.until_finished([rid])
            times.append(time.perf_counter() - t0)
            await run.send([Cancel(rid, "done")])
    return statistics.median(times[2:])


def first_float(value) -> float:
    """A walk output (a tensor, or an inline TensorRef from a service) as a float."""
    from transport.codec import view
    from transport.refs import TensorRef

    if isinstance(value, TensorRef):
        value = view(value.location.data, value.dtype, value.shape)
    return float(value.reshape(-1)[0])


async def timed_loops(placement, iters: int, params: dict, requests: int, speculate: bool) -> dict:
    """Sequential requests through a conductor-driven loop; median wall per request."""
    import torch

    from bench.conductor_toys import loop_graph
    from conductor.executor_setup import remote_executor

    times, outputs = [], []
    async with remote_executor(loop_graph(iters + 5), placement, speculate=speculate) as ex:
        for i in range(requests + 1):  # the first request warms the streams
            inputs = {"x": (torch.tensor([0.0]),), "limit": (torch.tensor([float(iters)]),)}
            t0 = time.perf_counter()
            xs = [first_float(v) async for _, v in ex.generate(f"spec-{speculate}-{i}", inputs, params)]
            times.append(time.perf_counter() - t0)
            outputs.append(xs)
        wasted = ex.num_wasted
    return {"median_s": statistics.median(times[1:]), "outputs": outputs[1:], "num_wasted": wasted}


def formula9(n: int, c: float, g: float) -> tuple[float, float]:
    """(T_serial, T_pipe) of formula (9)."""
    return n * (c + g), c + g + (n - 1) * max(c, g)


async def run_spec(addr_a: str, addr_b: str, iters: int, step_s: float, check_s: float, requests: int) -> dict:
    import torch

    from conductor.placement import Placement

    params = {"step_s": step_s, "check_s": check_s}
    g = await node_round_trip_s(addr_a, "step", {"x": torch.tensor([0.0])}, params, 10)
    c = await node_round_trip_s(addr_b, "check", {"x": torch.tensor([0.0]), "limit": torch.tensor([1.0])}, params, 10)
    placement = Placement.from_dict({"services": {"a": {"replicas": [addr_a]}, "b": {"replicas": [addr_b]}},
                                     "placement": {"step": "a", "check": "b"}})
    off = await timed_loops(placement, iters, params, requests, speculate=False)
    on = await timed_loops(placement, iters, params, requests, speculate=True)
    expected = [float(k) for k in range(1, iters + 1)]
    for run in (off, on):
        if any(out != expected for out in run["outputs"]):
            raise AssertionError(f"loop outputs differ from {expected}: {run['outputs'][0]}")
    serial, pipe = formula9(iters, c, g)
    return {
        "spec_iters": iters, "spec_step_s": step_s, "spec_check_s": check_s,
        "spec_g_ms": g * 1e3, "spec_c_ms": c * 1e3,
        "spec_off_ms": off["median_s"] * 1e3, "spec_on_ms": on["median_s"] * 1e3,
        "spec_predicted_serial_ms": serial * 1e3, "spec_predicted_pipe_ms": pipe * 1e3,
        "spec_speedup": off["median_s"] / on["median_s"], "spec_predicted_speedup": serial / pipe,
        "spec_wasted_per_request": on["num_wasted"] / (requests + 1), "spec_off_wasted": off["num_wasted"],
    }
