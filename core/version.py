"""The starmesh version, whether installed or run from a checkout."""
from __future__ import annotations

import functools
from importlib import metadata
from pathlib import Path


@functools.cache
def starmesh_version() -> str:
    try:
        return metadata.version("starmesh")
    except metadata.PackageNotFoundError:
        pass
    # A checkout that is not pip-installed (PYTHONPATH=.): read pyproject.toml.
    import tomllib

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        return tomllib.loads(pyproject.read_text())["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"
