"""One mesh and gateway for every gateway test (package scope: it takes the longest)."""
from __future__ import annotations

import pytest

from tests.gateway.gateway_mesh import KEY, gateway_mesh


@pytest.fixture(scope="package")
def mesh(tiny_omni):
    with gateway_mesh(tiny_omni) as m:
        yield m


@pytest.fixture(scope="package")
def sdk(mesh):
    from openai import OpenAI

    with OpenAI(base_url=f"{mesh.url}/v1", api_key=KEY, max_retries=0, timeout=120) as client:
        yield client
