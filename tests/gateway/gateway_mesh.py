"""A real mesh behind a real gateway for the gateway tests: Qwen3-Omni (thinker;
talker + codec co-located; its audio and vision towers on an encoder service) served as
`omni` and as `omni-one` (no encoder; one request at a time, none waiting: a second is
refused for capacity), SD3 (fused, one process) as `sd3`, BAGEL (`starmesh serve bagel`:
backbone, ViT and VAE in one process, the tiny checkpoint of tests/fixtures/tiny_bagel.py)
as `bagel`, a conductor that requires an API key, and `starmesh gateway` in its own
process."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass

from tests.fixtures import tiny_bagel, tiny_sd3
from tests.fixtures.services import REPO, conductor_over

KEY = "gateway-test-key"
SPEECH = {"max_new_tokens": 8, "max_frames": 10, "min_frames": 10}  # a short, fixed-length answer (greedy)
LONG = {"max_new_tokens": 8, "max_frames": 2000, "min_frames": 2000}  # 160 s of audio: outlives any test step


@dataclass
class GatewayMesh:
    conductor: str          # HOST:PORT
    url: str                # http://HOST:PORT of the gateway
    checkpoint: str         # the tiny omni checkpoint
    procs: list             # the service processes (describe() each for open requests)
    gateway_pid: int = 0    # the gateway's process (its memory is measured)


@contextmanager
def gateway_mesh(tiny_omni):
    from conductor.admission import Admission, AdmissionConfig
    from pipelines.qwen3_omni.model import speakers, speech_model, speech_placement
    from pipelines.bagel.model import served_model as bagel_model
    from pipelines.sd3.model import served_model
    from runtime.process import ServiceProcess

    def models(addresses):
        thinker, talker, sd3, encoder, bagel = addresses
        out = []
        for name, encoders in (("omni", [encoder]), ("omni-one", None)):
            speech = speech_model(name, speech_placement([thinker], [talker], encoder=encoders), 4, 2)
            out.append(dataclasses.replace(speech, tokenizer_dir=str(tiny_omni), voices=speakers(str(tiny_omni))))
        return [*out, served_model("sd3", sd3, sd3, sd3, fused=True), bagel_model("bagel", bagel, bagel, bagel)]

    procs = [ServiceProcess("thinker", ["--checkpoint", str(tiny_omni)], name="thinker"),
             ServiceProcess("talker+codec", ["--checkpoint", str(tiny_omni)], name="talker+codec"),
             ServiceProcess("sd3", ["--checkpoint", tiny_sd3.checkpoint()], name="sd3", start_timeout_s=120),
             ServiceProcess("encoder", ["--checkpoint", str(tiny_omni)], name="encoder"),
             ServiceProcess("bagel", ["--checkpoint", tiny_bagel.checkpoint()], name="bagel", start_timeout_s=120)]
    admission = Admission({"omni-one": AdmissionConfig(max_in_flight=1, max_waiting=0)})
    with conductor_over(procs, models, api_key=KEY, admission=admission) as address:
        gateway = ServiceProcess("", ["--conductor", address, "--host", "127.0.0.1"], name="gateway",
                                 command="gateway")
        with gateway:
            yield GatewayMesh(address, f"http://127.0.0.1:{gateway.port}", str(tiny_omni), procs, gateway.pid)


def starmesh(*args: str) -> subprocess.CompletedProcess:
    """`starmesh ARGS` as a user runs it, with the test key."""
    import os

    env = {**os.environ, "STARMESH_API_KEY": KEY}
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=240)
