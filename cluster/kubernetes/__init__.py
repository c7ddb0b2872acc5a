"""Kubernetes manifests from a deployment file (`starmesh render kubernetes`): render.py."""
