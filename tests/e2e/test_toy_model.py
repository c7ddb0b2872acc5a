"""toy-tagger, the model defined only by its folders and one registry entry: its
component against a direct torch forward of the checkpoint's weights; `starmesh up` from
its shipped deployment file (the tiny checkpoint built into a temporary cache), a
Generate through the Python client giving the reference tags as text, ListModels'
card, a clean stop; and no other file of the tree names the model."""
from __future__ import annotations

import ast
import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from client.call_failed import CallFailed
from client.events import TextDelta, Usage
from client.generate_call import GenerateCall
from client.session import ConductorSession
from cluster import supervision_file
from cluster.registry import build_component, build_tiny
from core.errors import InvalidArgument
from runtime.items import NodeDone, NodeOutput, OpenNode
from tests.fixtures.processes import children, port_open, printed_endpoints, wait_for_line
from tests.fixtures.services import describe

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
DEPLOYMENT = "compose/deployments/toy-tagger.yaml"
PROMPT = "Hello, mesh! 42 bytes ü"
OWN = ("engine/models/toy_tagger/", "pipelines/toy_tagger/", "services/toy_tagger/", DEPLOYMENT)


def reference_tags(checkpoint: Path, data: bytes) -> list[int]:
    """The tags by plain torch ops on the safetensors weights (not the engine's module)."""
    w = load_file(str(checkpoint / "model.safetensors"))
    x = w["embed.weight"][torch.tensor(list(data))]                                 # [n, E]
    h = torch.nn.functional.gelu(x @ w["hidden.weight"].T + w["hidden.bias"])     # [n, H]
    logits = h @ w["out.weight"].T + w["out.bias"]                                 # [n, L]
    top2 = logits.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 1e-4  # no near tie: float rounding cannot flip a tag
    return logits.argmax(dim=-1).tolist()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_tiny("toy-tagger", tmp_path_factory.mktemp("toy") / "tiny", seed=0)


def test_component_tags_equal_a_direct_forward(checkpoint):
    tagger = build_component("tagger", checkpoint=str(checkpoint))
    prompts = {"a": PROMPT.encode(), "b": b"tiny\tbatch", "c": PROMPT.encode()}
    for rid, data in prompts.items():  # opened together: one engine step tags all three
        params = {"max_len": 5.0} if rid == "c" else {}  # a Struct's number is a float
        tagger.open(OpenNode(rid, "tag", params=params), {"prompt": torch.tensor(list(data), dtype=torch.uint8)})
    events = tagger.step()
    assert not tagger.has_work()
    tags = {e.request_id: e.tensors["tags"] for e in events if isinstance(e, NodeOutput)}
    assert sorted(e.request_id for e in events if isinstance(e, NodeDone)) == ["a", "b", "c"]
    assert tags["a"].dtype == torch.int64 and tags["a"].shape == (len(prompts["a"]),)
    assert tags["a"].tolist() == reference_tags(checkpoint, prompts["a"])
    assert tags["b"].tolist() == reference_tags(checkpoint, prompts["b"])
    assert tags["c"].tolist() == reference_tags(checkpoint, prompts["a"][:5])
    assert len(set(tags["a"].tolist())) > 1  # the random weights tell bytes apart


@pytest.mark.parametrize("inputs, params, field", [
    ({}, {}, "open.inputs"),
    ({"prompt": torch.zeros(3, dtype=torch.int64)}, {}, "open.inputs[prompt]"),
    ({"prompt": torch.zeros(0, dtype=torch.uint8)}, {}, "open.inputs[prompt]"),
    ({"prompt": torch.zeros(3, dtype=torch.uint8)}, {"max_len": 0}, "params.max_len"),
])
def test_bad_input_is_refused_naming_the_field(checkpoint, inputs, params, field):
    tagger = build_component("tagger", checkpoint=str(checkpoint))
    with pytest.raises(InvalidArgument, match=field.replace("[", r"\[")):
        tagger.open(OpenNode("bad", "tag", params=params), inputs)
    assert not tagger.has_work()


@pytest.mark.parametrize("config, field", [
    ({"labels": ["a b", "c"]}, "config.labels"),
    ({"hidden_dim": 8}, r"hidden.bias has shape \[32\], config.json says \[8\]"),
])
def test_a_bad_checkpoint_is_refused_naming_the_field(tmp_path, config, field):
    bad = build_tiny("toy-tagger", tmp_path / "bad")
    (bad / "config.json").write_text(json.dumps({**json.loads((bad / "config.json").read_text()), **config}))
    with pytest.raises(InvalidArgument, match=field):
        build_component("tagger", checkpoint=str(bad))


def test_the_tiny_checkpoint_is_its_seed(checkpoint, tmp_path):
    again, other = build_tiny("toy-tagger", tmp_path / "again"), build_tiny("toy-tagger", tmp_path / "other", seed=1)
    assert (again / "model.safetensors").read_bytes() == (checkpoint / "model.safetensors").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (checkpoint / "model.safetensors").read_bytes()


async def _calls(conductor: str) -> tuple[dict, list, list, CallFailed]:
    """ListModels; the prompt tagged whole, then cut to 4 bytes; then a bad max_len."""
    async with ConductorSession(conductor) as session:
        async def generate(params: dict) -> list:
            return [e async for e in session.generate(GenerateCall("toy-tagger", text=PROMPT, params=params))]

        cards, full, short = await session.models(), await generate({}), await generate({"max_len": 4})
        with pytest.raises(CallFailed) as refused:
            await generate({"max_len": 0})
    return cards, full, short, refused.value


def test_starmesh_up_serves_the_toy_model_from_its_deployment_file(tmp_path):
    env = {**os.environ, "STARMESH_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    up = subprocess.Popen([sys.executable, "-m", "cli", "up", "--deployment", DEPLOYMENT], cwd=REPO, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        endpoints = printed_endpoints(wait_for_line(up, "Ctrl-C stops everything", 240))
        conductor = endpoints.pop("conductor")
        members = supervision_file.member_tls_of(conductor, tmp_path / "cache")  # `up`'s member certificates
        arena = describe(endpoints["tagger"], members).arena
        pids = children(up.pid)
        cards, events, short, refused = asyncio.run(_calls(conductor))
    finally:
        up.send_signal(signal.SIGTERM)
        rest = up.communicate(timeout=120)[0]
    assert up.returncode == 0, rest[-3000:]

    checkpoint = tmp_path / "cache" / "tiny" / "toy-tagger"  # what `up` built and served
    labels = json.loads((checkpoint / "config.json").read_text())["labels"]
    want = reference_tags(checkpoint, PROMPT.encode())
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [i for d in deltas for i in d.token_ids] == want
    assert "".join(d.text for d in deltas).split() == [labels[i] for i in want]  # decoded by its tokenizer
    assert isinstance(events[-1], Usage) and events[-1].completion_tokens == len(want)
    assert [i for e in short if isinstance(e, TextDelta) for i in e.token_ids] == want[:4]
    assert refused.code == "INVALID_ARGUMENT" and "params.max_len" in refused.message

    card = cards["toy-tagger"]
    assert card.accepts_text and card.output_modalities == ("text",) and card.outputs == {"tags": "text"}
    assert (card.params["max_len"].min, card.params["max_len"].max) == (1, 1 << 16)

    assert len(pids) == 2  # the tagger service and the conductor
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]
    assert not [a for a in (conductor, *endpoints.values()) if port_open(a)]
    assert not os.path.exists(f"/dev/shm/{arena}")


def _registry_entry_lines() -> range:
    """The lines of toy-tagger's ModelEntry in cluster/registry.py's MODELS."""
    tree = ast.parse((REPO / "cluster" / "registry.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ModelEntry" and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "toy-tagger":
            return range(node.lineno, node.end_lineno + 1)
    raise AssertionError("cluster/registry.py has no ModelEntry for toy-tagger")


def test_the_model_lives_in_its_folders_and_one_registry_entry():
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    entry, stray = _registry_entry_lines(), []
    for rel in listed:
        path = REPO / rel
        if rel.split("/")[0] in ("tests", "bench", "docs") or rel.startswith(OWN) or path.is_symlink() \
                or not path.is_file():
            continue
        for number, line in enumerate(path.read_bytes().decode(errors="replace").splitlines(), 1):
            if ("toy_tagger" in line or "toy-tagger" in line) and not (rel == "cluster/registry.py"
                                                                      and number in entry):
                stray.append(f"{rel}:{number}: {line.strip()[:80]}")
    assert not stray, "toy-tagger named outside its folders and registry entry:\n" + "\n".join(stray)
    assert all((REPO / own).exists() for own in OWN)
