"""Starts a deployment's processes, waits until they are SERVING, stops them cleanly.

    with Cluster(read_launchable(path), path) as cluster:
        print(cluster.conductor_address)

Every service replica is `starmesh serve <component>` on its endpoint's port, the
conductor `starmesh conductor --deployment FILE` and, when the file names one, the HTTP
gateway `starmesh gateway --conductor ...` (stopped first); each serving /metrics on the
port its deployment names (or derives: conductor/metrics_address.py); each child's output
is relayed line by line, prefixed with its name. Every port is checked first
(cluster.ports: one in use is an error naming it).

Order: the services, and the gateway (it connects to the conductor on its first request
only), start together and are waited for together; the conductor starts once they all
serve, since at its start it asks every replica for its transport host and counts it as
serving. start() records each phase's time (cluster.startup; `up --verbose` prints it).

Children are tethered (they die with this process, even by SIGKILL) and each leads its
own process group; once all serve, a supervisor (cluster.supervisor) restarts any that
dies, on its port, or that stops answering its liveness probe (the gRPC children).
Stop: supervision held, SIGTERM to the conductor, then every service (each drains and
unlinks its arena), SIGKILL to the process group of any that outlives the grace period.

Start the cluster from the main thread (or one that lives until stop()): children
started there are killed by the kernel when that thread exits.

Security: unless the deployment says `mesh_tls: false`, start() makes the deployment's
own CA and member certificate (cluster.mesh_ca) in a 0700 directory under the cache root,
removed at stop; every service gets it as `--mesh-tls DIR` (its port and peer streams:
mutual TLS with members only) and so does the conductor (its streams to the services and
their health watches). The deployment's TLS files (--tls-cert/--tls-key/--tls-ca) go to
the conductor (its client port) and the gateway (its link to that port), and, with
`mesh_tls: false`, to the services too. The API key reaches the conductor only, through
its environment (an argument would show in `ps`).
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

from cluster.checkpoints import resolve
from cluster.liveness_probe import LivenessProbe
from cluster.mesh_ca import member_files, up_directory, write_member_files
from cluster.ports import WILDCARD_HOSTS, check_free
from cluster.serve_args import serve_args
from cluster.startup import StartupTimes, wait_all
from cluster.supervisor import Supervisor, SupervisorConfig
from core.bearer import API_KEY_ENV
from conductor.deployment import Deployment
from conductor.metrics_address import metrics_url
from conductor.service_spec import ServiceSpec
from runtime.process import ServiceProcess
from runtime.telemetry import TRACE_STORE_ENV
from runtime.tls import TlsConfig, member_tls

_print_lock = threading.Lock()


def print_line(line: str) -> None:
    with _print_lock:
        print(line, flush=True)


class Cluster:
    """deployment: what to start; path: its file, which the conductor reads itself;
    tls: a runtime.tls.TlsConfig replacing the deployment's; api_key: the conductor's token;
    supervision: restart policy; on_supervision(status) after each supervisor event."""

    def __init__(self, deployment: Deployment, path: str | Path, trace_store: str = "", log=print_line,
                 start_timeout_s: float = 180.0, env: dict[str, str] | None = None, tls=None,
                 api_key: str = "", supervision: SupervisorConfig = SupervisorConfig(), on_supervision=None) -> None:
        self.deployment = deployment
        self.tls = tls or deployment.tls
        self.api_key = api_key
        self.supervisor = Supervisor(supervision, log, on_supervision)
        self.path = str(path)
        self.log = log
        self.start_timeout_s = start_timeout_s
        self.env = {**os.environ, **(env or {})}
        if trace_store:
            self.env[TRACE_STORE_ENV] = trace_store
        self.services: list[ServiceProcess] = []
        self.conductor: ServiceProcess | None = None
        self.gateway: ServiceProcess | None = None
        self.checkpoints: dict[str, Path] = {}
        self.metrics: dict[str, str] = {}  # process name -> its Prometheus /metrics URL
        self.times: StartupTimes | None = None  # where start() spent its time (cluster.startup)
        self.mesh_dir: Path | None = None  # the members' certificate files (module docstring)
        self._made_mesh_dir = False

    @property
    def conductor_address(self) -> str:
        return self.conductor.address

    @property
    def service_tls(self) -> TlsConfig | None:
        """What reaches the services: a member's config, or the deployment's TLS without mesh_tls."""
        return member_tls(self.mesh_dir) if self.mesh_dir is not None else self.tls

    def start(self, times: StartupTimes | None = None) -> "Cluster":
        """Every process SERVING and supervised; `times` (cluster.startup) gets each phase."""
        self.times = times = times or StartupTimes()
        t0 = time.perf_counter()
        with times.phase("port check"):
            check_free(self.addresses())
        try:
            if self.deployment.mesh_tls and self.mesh_dir is None:
                with times.phase("mesh certificates"):
                    self.mesh_dir = write_member_files(up_directory(), member_files(self.deployment.name))
                    self._made_mesh_dir = True
            self._launch_services(times)
            early = [self.gateway] if self.gateway is not None else []
            times.wait(f"{len(self.services)} services{' + gateway' if early else ''} -> SERVING (in parallel)",
                       [*self.services, *early], self.start_timeout_s)
            self.conductor = self._launched(self._conductor(), times)
            times.wait("conductor -> SERVING", [self.conductor], self.start_timeout_s)
            if self.deployment.gateway and self.gateway is None:  # the conductor's port was picked at start
                self.gateway = self._launched(self._gateway(self.conductor.port), times)
                times.wait("gateway -> SERVING", [self.gateway], self.start_timeout_s)
            for proc in [*([self.gateway] if self.gateway else []), self.conductor, *self.services]:
                self.supervisor.watch(proc, self._liveness_probe(proc))
            self.supervisor.start()
        except BaseException:
            self.stop()
            raise
        self.log(f"starmesh | cluster {self.deployment.name!r} up in {time.perf_counter() - t0:.1f} s")
        return self

    def _launched(self, proc: ServiceProcess, times: StartupTimes) -> ServiceProcess:
        times.launching(proc)
        return proc.launch()

    def _launch_services(self, times: StartupTimes) -> None:
        """Every replica launched (the gateway too, when it can be: below). Checkpoints
        that are there are resolved first, so a bad one fails before anything starts;
        a tiny one to build is built just before its first service launches, so the
        services of the others load meanwhile."""
        with times.phase("checkpoints (ready ones)"):
            ready = {n: resolve(ck, self._log_checkpoint, build=False) for n, ck in self.deployment.checkpoints.items()}
        self.checkpoints = {n: path for n, path in ready.items() if path is not None}
        t0, built = time.monotonic(), 0.0
        for s in self.deployment.services.values():
            if s.checkpoint and s.checkpoint not in self.checkpoints:
                t = time.monotonic()
                self.checkpoints[s.checkpoint] = resolve(self.deployment.checkpoints[s.checkpoint],
                                                         self._log_checkpoint)
                built += time.monotonic() - t
            for name, (endpoint, metrics) in replica_processes(s).items():
                self.services.append(self._launched(self._service(s, name, endpoint, metrics), times))
        # The gateway needs the conductor's port only, and connects on its first request:
        # launched now, it starts up while the services load instead of after the conductor.
        if self.deployment.gateway and _port(self.deployment.conductor):
            self.gateway = self._launched(self._gateway(_port(self.deployment.conductor)), times)
        if built:
            times.add("checkpoints (built on first use)", built)
        times.add(f"launch {len(self.services) + (self.gateway is not None)} processes",
                  time.monotonic() - t0 - built)

    def _log_checkpoint(self, message: str) -> None:
        self.log(f"starmesh | {message}")

    def addresses(self) -> dict[str, str]:
        """Process name (+ " metrics") -> the address the deployment gives it: the
        conductor's and every replica's gRPC and /metrics addresses."""
        out = {"conductor": self.deployment.conductor, "conductor metrics": self.deployment.conductor_metrics}
        if self.deployment.gateway:
            out["gateway"] = self.deployment.gateway
        for s in self.deployment.services.values():
            for name, (endpoint, metrics) in replica_processes(s).items():
                out[name] = endpoint
                if metrics:
                    out[f"{name} metrics"] = metrics
        return out

    def supervision(self) -> dict[str, dict]:
        """What the supervisor sees: name -> {pid, address, state, restarts, last_exit,
        is_crash_loop, last_restart_s}."""
        return self.supervisor.status()

    def _service(self, s: ServiceSpec, name: str, endpoint: str, metrics: str = "") -> ServiceProcess:
        """The replica process `name` on `endpoint`, serving /metrics on `metrics`'s port ("": none)."""
        host, _, port = endpoint.rpartition(":")
        args = ["--host", host, *self._metrics_args(name, metrics), *(self._mesh_args() or self._tls_args())]
        checkpoint = str(self.checkpoints[s.checkpoint]) if s.checkpoint else ""
        args += serve_args(s, self.deployment, checkpoint)
        return ServiceProcess(s.component, args, self.env, name, self.start_timeout_s, int(port), log=self.log,
                              die_with_parent=True)

    def _conductor(self) -> ServiceProcess:
        host, _, port = self.deployment.conductor.rpartition(":")
        args = ["--deployment", self.path, "--host", host,
                *self._metrics_args("conductor", self.deployment.conductor_metrics), *self._tls_args(),
                *self._mesh_args()]
        env = {**self.env, API_KEY_ENV: self.api_key} if self.api_key else self.env
        return ServiceProcess("", args, env, "conductor", self.start_timeout_s, int(port), "conductor", self.log,
                              die_with_parent=True)

    def _gateway(self, conductor_port: int) -> ServiceProcess:
        """The HTTP gateway in front of the conductor: the conductor's clients' tokens pass
        through it, so it holds no key; with TLS it presents the mesh certificate."""
        host, _, port = self.deployment.gateway.rpartition(":")
        conductor_host = self.deployment.conductor.rpartition(":")[0]
        if conductor_host in WILDCARD_HOSTS:  # bound everywhere: reached on loopback
            conductor_host = "127.0.0.1"
        args = ["--conductor", f"{conductor_host}:{conductor_port}", "--host", host, *self._tls_args()]
        self.metrics["gateway"] = f"http://{host}:{port}/metrics"
        return ServiceProcess("", args, self.env, "gateway", self.start_timeout_s, int(port), "gateway", self.log,
                              die_with_parent=True)

    def _liveness_probe(self, proc: ServiceProcess) -> LivenessProbe | None:
        """How the supervisor asks a gRPC child whether it still answers (cluster.liveness_probe);
        the gateway speaks HTTP and is watched for its exit only."""
        if proc is self.gateway:
            return None
        tls = self.service_tls if proc in self.services else self.tls

        def address() -> str:  # a wildcard bind is reached on loopback
            host, _, port = proc.address.rpartition(":")
            return f"{'127.0.0.1' if host in WILDCARD_HOSTS else host}:{port}"

        return LivenessProbe(address, tls)

    def _tls_args(self) -> list[str]:
        return self.tls.cli_args() if self.tls is not None else []

    def _mesh_args(self) -> list[str]:
        return ["--mesh-tls", str(self.mesh_dir)] if self.mesh_dir is not None else []

    def _metrics_args(self, name: str, address: str) -> list[str]:
        """The flag serving /metrics on `address`'s port (its host is the process's own,
        conductor/metrics_address.py); none for ""."""
        if not address:
            return []
        self.metrics[name] = metrics_url(address)
        return ["--metrics-port", address.rpartition(":")[2]]

    def endpoints(self) -> dict[str, str]:
        out = {"conductor": self.conductor.address} if self.conductor and self.conductor.port else {}
        if self.gateway is not None and self.gateway.port:
            out["gateway"] = f"http://{self.deployment.gateway.rpartition(':')[0]}:{self.gateway.port}"
        return {**out, **{p.name: p.address for p in self.services if p.port}}

    def stop(self) -> None:
        """Gateway and conductor first (no new work reaches the services), then every service; the
        supervisor restarts nothing meanwhile and ends last (module docstring)."""
        self.supervisor.hold()
        procs = [p for p in (self.gateway, self.conductor) if p is not None] + self.services
        for proc in procs:
            proc.terminate()
        for proc in procs:
            rc = proc.stop(timeout_s=20)
            if rc not in (0, None):
                self.log(f"starmesh | {proc.name} exited with {rc}")
            proc._tmp.cleanup()
        self.supervisor.close()
        if self._made_mesh_dir:  # every member has stopped: nothing reads them again
            shutil.rmtree(self.mesh_dir, ignore_errors=True)
            self.mesh_dir, self._made_mesh_dir = None, False

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def replica_processes(s: ServiceSpec) -> dict[str, tuple[str, str]]:
    """Process name -> (endpoint, metrics address) of each replica: the service's name,
    "-i" appended when it has several."""
    return {s.name if len(s.replicas) == 1 else f"{s.name}-{i}": (e, m)
            for i, (e, m) in enumerate(zip(s.replicas, s.metrics))}


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports, picked below the kernel's ephemeral range: a port
    from that range, released before its server binds it, can meanwhile become the local
    port of any outgoing connection on the machine (a port race seen under a busy test
    suite); ports outside it are only taken by listeners. Held open together while
    picked, so the n are distinct."""
    import contextlib
    import random
    import socket

    low, high = _unclaimed_range()
    with contextlib.ExitStack() as stack:
        picked: list[int] = []
        for port in random.sample(range(low, high), high - low):
            if len(picked) == n:
                break
            s = stack.enter_context(socket.socket())
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            picked.append(port)
        if len(picked) < n:
            raise RuntimeError(f"only {len(picked)} of {n} free loopback ports in {low}-{high}")
        return picked


def _unclaimed_range() -> tuple[int, int]:
    """[low, high) of ports the kernel never hands to outgoing connections: from 10000 to
    the start of its ephemeral range (Linux), or 10000-30000 where it cannot be read."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 10000, 30000
    return (10000, ephemeral_low) if ephemeral_low > 12000 else (1024, ephemeral_low)
