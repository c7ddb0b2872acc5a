"""BAGEL through `starmesh gateway` as the official `openai` SDK drives it (the gateway
tests' mesh serves the tiny BAGEL as `bagel`): image generations, edits (multipart, one
image or a list) and chat (image_url parts answered in text; modalities ["image"]
answered with an image) equal what the starmesh CLI makes for the same request through
the same conductor; bad input is a 400 or 404 naming the field."""
from __future__ import annotations

import base64
import io
import json

import openai
import pytest
from PIL import Image

from tests.gateway.gateway_mesh import starmesh
from tests.pipelines.bagel_cases import VAE_RULE, image

pytestmark = pytest.mark.timeout(300)
QUICK = {"steps": 3, "seed": 1}  # a short flow; guidance at its defaults (text 3.0, image 1.5)
PROMPT, EDIT = "a red fox in the snow", "now make it snowy"


@pytest.fixture(scope="module")
def picture(tmp_path_factory) -> tuple[bytes, str]:
    """An input image (a 48x40 PNG) and its path."""
    path = tmp_path_factory.mktemp("bagel") / "in.png"
    image(48, 40, seed=5).save(path)
    return path.read_bytes(), str(path)


def _imagine(mesh, tmp_path, *args: str) -> bytes:
    out = tmp_path / "out.png"
    done = starmesh("imagine", "--conductor", mesh.conductor, "--model", "bagel", *args, "-o", str(out),
                    "--steps", "3", "--seed", "1")
    assert done.returncode == 0, done.stderr
    assert "denoising [" in done.stderr and "2/2" in done.stderr  # the bar moved per Euler update
    return out.read_bytes()


def _size(png: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(png)).size


def test_generations_equal_starmesh_imagine(sdk, mesh, tmp_path):
    ref = _imagine(mesh, tmp_path, PROMPT, "--size", "32x48")
    got = sdk.images.generate(model="bagel", prompt=PROMPT, size="32x48", response_format="b64_json",
                              extra_body=QUICK)
    png = base64.b64decode(got.data[0].b64_json)
    assert png == ref and _size(png) == (32, 48)


def test_edits_equal_starmesh_imagine_with_an_image(sdk, mesh, tmp_path, picture):
    data, path = picture
    ref = _imagine(mesh, tmp_path, "--image", path, EDIT)
    one = sdk.images.edit(model="bagel", image=("in.png", data, "image/png"), prompt=EDIT, extra_body=QUICK)
    listed = sdk.images.edit(model="bagel", image=[("in.png", data, "image/png")], prompt=EDIT, extra_body=QUICK)
    for got in (one, listed):
        png = base64.b64decode(got.data[0].b64_json)
        assert png == ref and _size(png) == VAE_RULE.shape(48, 40)  # the resized input's size (w, h)
    two = sdk.images.edit(model="bagel", image=("in.png", data, "image/png"), prompt=EDIT, n=2, extra_body=QUICK)
    assert len(two.data) == 2 and two.data[0].b64_json != two.data[1].b64_json  # seeds 1 and 2


def test_chat_answers_about_an_image_as_starmesh_speak(sdk, mesh, picture):
    data, path = picture
    done = starmesh("speak", "--conductor", mesh.conductor, "--model", "bagel", "--image", path, "--text",
                    "what is in the picture?", "--text-only", "--max-text-tokens", "6", "--json")
    assert done.returncode == 0, done.stderr
    ref = json.loads(done.stdout)
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    got = sdk.chat.completions.create(model="bagel", max_tokens=6, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what is in the picture?"}]}])
    assert ref["text_ids"] and got.choices[0].message.content == ref["text"]
    assert got.usage.completion_tokens == len(ref["text_ids"])


def test_chat_with_image_modality_answers_with_the_generated_image(sdk, mesh):
    ref = sdk.images.generate(model="bagel", prompt=PROMPT, size="32x32", extra_body=QUICK).data[0].b64_json
    got = sdk.chat.completions.create(model="bagel", modalities=["image"], messages=[{"role": "user", "content": PROMPT}],
                                      extra_body={**QUICK, "width": 32, "height": 32})
    images = got.choices[0].message.images
    assert images[0]["image_url"]["url"] == "data:image/png;base64," + ref
    chunks = list(sdk.chat.completions.create(model="bagel", modalities=["image"], stream=True,
                                              messages=[{"role": "user", "content": PROMPT}],
                                              extra_body={**QUICK, "width": 32, "height": 32}))
    streamed = [part for c in chunks if c.choices for part in (getattr(c.choices[0].delta, "images", None) or [])]
    assert [p["image_url"]["url"] for p in streamed] == [images[0]["image_url"]["url"]]


UNKNOWN_CONTEXT = "ctx_" + "0" * 32
BAD = [  # (images.edit or images.generate keyword arguments, the field named, status)
    ("edit", {"image": ("in.png", b"\x89PNG\r\n\x1a\nnot an image", "image/png")}, "image", 400),
    ("edit", {"image": ("in.txt", b"hello", "text/plain")}, "image", 400),
    ("generate", {"size": "33x32"}, "size", 400),
    ("generate", {"size": "big"}, "size", 400),
    ("generate", {"extra_body": {"steps": 1}}, "steps", 400),
    ("edit", {"extra_body": {"steps": 1}}, "steps", 400),
    ("generate", {"extra_body": {"cfg_text_scale": -1.0}}, "cfg_text_scale", 400),
    ("edit", {"extra_body": {"cfg_img_scale": -0.5}}, "cfg_img_scale", 400),
    ("edit", {"extra_body": {"steps": "many"}}, "steps", 400),
    ("edit", {"mask": ("m.png", b"\x89PNG\r\n\x1a\n", "image/png")}, "mask", 400),
    ("generate", {"extra_body": {"context_id": UNKNOWN_CONTEXT}}, "context_id", 404),
    ("edit", {"extra_body": {"context_id": UNKNOWN_CONTEXT}}, "context_id", 404),
]


@pytest.mark.parametrize("kind, kwargs, field, status", BAD)
def test_bad_input_names_the_field(sdk, picture, kind, kwargs, field, status):
    data, _ = picture
    base = {"model": "bagel", "prompt": EDIT, "extra_body": dict(QUICK)}
    if kind == "edit" and "image" not in kwargs:
        base["image"] = ("in.png", data, "image/png")
    base["extra_body"].update(kwargs.pop("extra_body", {}))
    with pytest.raises(openai.APIStatusError) as e:
        (sdk.images.edit if kind == "edit" else sdk.images.generate)(**base, **kwargs)
    assert e.value.status_code == status, e.value.body
    assert e.value.body["param"] == field and field in e.value.body["message"], e.value.body


def test_chat_bad_image_and_modality_name_the_field(sdk):
    bad = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\nnot an image").decode()
    with pytest.raises(openai.BadRequestError) as e:
        sdk.chat.completions.create(model="bagel", max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": bad}}, {"type": "text", "text": "what is this?"}]}])
    assert e.value.body["param"].startswith("messages[0].content[0]"), e.value.body
    with pytest.raises(openai.BadRequestError) as e:
        sdk.chat.completions.create(model="sd3", modalities=["text"], messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["param"] == "modalities"
