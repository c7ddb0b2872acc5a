"""What a starmesh process logs: ours at the level asked, third-party noise only when debugging.

    level = configure_logging(args.log_level)   # servers: basicConfig in our format
    quiet_third_party(level)                    # every command, before transformers loads

The level is `--log-level` where a command has it, else $STARMESH_LOG_LEVEL, else INFO.
Above DEBUG, what a user cannot act on is left out:

- progress bars of Hugging Face libraries (weights loading, shards written): off through
  HF_HUB_DISABLE_PROGRESS_BARS, which transformers and huggingface_hub read when they are
  imported, and which the children of `starmesh up` inherit; a value the user set wins;
- records of transformers and OpenTelemetry known to be harmless here (`KNOWN_HARMLESS`),
  dropped by a filter on the logger that emits each one. Every other record still shows.

At DEBUG everything shows, as the libraries print it.
"""
from __future__ import annotations

import asyncio
import logging
import os

LEVEL_ENV = "STARMESH_LOG_LEVEL"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PROGRESS_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"

# The multimodal rope keys of a checkpoint's config, which the engine reads itself;
# transformers' validation of the plain rope does not know them.
MROPE_KEYS = frozenset({"interleaved", "mrope_interleaved", "mrope_section"})


def _rope_keys_we_read(record: logging.LogRecord) -> bool:
    """"Unrecognized keys in `rope_parameters` for 'rope_type'='default': {...}" naming
    only keys of MROPE_KEYS."""
    message = record.getMessage()
    if not message.startswith("Unrecognized keys in `rope_parameters`"):
        return False
    listed = message.rpartition(": ")[2].strip("{} ")
    keys = {k.strip(" '\"") for k in listed.split(",") if k.strip()}
    return bool(keys) and keys <= MROPE_KEYS


def _pil_image_fallback(record: logging.LogRecord) -> bool:
    """An image processor that wants torchvision falling back to its PIL twin: the
    same preprocessing, which the encoder's fidelity tests check against."""
    return "requires torchvision (not installed); falling back to" in record.getMessage()


def _stream_closed_early(record: logging.LogRecord) -> bool:
    """OpenTelemetry's gRPC instrumentation ending the span of a streamed call that was
    closed before its end (the client left, or cancelled once it had what it wanted):
    the generator is finalized in another context, where its token cannot be reset. The
    span still ends; nothing failed (a known bug of the instrumentation)."""
    exc = record.exc_info[1] if record.exc_info else None
    return (record.getMessage() == "Failed to detach context" and isinstance(exc, ValueError)
            and "created in a different Context" in str(exc)
            and isinstance(exc.__context__, (GeneratorExit, asyncio.CancelledError)))


def _status_to_a_finished_call(record: logging.LogRecord) -> bool:
    """grpc failing to send a Run stream's final status because its peer had already
    finished the call (the peer's process stopped first, as every process does at a
    cluster's stop): nothing is lost, the peer no longer listens. Only the status
    operation failed; any other failed batch is still logged."""
    exc = record.exc_info[1] if record.exc_info else None
    return ("ExecuteBatchError raised in core by servicer method" in record.getMessage()
            and type(exc).__name__ == "ExecuteBatchError"
            and str(exc).count("Operation object") == 1 and "SendStatusFromServerOperation" in str(exc))


# logger name -> tests of the records it emits that say nothing a user can act on
KNOWN_HARMLESS = {
    "transformers.modeling_rope_utils": (_rope_keys_we_read,),
    "transformers.utils.import_utils": (_pil_image_fallback,),
    "opentelemetry.context": (_stream_closed_early,),
    "grpc._cython.cygrpc": (_status_to_a_finished_call,),
}


class _KnownHarmless(logging.Filter):
    def __init__(self, tests) -> None:
        super().__init__()
        self.tests = tests

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(test(record) for test in self.tests)


def level_name(level: str | None = None) -> str:
    """The level asked for: `level`, else $STARMESH_LOG_LEVEL, else INFO (upper case)."""
    return (level or os.environ.get(LEVEL_ENV) or "INFO").upper()


def configure_logging(level: str | None = None) -> str:
    """The root logger at the level asked for, in starmesh's format; returns the level."""
    name = level_name(level)
    logging.basicConfig(level=name, format=FORMAT)
    return name


def quiet_third_party(level: str | None = None) -> bool:
    """Leaves third-party noise out unless the level asked for is DEBUG (or lower);
    returns whether it did. Idempotent; imports none of the libraries it quiets."""
    value = logging.getLevelName(level_name(level))
    if isinstance(value, int) and value <= logging.DEBUG:
        return False
    os.environ.setdefault(PROGRESS_BARS_ENV, "1")
    for name, tests in KNOWN_HARMLESS.items():
        logger = logging.getLogger(name)  # the same object the library's module gets later
        if not any(isinstance(f, _KnownHarmless) for f in logger.filters):
            logger.addFilter(_KnownHarmless(tests))
    return True
