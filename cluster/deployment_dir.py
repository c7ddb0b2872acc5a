"""Where the deployment files shipped with starmesh are (compose/deployments/):
`starmesh up`'s default and the layouts cluster/shipped_deployments.py rewrites.

cluster/deployment_files is a link to compose/deployments, so a checkout reads them in
place and a wheel build, which follows the link, installs them as the `cluster`
package's data: an installed starmesh finds them without a checkout. (A module of its
own, importing nothing: the CLI reads the default while building its parser.)
"""
from __future__ import annotations

from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent / "deployment_files"
DEFAULT_DEPLOYMENT = SHIPPED_DIR / "local.yaml"
