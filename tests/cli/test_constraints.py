"""constraints.txt (scripts/lock_constraints.sh) agrees with pyproject.toml: every
dependency of the package and of the extras CI installs is pinned, at a version inside its
declared range, so `pip install -c constraints.txt` (scripts/setup.sh) can resolve."""
from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
CI_EXTRAS = ("test", "mooncake", "reference")  # what scripts/setup.sh installs


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_dependency_is_pinned_inside_its_range():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in CI_EXTRAS:
        declared += project["optional-dependencies"][extra]
    pins = _pins()
    for text in declared:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} (pyproject.toml) is not in constraints.txt: run scripts/lock_constraints.sh"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject.toml's {req.specifier}"


def test_pins_are_portable():
    pins = _pins()
    assert "starmesh" not in pins  # the project itself is what is installed
    # no local labels: torch==2.13.0 is met by the CPU wheel (2.13.0+cpu) and a CUDA build alike
    assert all(v.local is None for v in pins.values()), [f"{n}=={v}" for n, v in pins.items() if v.local]
