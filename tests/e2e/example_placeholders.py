"""What a documented example names that this run has elsewhere: the default deployment's
addresses (it runs on free ports), placeholders (REQUEST_ID, DIR, HOST:PORT, FILE, IMAGE,
an `up`'s mesh certificate directory) and paths outside the run's working directory."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.e2e.doc_examples import Example

# docs/security.md's example of the directory `up` writes its member certificates to
MESH_TLS_EXAMPLE = "~/.cache/starmesh/mesh-tls/up-4711-1a2b3c4d"
# docs/offload.md's host weight cache root: a directory of the run instead
HOST_CACHE_EXAMPLE = "/var/cache/starmesh"


def shipped_addresses(up) -> dict[str, str]:
    """The default deployment's service addresses as shipped -> where this run's `up` serves them."""
    from cluster.deployment_dir import DEFAULT_DEPLOYMENT
    from conductor.deployment_file import load_yaml

    services = load_yaml(DEFAULT_DEPLOYMENT)["services"]
    return {spec["replicas"][0]: up.services[name] for name, spec in services.items() if name in up.services}


def mesh_tls_dir(up) -> str:
    from cluster import supervision_file

    return supervision_file.mesh_tls_dir(up.conductor, Path(up.env["STARMESH_CACHE"]))


def omni_checkpoint(up) -> Path:
    """The tiny Qwen3-Omni checkpoint `up` built for the default deployment."""
    return Path(up.env["STARMESH_CACHE"]) / "tiny" / "qwen3-omni"


def as_run_here(example: Example, up, served: str = "") -> str:
    """The example with this run's addresses and placeholders (tests/e2e/test_readme_examples.py)."""
    text = example.text.replace(".venv/bin/starmesh", "starmesh")
    text = text.replace("127.0.0.1:8000", up.gateway).replace("127.0.0.1:50050", up.conductor)
    text = text.replace("--conductor HOST:PORT", f"--conductor {up.conductor}")
    for shipped, here in shipped_addresses(up).items():
        text = text.replace(shipped, here)
    text = text.replace("127.0.0.1:50051", served).replace("REQUEST_ID", "readme-trace")
    text = re.sub(r"\bstarmesh status\b", f"starmesh status --deployment {up.deployment}", text)
    text = text.replace("generate --checkpoint DIR", "generate --checkpoint text-dir")
    text = text.replace("--checkpoint DIR", f"--checkpoint {omni_checkpoint(up)}")
    text = text.replace(MESH_TLS_EXAMPLE, mesh_tls_dir(up)).replace(HOST_CACHE_EXAMPLE, "host-cache")
    text = text.replace("--deployment FILE", f"--deployment {up.deployment}")
    text = text.replace("--image IMAGE", "--image starmesh:cpu")
    if shutil.which("aplay") is None:
        text = re.sub(r"\s*\|\s*aplay\b[^\n]*", " -o played.pcm", text)
    return text
