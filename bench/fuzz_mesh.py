"""The fuzz target: a real deployment as child processes, every RPC a stranger can reach.

    with FuzzMesh({"omni": dir, "sd3": dir, "orpheus": dir, "vjepa2": dir}) as mesh:
        mesh.conductor           # "127.0.0.1:port": Conductor.Generate / ListModels
        mesh.services["thinker"] # a component service: Component.Run / Describe
        mesh.trace_store         # OTLP TraceService.Export
        mesh.rss_mb()            # {process name: resident MiB}

Services on the tiny checkpoints (thinker; talker+codec; the media encoder; SD3
co-located; the Orpheus LM and its SNAC codec; the world model) behind a `starmesh
conductor` process serving every model of the default deployment: "qwen3-omni" (speech,
hearing and seeing through the encoder), "text" (the thinker's text generation), "sd3"
(image), "orpheus" (speech) and "vjepa2-ac" (world model). The trace store runs in its
own process and every process exports spans to it, so its RPC is fuzzed with real
traffic around.
"""
from __future__ import annotations

import os
import tempfile

from bench.trace_store_proc import TraceStoreProcess

MODELS = ("qwen3-omni", "text", "sd3", "orpheus", "vjepa2-ac")
WORLD_NODES = ("encode", "encode_goal", "prefill", "rollout", "plan")
SD3_NODES = ("clip_l", "clip_g", "t5", "join_text", "init_latent", "denoise_cond", "denoise_uncond", "combine",
             "decode")


def deployment(checkpoints: dict[str, str]) -> dict:
    """The fuzz deployment as a mapping (ports are filled in by `write`)."""
    return {
        "name": "fuzz",
        # the services' RPCs are fuzzed as a member would reach them: without member
        # certificates (a stranger's handshake fails before any message is read)
        "mesh_tls": False,
        "checkpoints": {name: {"path": path} for name, path in checkpoints.items()},
        "services": {
            "thinker": {"component": "thinker", "checkpoint": "omni", "replicas": [""]},
            "talker": {"component": "talker+codec", "checkpoint": "omni", "replicas": [""]},
            "encoder": {"component": "encoder", "checkpoint": "omni", "replicas": [""]},
            "sd3": {"component": "sd3", "checkpoint": "sd3", "replicas": [""]},
            "orpheus_lm": {"component": "orpheus_lm", "checkpoint": "orpheus", "replicas": [""]},
            "snac": {"component": "codec", "checkpoint": "orpheus", "replicas": [""]},
            "world": {"component": "world", "checkpoint": "vjepa2", "replicas": [""]},
        },
        "models": {
            "qwen3-omni": {"pipeline": "qwen3-omni",
                           "options": {"chunk_size": 8, "left_context": 4, "first_chunk": 4},
                           "placement": {"prefill": "thinker", "decode": "thinker", "talker": "talker",
                                         "code2wav": "talker", "media_encoder": "encoder"},
                           "kv_contexts": {"thinker": ["prefill", "decode"]}},
            "text": {"pipeline": "qwen3", "options": {"max_new_tokens": 64},
                     "placement": {"prefill": "thinker", "decode": "thinker"},
                     "kv_contexts": {"thinker": ["prefill", "decode"]}},
            "sd3": {"pipeline": "sd3", "placement": {n: "sd3" for n in SD3_NODES}},
            "orpheus": {"pipeline": "orpheus", "options": {"max_new_tokens": 64},
                        "placement": {"prefill": "orpheus_lm", "decode": "orpheus_lm", "codes": "orpheus_lm",
                                      "snac": "snac"},
                        "kv_contexts": {"orpheus_lm": ["prefill", "decode"]}},
            "vjepa2-ac": {"pipeline": "vjepa2-ac", "placement": {n: "world" for n in WORLD_NODES},
                          "kv_contexts": {"world": ["prefill", "rollout"]}},
        },
    }


def write(data: dict, directory: str) -> str:
    from cluster.shipped_deployments import with_free_ports, write_deployment

    return str(write_deployment(with_free_ports(data), directory))


def rss_mb(pid: int) -> float:
    """Resident set size of a process, MiB (/proc: no psutil needed)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"process {pid} has no VmRSS")


class FuzzMesh:
    """Context manager: the trace store, the services and the conductor, stopped on exit.
    api_key: the token the conductor asks of every Conductor call ("" for none)."""

    def __init__(self, checkpoints: dict[str, str], log=lambda line: None, api_key: str = "") -> None:
        self.checkpoints = checkpoints
        self.log = log
        self.api_key = api_key
        self.cluster = None
        self.store: TraceStoreProcess | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="starmesh-fuzz-")

    def __enter__(self) -> "FuzzMesh":
        from cluster.launchable import read_launchable
        from cluster.launcher import Cluster

        try:
            self.store = TraceStoreProcess()
            path = write(deployment(self.checkpoints), self._tmp.name)
            env = {"STARMESH_LOG_LEVEL": "ERROR"}
            self.cluster = Cluster(read_launchable(path), path, trace_store=self.store.otlp, log=self.log,
                                   env=env, api_key=self.api_key).start()
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def conductor(self) -> str:
        return self.cluster.conductor_address

    @property
    def services(self) -> dict[str, str]:
        return {p.name: p.address for p in self.cluster.services}

    @property
    def trace_store(self) -> str:
        return self.store.otlp

    def pids(self) -> dict[str, int]:
        out = {"conductor": self.cluster.conductor.pid, "trace_store": self.store.proc.pid}
        return {**out, **{p.name: p.pid for p in self.cluster.services}}

    def rss_mb(self) -> dict[str, float]:
        return {name: rss_mb(pid) for name, pid in self.pids().items()}

    def alive(self) -> dict[str, bool]:
        procs = {"conductor": self.cluster.conductor.proc, "trace_store": self.store.proc,
                 **{p.name: p.proc for p in self.cluster.services}}
        return {name: proc.poll() is None for name, proc in procs.items()}

    def __exit__(self, *exc) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.store is not None:
            self.store.close()
        self._tmp.cleanup()


def tiny_checkpoints() -> dict[str, str]:
    """The tiny checkpoints of every model from the cache (built on first use)."""
    from cluster.checkpoints import tiny

    kinds = {"omni": "qwen3-omni", "sd3": "sd3", "orpheus": "orpheus", "vjepa2": "vjepa2-ac"}
    return {name: str(tiny(kind, lambda m: None)) for name, kind in kinds.items()}


if __name__ == "__main__":  # a quick look: start, print the endpoints and RSS, stop
    with FuzzMesh(tiny_checkpoints(), log=print) as m:
        print(m.conductor, m.services, m.trace_store, m.rss_mb(), os.getpid())
