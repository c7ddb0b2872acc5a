"""A Prometheus scrape config for every /metrics target of a deployment: the conductor,
each service replica and the HTTP gateway, one static target each, labelled with its
process name (`process`, as `starmesh up` and `starmesh status` name it) and its role
(`role`: conductor, service or gateway). Labels the processes' own series never carry,
so Prometheus adds them without renaming anything.

    starmesh up --prometheus-config prometheus.yml          # the local mesh's, written at start
    python -m cluster.prometheus_config DEPLOYMENT [-o FILE]  # any deployment file's

compose/prometheus/prometheus.yml is this config for compose/deployments/compose.yaml
(the compose service names as targets); tests/cluster/test_dashboards.py keeps them equal.
"""
from __future__ import annotations

import argparse
import sys

import yaml

from cluster.launcher import replica_processes
from cluster.ports import WILDCARD_HOSTS

SCRAPE_INTERVAL = "5s"  # the dashboard's rates need a few samples per minute of a short test run
JOB = "starmesh"


def targets(deployment) -> list[tuple[str, str, str]]:
    """(process, role, "host:port") of every /metrics endpoint the deployment serves, the
    conductor first, the gateway last; a process without one is left out."""
    out = [("conductor", "conductor", deployment.conductor_metrics)]
    for spec in deployment.services.values():
        out += [(name, "service", metrics) for name, (_, metrics) in replica_processes(spec).items()]
    if deployment.gateway:  # the gateway serves /metrics on its HTTP port
        out.append(("gateway", "gateway", deployment.gateway))
    return [(name, role, _reachable(address)) for name, role, address in out if address]


def _reachable(address: str) -> str:
    """A bound-everywhere address is scraped on loopback (the config is for this host's Prometheus)."""
    host, _, port = address.rpartition(":")
    return f"127.0.0.1:{port}" if host in WILDCARD_HOSTS else address


def scrape_config(deployment) -> dict:
    static = [{"targets": [address], "labels": {"process": name, "role": role}}
              for name, role, address in targets(deployment)]
    return {"global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": [{"job_name": JOB, "metrics_path": "/metrics", "static_configs": static}]}


def render(deployment, source: str = "") -> str:
    """The config as YAML text, with a header naming where it came from."""
    header = (f"# Prometheus scrape config for deployment {deployment.name!r}"
              f"{f' ({source})' if source else ''}: every process's /metrics.\n"
              "# Written by cluster/prometheus_config.py (`starmesh up --prometheus-config FILE`,\n"
              "# `python -m cluster.prometheus_config DEPLOYMENT -o FILE`); regenerate rather than edit.\n")
    return header + yaml.safe_dump(scrape_config(deployment), sort_keys=False, width=120)


def write(deployment, path: str, source: str = "") -> None:
    with open(path, "w") as f:
        f.write(render(deployment, source))


def main(argv: list[str] | None = None) -> int:
    from cluster.launchable import read_launchable

    p = argparse.ArgumentParser(prog="python -m cluster.prometheus_config",
                                description="Print (or write) the Prometheus scrape config of a deployment file.")
    p.add_argument("deployment", metavar="FILE")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--source", default="", help="how the header names the deployment (default: FILE)")
    args = p.parse_args(argv)
    text = render(read_launchable(args.deployment), args.source or args.deployment)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
