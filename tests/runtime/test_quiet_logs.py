"""A starmesh process at INFO prints no third-party progress bar and no known-harmless
transformers warning, still prints every other warning, and prints them all again at
DEBUG (--log-level, $STARMESH_LOG_LEVEL): runtime.quiet_logs, in a fresh interpreter as
every starmesh command runs it (cli.main quiets before a command imports transformers)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from tests.e2e.doc_examples import REPO

pytestmark = pytest.mark.timeout(300)

PROBE = textwrap.dedent("""
    import sys
    from runtime.quiet_logs import quiet_third_party
    quiet_third_party(sys.argv[2] if len(sys.argv) > 2 else None)
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging
    AutoConfig.from_pretrained(sys.argv[1] + "/omni")                      # the multimodal rope keys
    getattr(transformers, "Qwen2VLImageProcessor")                          # the PIL fallback, without torchvision
    AutoModelForCausalLM.from_pretrained(sys.argv[1] + "/text")             # a weights-loading progress bar
    rope = logging.get_logger("transformers.modeling_rope_utils")
    rope.warning("Unrecognized keys in `rope_parameters` for 'rope_type'='default': {'mrope_section', 'foo'}")
    logging.get_logger("transformers.modeling_utils").warning("a warning of another kind")
""")
HARMLESS = ("mrope keys", "requires torchvision", "Loading weights")
REAL = ("{'mrope_section', 'foo'}", "a warning of another kind")


def _harmless(out: str) -> list[str]:
    """Which of HARMLESS `out` shows (the mrope keys: an unrecognized-keys line without 'foo')."""
    lines = out.splitlines()
    rope = any("Unrecognized keys" in ln and "'foo'" not in ln for ln in lines)
    return [h for h in HARMLESS if (rope if h == "mrope keys" else h in out)]


@pytest.fixture(scope="module")
def checkpoints(tiny_omni, tmp_path_factory):
    from engine.checkpoints.tiny_text import make_tiny

    root = tmp_path_factory.mktemp("quiet")
    (root / "omni").symlink_to(tiny_omni, target_is_directory=True)
    make_tiny("qwen3", root / "text")
    return root


def _probe(checkpoints, *args: str, env_level: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("STARMESH_LOG_LEVEL", "HF_HUB_DISABLE_PROGRESS_BARS")}
    if env_level:
        env["STARMESH_LOG_LEVEL"] = env_level
    done = subprocess.run([sys.executable, "-c", PROBE, str(checkpoints), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def test_info_leaves_out_the_noise_and_keeps_real_warnings(checkpoints):
    out = _probe(checkpoints)
    assert not _harmless(out), out
    assert all(r in out for r in REAL), out


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_brings_everything_back(checkpoints, how):
    out = _probe(checkpoints, "DEBUG") if how == "flag" else _probe(checkpoints, env_level="debug")
    shown = _harmless(out)
    expected = list(HARMLESS)
    if importlib.util.find_spec("torchvision") is not None:  # then there is no fallback to warn of
        expected.remove("requires torchvision")
    assert shown == expected, out
    assert all(r in out for r in REAL), out


@pytest.fixture
def quieted(monkeypatch):
    """quiet_third_party in this process, undone afterwards."""
    import logging

    from runtime.quiet_logs import KNOWN_HARMLESS, quiet_third_party

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    monkeypatch.setenv("STARMESH_LOG_LEVEL", "INFO")
    assert quiet_third_party()
    yield
    for name in KNOWN_HARMLESS:
        logger = logging.getLogger(name)
        for f in [f for f in logger.filters if type(f).__name__ == "_KnownHarmless"]:
            logger.removeFilter(f)


def test_a_stream_closed_early_is_not_an_opentelemetry_error_but_other_detach_failures_are(quieted, caplog):
    """The gRPC instrumentation's span context of a stream a client closed early is reset
    in another context (a known bug of the instrumentation): dropped. Any other failure
    to detach still shows."""
    import asyncio
    import logging

    from opentelemetry import context

    async def stream():
        token = context.attach(context.set_value("span", 1))
        try:
            yield 1
        finally:
            context.detach(token)

    async def close_early() -> None:
        events = stream()
        await asyncio.create_task(anext(events))  # started in the handler's task...
        await events.aclose()                      # ...closed from another

    with caplog.at_level(logging.ERROR, logger="opentelemetry.context"):
        asyncio.run(close_early())
        assert not caplog.records
        context.detach(object())  # a token that is no token
    assert [r.getMessage() for r in caplog.records] == ["Failed to detach context"]


def test_a_status_the_peer_no_longer_awaits_is_not_an_error_but_other_failed_batches_are(quieted, caplog):
    """grpc logs a Run stream's final status that could not be sent, because the peer had
    already finished the call (the peer stopped first): dropped. A batch with any other
    failed operation still shows."""
    import logging

    from grpc._cython import cygrpc

    log = logging.getLogger("grpc._cython.cygrpc")
    message = "ExecuteBatchError raised in core by servicer method [/starmesh.v1.Component/Run]"
    status_only = 'Failed "execute_batch": (<grpc._cython.cygrpc.SendStatusFromServerOperation object at 0x1>,)'
    with_message = ('Failed "execute_batch": (<grpc._cython.cygrpc.SendMessageOperation object at 0x2>, '
                    '<grpc._cython.cygrpc.SendStatusFromServerOperation object at 0x1>)')
    with caplog.at_level(logging.ERROR, logger="grpc._cython.cygrpc"):
        for text in (status_only, with_message):
            try:
                raise cygrpc.ExecuteBatchError(text)
            except cygrpc.ExecuteBatchError:
                log.exception(message)
    assert [str(r.exc_info[1]) for r in caplog.records] == [with_message]
