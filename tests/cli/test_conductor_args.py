"""Every command that calls a conductor names it the same way: --conductor HOST:PORT,
else $STARMESH_CONDUCTOR, else 127.0.0.1:50050 (`speak --address` is an alias), and
takes --timeout S."""
from __future__ import annotations

import pytest

from cli.connection_args import conductor_address
from cli.main import build_parser

NEEDS = {"speak": ["--model", "m", "--text", "hi", "-o", "o.wav"], "imagine": ["--prompt", "p", "-o", "o.png"],
         "rollout": ["--frames", "f", "--actions", "a", "--states", "s"],
         "plan": ["--frames", "f", "--actions", "a", "--states", "s", "--goal", "g"]}


@pytest.mark.parametrize("command", sorted(NEEDS))
def test_conductor_and_timeout_flags(command, monkeypatch):
    parser = build_parser()
    monkeypatch.delenv("STARMESH_CONDUCTOR", raising=False)
    args = parser.parse_args([command, *NEEDS[command], "--conductor", "h:1", "--timeout", "2.5"])
    assert conductor_address(args) == "h:1" and args.timeout == 2.5
    monkeypatch.setenv("STARMESH_CONDUCTOR", "env:2")
    assert conductor_address(parser.parse_args([command, *NEEDS[command]])) == "env:2"
    monkeypatch.delenv("STARMESH_CONDUCTOR")
    assert conductor_address(parser.parse_args([command, *NEEDS[command]])) == "127.0.0.1:50050"


def test_speak_address_is_an_alias():
    args = build_parser().parse_args(["speak", *NEEDS["speak"], "--address", "h:3"])
    assert conductor_address(args) == "h:3"
