"""A deployment's conductor as this process's gRPC service (`starmesh conductor`): every
model of the deployment built from its pipeline and placement, served until SIGTERM.

    models = served_models(read_launchable(path))      # GraphError names a bad model
    serve_conductor(models, ServerConfig(port=50050), metrics_port=9464)
"""
from __future__ import annotations

import dataclasses

from cluster.checkpoints import resolve
from conductor.admission import Admission
from conductor.input_limits import InputLimits
from conductor.service import ConductorService
from cluster.registry import build_model
from runtime.server import ServerConfig, serve_blocking
from runtime.telemetry import Telemetry


def served_models(spec) -> list:
    """One served model per entry of the deployment's `models`, each with the directory of
    its tokenizer: the checkpoint of the service its pipeline's tokenizer_node runs on."""
    return [with_checkpoint(model, spec) for model in built_models(spec)]


def built_models(spec) -> list:
    """One served model per entry of the deployment's `models`, from its pipeline, its
    placement and its options, no checkpoint read. A pipeline may place nodes the file
    does not name (qwen3-omni's media walks run prefill_media where prefill runs): each
    model's placement, checked against its graph, is its own, not the file's."""
    return [build_model(m.pipeline, name, spec.placement(name), dict(m.options)) for name, m in spec.models.items()]


def with_checkpoint(model, spec):
    """`model` with its tokenizer directory and the voices its checkpoint names."""
    if not model.tokenizer_node or model.tokenizer_dir:
        return model
    service = model.placement.service_for(model.tokenizer_node, model.graph.walks[0].name)
    if not service.checkpoint:
        return model  # placed on services started by other means: no text in, ids out
    directory = str(resolve(dict(spec.checkpoints[service.checkpoint])))
    voices = model.read_voices(directory) if model.read_voices is not None else model.voices
    return dataclasses.replace(model, tokenizer_dir=directory, voices=voices)


def admission_of(spec) -> Admission:
    """The deployment's per-model request limits."""
    return Admission({name: m.admission for name, m in spec.models.items()})


def serve_conductor(models: list, server_config: ServerConfig, metrics_port: int | None = None,
                    port_file: str | None = None, api_key: str = "", admission: Admission | None = None,
                    run_timeout_s: float = 10.0, limits: InputLimits | None = None, mesh_tls=None) -> None:
    """Blocks until SIGTERM or SIGINT, then stops gracefully. `metrics_port` serves the
    conductor's Prometheus /metrics on the server's host; `port_file` receives the bound
    port once SERVING. `mesh_tls` (a member's runtime.tls.TlsConfig) is the TLS of the
    streams to the services and their health watches; without it the server's TLS config
    is; `api_key` ("" for none) is the token Conductor calls must carry;
    admission: the request limits (admission_of(spec)); run_timeout_s: a request a
    replica stops listing in its heartbeats fails after this long; `limits` bound each
    request's inputs (default InputLimits())."""
    telemetry = Telemetry("conductor")
    telemetry.install_global()
    metrics = None
    if metrics_port is not None:
        from conductor.metrics import ConductorMetrics
        from runtime.metrics import serve_metrics

        metrics = ConductorMetrics()
        serve_metrics(metrics_port, metrics.registry, server_config.host)
    service = ConductorService(models, telemetry, metrics, limits, tls=mesh_tls or server_config.tls, api_key=api_key,
                               admission=admission, run_timeout_s=run_timeout_s,
                               max_message_bytes=server_config.max_message_bytes)
    serve_blocking(service, server_config, telemetry, port_file)
