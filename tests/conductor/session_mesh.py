"""The mesh the session tests talk to: the tiny Qwen3-Omni (thinker; talker + codec
co-located; its audio tower on an encoder service) as child processes, and a conductor in
this process serving it as `omni` with the model's tokenizer, its Sessions bounded small
(two sessions, a small context, 8 s of uncommitted audio) so the bounds are reached in tests."""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

from conductor.session_limits import SessionLimits

LIMITS = SessionLimits(max_sessions=2, max_context_tokens=900, idle_timeout_s=30.0, max_audio_s=8.0)
PARAMS = {"max_new_tokens": 6, "max_frames": 12, "min_frames": 12}  # a short, fixed-length spoken answer (greedy)


@dataclass
class SessionMesh:
    server: object          # runtime.background.BackgroundServer of the conductor
    procs: list
    checkpoint: str
    model: object           # the ServedModel `omni` (another conductor may serve it too)

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def service(self):
        return self.server.hosted

    def thinker_load(self) -> dict:
        from tests.fixtures.services import describe

        return dict(describe(self.procs[0].address).load)

    def holds_nothing(self) -> bool:
        """No kept context, no KV block in use and no request on the thinker, and no
        session open on the conductor."""
        load = self.thinker_load()
        return (load["contexts"] == 0 and load["kv_blocks_used"] == 0 and load["num_running"] == 0
                and not self.service.sessions.open)


@contextmanager
def another_conductor(mesh: SessionMesh, **service_kwargs):
    """A second conductor over the mesh's services (ConductorService with service_kwargs:
    sessions=SessionLimits(...), api_key, ...); its BackgroundServer."""
    from conductor.service import ConductorService
    from runtime.background import BackgroundServer

    server = BackgroundServer(ConductorService([mesh.model], **service_kwargs))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def session_mesh(tiny_omni, limits: SessionLimits = LIMITS):
    from pipelines.qwen3_omni.model import speakers, speech_model, speech_placement
    from runtime.process import ServiceProcess
    from tests.fixtures.services import conductor_server_over

    procs = [ServiceProcess("thinker", ["--checkpoint", str(tiny_omni)], name="thinker"),
             ServiceProcess("talker+codec", ["--checkpoint", str(tiny_omni)], name="talker+codec"),
             ServiceProcess("encoder", ["--checkpoint", str(tiny_omni)], name="encoder")]
    served = []

    def models(addresses):
        thinker, talker, encoder = addresses
        model = speech_model("omni", speech_placement([thinker], [talker], encoder=[encoder]), 4, 2)
        served.append(dataclasses.replace(model, tokenizer_dir=str(tiny_omni), voices=speakers(str(tiny_omni))))
        return served

    with conductor_server_over(procs, models, sessions=limits) as server:
        yield SessionMesh(server, procs, str(tiny_omni), served[0])
