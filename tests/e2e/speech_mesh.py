"""The speech mesh for end-to-end tests: thinker, talker, codec and talker+codec as
child processes on the tiny Qwen3-Omni checkpoint, and a conductor serving the model
split (three services) and co-located (talker + code2wav in one process)."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from conductor.service import ConductorService
from pipelines.qwen3_omni.model import speech_model, speech_placement
from runtime.background import BackgroundServer
from runtime.process import ServiceProcess
from tests.fixtures import registry
from tests.fixtures.services import describe, start_side_by_side

CHUNK, LEFT = 8, 4  # small windows: several audio chunks per request


@dataclass
class SpeechMesh:
    conductor: BackgroundServer
    procs: dict[str, ServiceProcess]
    checkpoint: str

    def executor(self, model: str):
        return self.conductor.hosted.executors[model]

    def load(self, name: str) -> dict:
        return dict(describe(self.procs[name].address).load)


def start_mesh(checkpoint: str) -> SpeechMesh:
    procs = {name: ServiceProcess(name, ["--checkpoint", checkpoint], name=name)
             for name in ("thinker", "talker", "codec", "talker+codec")}
    try:
        start_side_by_side(list(procs.values()))
        for proc in procs.values():
            registry.register(proc.address, describe(proc.address).arena)
        split = speech_placement([procs["thinker"].address], [procs["talker"].address], [procs["codec"].address])
        colo = speech_placement([procs["thinker"].address], [procs["talker+codec"].address])
        models = [speech_model("omni", split, CHUNK, LEFT), speech_model("omni-colo", colo, CHUNK, LEFT)]
        conductor = BackgroundServer(ConductorService(models))
        conductor.start()
    except BaseException:
        stop_procs(procs)
        raise
    return SpeechMesh(conductor, procs, checkpoint)


def stop_procs(procs: dict[str, ServiceProcess]) -> None:
    for proc in procs.values():
        if proc.port is not None:
            registry.unregister(proc.address)
        proc.stop()


def stop_mesh(mesh: SpeechMesh) -> None:
    mesh.conductor.stop()
    stop_procs(mesh.procs)


def run(coro):
    return asyncio.run(coro)
