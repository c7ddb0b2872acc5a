"""One component as this process's gRPC service (`starmesh serve`): its transport, its
telemetry and an optional Prometheus endpoint, served until SIGTERM.

    component = build_component("thinker", checkpoint=path)  # cluster.registry
    serve_component(component, TransportConfig(), ServerConfig(port=50061), port_file=path)

The service owns the component and the transport from then on: a graceful stop closes
both (which unlinks the arena).
"""
from __future__ import annotations

from runtime.component import Component
from runtime.component_service import ComponentService
from runtime.metrics import ServiceCollector, process_registry, serve_metrics
from runtime.server import ServerConfig, serve_blocking
from runtime.telemetry import Telemetry
from transport.config import TransportConfig
from transport.transport import Transport


def serve_component(component: Component, transport_config: TransportConfig, server_config: ServerConfig,
                    metrics_port: int | None = None, port_file: str | None = None) -> None:
    """Blocks until SIGTERM or SIGINT, then stops gracefully. `metrics_port` serves
    Prometheus /metrics on the server's host; `port_file` receives the bound port once
    SERVING. The component is closed if its transport cannot be created."""
    try:
        transport = Transport(transport_config)
    except BaseException:
        component.close()
        raise
    telemetry = Telemetry(component.name)
    telemetry.install_global()
    service = ComponentService(component, transport, telemetry, server_config.tls,
                               max_message_bytes=server_config.max_message_bytes)
    if metrics_port is not None:
        registry = process_registry()
        registry.register(ServiceCollector(component.name, component, service.step_loop, transport))
        serve_metrics(metrics_port, registry, server_config.host)
    serve_blocking(service, server_config, telemetry, port_file)
