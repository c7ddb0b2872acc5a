"""`starmesh render kubernetes`: the manifests that run a deployment file in a cluster.

    starmesh render kubernetes --deployment compose/deployments/local.yaml --image starmesh:cpu \
        --namespace mesh > mesh.yaml && kubectl apply -f mesh.yaml
"""
from __future__ import annotations

import argparse
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
    k.add_argument("--output", "-o", metavar="FILE", help="write here instead of stdout")
    k.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cluster.kubernetes.render import DEFAULT_OTLP, render_kubernetes
    from core.errors import StarmeshError

    otlp = DEFAULT_OTLP if args.otlp_endpoint is None else args.otlp_endpoint
    try:
        text = render_kubernetes(args.deployment, args.image, args.namespace, otlp)
    except (StarmeshError, ValueError) as e:
        print(f"starmesh render kubernetes: {e}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
