"""A small real mesh, over TLS or plaintext: the conductor benchmark's three toy services
(bench.conductor_toys) as `starmesh serve` processes and a conductor on a thread,
serving the `pipe` model (src loop on A ~> mid on B ~> sink on C, routed edges: A
pushes to B and B to C on their own peer streams). With a TlsConfig every link is TLS
(mutual TLS with its CA): client -> conductor, conductor -> each service, service -> peer.
With `members` (a directory of member files, cluster/mesh_ca.py), as `starmesh up` runs
a deployment: the services and the conductor's streams to them run mutual TLS between
members (`--mesh-tls`), and `tls` is the conductor's client port's alone.

    with ToyMesh(tls, api_key="k") as mesh:
        async with Connection(mesh.address, "k", client_tls).aio_channel() as channel:
            await one_request(ConductorStub(channel), "r1", items=2)
"""
from __future__ import annotations

import time

MODEL = "pipe"
SERVICES = ("a", "b", "c")


class ToyMesh:
    """tls: runtime.tls.TlsConfig of every process (None: plaintext), of the conductor's
    client port alone with `members` (module docstring); api_key: the conductor's token
    ("" for none); items: the src loop's iterations per request."""

    def __init__(self, tls=None, api_key: str = "", items: int = 1, members=None) -> None:
        from runtime.tls import member_tls

        self.tls, self.api_key, self.items, self.members = tls, api_key, items, members
        self.service_tls = member_tls(members) if members else tls  # what reaches the services
        self.services: dict = {}
        self.conductor = None

    @property
    def address(self) -> str:
        return self.conductor.address

    def start(self) -> "ToyMesh":
        from bench.conductor import start_services
        from bench.conductor_toys import PIPELINE_INNER_LOOPS, pipeline_graph
        from conductor.model import ServedModel
        from conductor.placement import Placement
        from conductor.service import ConductorService
        from runtime.background import BackgroundServer
        from runtime.server import ServerConfig

        try:
            args = ["--mesh-tls", str(self.members)] if self.members else self.tls.cli_args() if self.tls else ()
            self.services = start_services(SERVICES, args=args)
            placement = Placement.from_dict({
                "services": {k: {"replicas": [s.address]} for k, s in self.services.items()},
                "placement": {"src": "a", "mid": "b", "sink": "c"}})
            model = ServedModel(MODEL, pipeline_graph(self.items), placement, PIPELINE_INNER_LOOPS)
            service = ConductorService([model], tls=self.service_tls, api_key=self.api_key)
            self.conductor = BackgroundServer(service, ServerConfig(tls=self.tls))
            self.conductor.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.conductor is not None:
            self.conductor.stop()
            self.conductor = None
        for proc in self.services.values():
            proc.stop()
        self.services = {}

    def __enter__(self) -> "ToyMesh":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


async def one_request(stub, request_id: str, timeout_s: float = 60.0) -> tuple[list[float], float]:
    """One `pipe` request to its end: (the z values in order, seconds it took)."""
    from bench.conductor_client import make_request
    from transport.codec import view
    from transport.ref_proto import ref_from_proto

    t0 = time.perf_counter()
    values = []
    async for ev in stub.Generate(make_request(MODEL, request_id, {}), timeout=timeout_s):
        if ev.WhichOneof("kind") == "tensor":
            ref = ref_from_proto(ev.tensor.tensor, f"event.tensor[{ev.tensor.name}]")
            values += view(ref.location.data, ref.dtype, ref.shape).reshape(-1).tolist()
    return values, time.perf_counter() - t0
