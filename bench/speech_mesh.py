"""The speech benchmark's mesh and its client side.

Four service processes on loopback (thinker, talker, codec, talker+codec) and one
conductor in this process serving three models over them:
    omni        streaming, split: thinker | talker | codec
    omni-colo   streaming, co-located: thinker | talker+codec
    omni-stage  the stage-pipeline baseline (bench.stage_graph) on the
                split services: each stage finishes before the next starts
A phase sends `rounds` waves of `concurrency` requests at once through the SDK
(client.speech.speak) and keeps every request's summary.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
import time
from dataclasses import dataclass

from engine.models.qwen3_omni import SAMPLE_RATE  # the benchmarked speech model's audio rate

# C and L as vLLM-Omni's Qwen3-Omni async chunk (codec_chunk_frames 25 and 25 frames of
# left context); a 4-frame first window (0.32 s of audio) plays the part of its
# initial_codec_chunk_frames.
CHUNK, LEFT, FIRST = 25, 25, 4
SERVICES = ("thinker", "talker", "codec", "talker+codec")
# What the benchmarks' clients ask for (--outputs -> client.speech modalities): voice = text
# and audio, as a voice client and the HTTP gateway's chat; all = every output, the codes too.
OUTPUTS = {"voice": ("text", "audio"), "all": ()}


def local_nice() -> dict[str, int]:
    """Service -> nice, as the shipped local deployment (`starmesh up`) runs the speech path."""
    from cluster.deployment_dir import SHIPPED_DIR
    from conductor.deployment_file import read_deployment

    services = read_deployment(SHIPPED_DIR / "local.yaml").services
    return {name: services[name].nice for name in SERVICES if name in services}


def add_outputs_option(parser) -> None:
    """--outputs of a speech benchmark (an OUTPUTS key; default voice)."""
    parser.add_argument("--outputs", choices=tuple(OUTPUTS), default="voice",
                        help="what each client asks for: voice = text and audio (as the HTTP gateway's chat "
                             "does), all = every output, the codec codes too")


class SpeechMesh:
    """Context manager: the service processes and the conductor; all stopped on exit."""

    def __init__(self, checkpoint: str, threads: int = 1, first_chunk: int = FIRST, admission=None,
                 split_only: bool = False, options: tuple[str, ...] = (), ttfa_target_s: float | None = None,
                 telemetry=None, nice: dict[str, int] | None = None, env: dict[str, str] | None = None) -> None:
        """admission: the conductor's request limits (conductor.admission.Admission; default limits if None);
        split_only: only the thinker, talker and codec services and model `omni`; options: KEY=VALUE
        engine options of every service (e.g. schedule=fcfs); ttfa_target_s: the models' (None: their
        default; ServedModel.ttfa_target_s); telemetry: the conductor's (runtime.telemetry.Telemetry;
        None: the conductor's default), which also traces its gRPC server as a deployed conductor's
        does; nice: service -> CPU priority increment (None: as the shipped local deployment sets
        them, local_nice(); {}: all equal); env: extra environment of the service processes
        (e.g. STARMESH_TRACE_STORE, as `starmesh up` gives them)."""
        self.checkpoint, self.threads, self.first_chunk = checkpoint, threads, first_chunk
        self.admission = admission
        self.services = SERVICES[:3] if split_only else SERVICES
        self.options = options
        self.ttfa_target_s = ttfa_target_s
        self.telemetry = telemetry
        self.nice = local_nice() if nice is None else nice
        self.env = dict(env or {})
        self.procs: dict = {}
        self.arenas: list[str] = []  # the services' /dev/shm segments, gone once they stop
        self.conductor = None

    def __enter__(self) -> "SpeechMesh":
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from conductor.service import ConductorService
        from pipelines.qwen3_omni.model import speech_model, speech_placement
        from bench.stage_graph import stage_model
        from runtime.background import BackgroundServer
        from runtime.process import ServiceProcess

        args = ["--checkpoint", self.checkpoint, "--torch-threads", str(self.threads), "--log-level", "WARNING"]
        args += [a for option in self.options for a in ("--option", option)]
        self.procs = {name: ServiceProcess(name, [*args, "--nice", str(self.nice.get(name, 0))], self.env,
                                           name=f"bench-{name}", start_timeout_s=180) for name in self.services}
        with ThreadPoolExecutor(len(self.services)) as pool:  # imports overlap: a quicker start
            list(pool.map(lambda p: p.start(), self.procs.values()))
        addr = {name: proc.address for name, proc in self.procs.items()}
        self.arenas = [_arena(a) for a in addr.values()]
        split = speech_placement([addr["thinker"]], [addr["talker"]], [addr["codec"]])
        first = self.first_chunk
        models = [speech_model("omni", split, CHUNK, LEFT, first)]
        if "talker+codec" in addr:
            colo = speech_placement([addr["thinker"]], [addr["talker+codec"]])
            models += [speech_model("omni-colo", colo, CHUNK, LEFT, first), stage_model("omni-stage", split)]
        if self.ttfa_target_s is not None:
            models = [dataclasses.replace(m, ttfa_target_s=self.ttfa_target_s) for m in models]
        self.conductor = BackgroundServer(ConductorService(models, self.telemetry, admission=self.admission),
                                          telemetry=self.telemetry)
        self.conductor.start()

    def __exit__(self, *exc) -> None:
        if self.conductor is not None:
            self.conductor.stop()
        for proc in self.procs.values():
            proc.stop()

    @property
    def address(self) -> str:
        return self.conductor.address

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of each service process, and of this process (the conductor
        and the benchmark's client, which share it) as "conductor+client"."""
        from bench.output import proc_cpu_s

        times = os.times()
        return {**{name: proc_cpu_s(proc.pid) for name, proc in self.procs.items()},
                "conductor+client": times.user + times.system}

    def leftover_segments(self) -> list[str]:
        """The services' shm segments still in /dev/shm (after __exit__: a leak)."""
        return [name for name in self.arenas if name and os.path.exists(os.path.join("/dev/shm", name))]


def _arena(address: str) -> str:
    """The segment name of a service's arena, from its Describe."""
    import grpc

    from protos.starmesh.v1 import component_pb2, component_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        info = component_pb2_grpc.ComponentStub(channel).Describe(component_pb2.DescribeRequest(), timeout=10)
    return info.arena


def viability(chunk_times_s: list[float], chunk_samples: list[int]) -> tuple[int, int]:
    """(viable chunks, chunks after the first) of one request, VoxServe's definition:
    playback starts when the first chunk arrives; a later chunk is viable when it
    arrives before the audio delivered before it has finished playing (a late chunk
    stalls playback, which resumes on its arrival)."""
    if not chunk_times_s:
        return 0, 0
    play_end = chunk_times_s[0] + chunk_samples[0] / SAMPLE_RATE
    viable = 0
    for t, n in zip(chunk_times_s[1:], chunk_samples[1:]):
        viable += t <= play_end
        play_end = max(play_end, t) + n / SAMPLE_RATE
    return viable, len(chunk_times_s) - 1


def stalls_s(summary) -> dict[int, float]:
    """chunk index -> seconds one request's playback waited for that chunk (only chunks
    that stalled), on the client's clock: playback starts when the first chunk arrives, a
    late chunk stalls it until it arrives."""
    stalls, play_end = {}, None
    for k, (t, chunk) in enumerate(zip(summary.chunk_times_s, summary.chunks)):
        if play_end is not None and t > play_end:
            stalls[k] = t - play_end
        play_end = max(play_end or t, t) + int(chunk.numel()) / SAMPLE_RATE
    return stalls


@dataclass
class Phase:
    """Every request of one model at one concurrency."""

    summaries: list
    wall_s: float

    @property
    def ttfa_ms_p50(self) -> float:
        return statistics.median(s.ttfa_ms for s in self.summaries)

    @property
    def rtf_p50(self) -> float:
        return statistics.median(s.rtf for s in self.summaries)

    @property
    def audio_s_per_s(self) -> float:
        return sum(s.audio_s for s in self.summaries) / self.wall_s

    @property
    def viability(self) -> float:
        counts = [viability(s.chunk_times_s, [int(c.numel()) for c in s.chunks]) for s in self.summaries]
        later = sum(n for _, n in counts)
        return sum(v for v, _ in counts) / later if later else 1.0


async def run_phase(address: str, model: str, prompts: list[list[int]], params: dict, concurrency: int,
                    rounds: int, frames: int) -> Phase:
    """`rounds` waves of `concurrency` requests at once; every request must give `frames` frames."""
    from client.speech import speak

    summaries, wall = [], 0.0
    for r in range(rounds):
        wave = [prompts[(r * concurrency + i) % len(prompts)] for i in range(concurrency)]
        t0 = time.perf_counter()
        summaries += await asyncio.gather(*(speak(address, model, ids, params, timeout_s=600) for ids in wave))
        wall += time.perf_counter() - t0
    for s in summaries:
        if len(s.codec_codes) != frames or not s.chunks:
            raise RuntimeError(f"{model}: a request gave {len(s.codec_codes)} frames and {len(s.chunks)} audio "
                               f"chunks, expected {frames} frames (is codec EOS suppressed?)")
    return Phase(summaries, wall)
