"""`starmesh render kubernetes`: the manifests that run a deployment file in a cluster.

    starmesh render kubernetes --deployment compose/deployments/local.yaml --image starmesh:cpu \
        --namespace mesh > mesh.yaml && kubectl apply -f mesh.yaml
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("render", help="write manifests that run a deployment file elsewhere (Kubernetes)")
    targets = p.add_subparsers(dest="target", metavar="TARGET", required=True)
    k = targets.add_parser("kubernetes", help="Deployments, headless Services, PodDisruptionBudgets and the "
                                              "conductor's ConfigMap, Deployment and Service (docs/kubernetes.md)")
    k.add_argument("--deployment", required=True, metavar="FILE", help="the deployment file `starmesh up` runs")
    k.add_argument("--image", required=True, metavar="IMAGE", help="the starmesh container image (compose/Dockerfile)")
    k.add_argument("--namespace", default="default", metavar="NS")
    k.add_argument("--otlp-endpoint", default=None, metavar="URL",
                   help="where every pod sends its spans (default http://otel-collector:4317; '' for nowhere)")
    k.add_argument("--mesh-tls", metavar="DIR",
                   help="put the member certificates in DIR (ca.pem, member.pem, member.key: `python -m "
                        "cluster.mesh_ca DIR` makes a set) into the starmesh-mesh-tls Secret instead of a new set, "
                        "so that rendering again keeps the mesh's CA")
    k.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout (it holds the members' "
                                                          "private key: keep it as secret as the key)")
    k.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cluster.kubernetes.render import DEFAULT_OTLP, render_kubernetes
    from core.errors import StarmeshError

    otlp = DEFAULT_OTLP if args.otlp_endpoint is None else args.otlp_endpoint
    try:
        files = _mesh_files(args.mesh_tls) if args.mesh_tls else None
        text = render_kubernetes(args.deployment, args.image, args.namespace, otlp, files)
    except (StarmeshError, ValueError) as e:
        print(f"starmesh render kubernetes: {e}", file=sys.stderr)
        return 2
    if args.output:
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a private key
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)  # a file that was there keeps no wider mode
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _mesh_files(directory: str) -> dict[str, bytes]:
    """The member files in `directory`, checked as a member would load them."""
    from runtime.tls import MEMBER_FILES, member_tls

    member_tls(directory)  # InvalidArgument naming --mesh-tls and the missing or bad file
    return {name: (Path(directory) / name).read_bytes() for name in MEMBER_FILES.values()}
