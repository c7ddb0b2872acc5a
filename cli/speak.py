"""`starmesh speak`: one streaming speech request through a conductor; the audio goes to
a mono 16-bit WAV file (at the model's sample rate, from ListModels) as its chunks arrive.

    starmesh speak --model qwen3-omni --text "Hello there" -o out.wav
    starmesh speak --model omni --tokenizer ckpt/qwen3-omni --text "Hello there" -o out.wav
    starmesh speak --model qwen3-omni --input-ids 256,259,10,97,257,10,256,260,10 -o out.wav --json
    starmesh speak --model orpheus --text "Hello there" --voice tara -o out.wav
    starmesh speak --model qwen3-omni --audio question.wav -o answer.wav
    starmesh speak --model qwen3-omni --image photo.png --text "What is this?" -o answer.wav
    starmesh speak --model qwen3-omni --video clip.gif --text "What happens?" -o answer.wav
    starmesh speak --model qwen3-omni --video clip.gif --text "What happens?" --text-only

--audio (a WAV file), --image (PNG or JPEG) and --video (an animated GIF) go to the
conductor as content parts of one user message, before --text if given; the encoder
service decodes them. --text-only asks for the answer's text alone (no talker, no
code2wav run) and prints it instead of writing a WAV file.

--text goes to the conductor, which applies the checkpoint's own tokenizer and chat
template; with --tokenizer DIR it is tokenized here instead (a conductor without the
tokenizer). An Orpheus model (--model orpheus, or any model given --voice) reads --text
as "{voice}: {text}" in the Orpheus prompt, and its requests carry Orpheus' sampling
defaults (temperature 0.6, top-p 0.8, repetition penalty 1.3) unless given
(cli/model_specifics.py).

Prints time to first audio, real-time factor, audio seconds and chunk count; --json
prints {"text_ids", "codec_codes", "ttfa_ms", "rtf", "audio_s", "num_chunks"} instead.
Exit status: 0 done, 1 the request failed (conductor down, unknown model, rejected
input), 2 bad arguments or an output file that cannot be written.
"""
from __future__ import annotations

import argparse
import json
import sys

MEDIA = ("audio", "image", "video")  # the media options, as client.speech names them

from cli.connection_args import add_client_args, conductor_address, connection_from_args
from cli.model_specifics import client_prompt_ids, preset_params
from cli.wav_sink import WavSink


def add_parser(sub) -> None:
    p = sub.add_parser("speak", help="speak through a conductor (streaming speech model) into a WAV file",
                       description="One streaming speech request; the WAV file grows as audio chunks arrive.")
    p.add_argument("--model", required=True, help="served model name (one ListModels reports: `starmesh status`); "
                                                  "its sample rate, voices and outputs come from the conductor")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text", help="user text, wrapped in the model's chat template and tokenized by the conductor "
                                    "(or here, with --tokenizer)")
    src.add_argument("--input-ids", help="comma-separated chat-formatted prompt ids, e.g. 256,259,10")
    p.add_argument("--audio", metavar="IN.wav", help="a spoken question or sound (WAV) for the model to hear")
    p.add_argument("--image", metavar="IN.png", help="an image (PNG or JPEG) for the model to see")
    p.add_argument("--video", metavar="IN.gif", help="a video (animated GIF) for the model to watch")
    p.add_argument("--text-only", action="store_true", help="ask for the text answer alone and print it")
    p.add_argument("--tokenizer", metavar="DIR",
                   help="checkpoint directory whose tokenizer reads --text here (default: the conductor's)")
    p.add_argument("-o", "--output", metavar="OUT.wav", help="WAV file to write (mono PCM16; not with --text-only)")
    p.add_argument("--max-frames", type=int, help="at most this many codec steps (12.5 frames per second of audio)")
    p.add_argument("--min-frames", type=int, help="suppress the codec's end before this many steps")
    p.add_argument("--max-text-tokens", type=int, help="at most this many text tokens")
    p.add_argument("--speaker", help="talker voice, e.g. ethan or chelsie")
    p.add_argument("--voice", help="a voice model's voice (default tara): --text becomes its speech prompt")
    p.add_argument("--temperature", type=float, help="sampling temperature (a voice model's preset: 0.6)")
    p.add_argument("--seed", type=int)
    p.add_argument("--request-id", default="", help="request id (default: the conductor assigns one); "
                                                     "`starmesh trace ID` reads its spans")
    p.add_argument("--json", action="store_true",
                   help='print {"text_ids", "codec_codes", "ttfa_ms", "rtf", "audio_s", "num_chunks"}')
    add_client_args(p, aliases=("--address",))
    p.set_defaults(func=run)


def prompt_ids(args: argparse.Namespace) -> list[int] | None:
    """The request's prompt ids (None: --text goes to the conductor's tokenizer); ValueError
    naming the bad id or option."""
    has_media = any(getattr(args, k, None) is not None for k in MEDIA)
    if args.text is None and args.input_ids is None and not has_media:
        raise ValueError("give --text, --input-ids, --audio, --image or --video")
    if has_media and (args.input_ids is not None or args.tokenizer):
        raise ValueError("--audio/--image/--video go to the conductor's chat template: not with --input-ids or "
                         "--tokenizer")
    if has_media:
        return None
    if args.text is not None and not args.text:
        raise ValueError("--text is empty")
    if args.text is not None and not args.tokenizer:
        return None
    if args.text is not None:
        return client_prompt_ids(args)
    ids = []
    for part in args.input_ids.split(","):
        part = part.strip()
        if not part.lstrip("-").isdigit():
            raise ValueError(f"--input-ids: {part!r} is not an integer id")
        if int(part) < 0:
            raise ValueError(f"--input-ids: {part} is negative")
        ids.append(int(part))
    if not ids:
        raise ValueError("--input-ids is empty")
    return ids


def media_bytes(args: argparse.Namespace) -> dict:
    """{"audio": bytes, "image": bytes, "video": bytes} of the files given (OSError naming a missing one)."""
    out = {}
    for name in MEDIA:
        path = getattr(args, name, None)
        if path is not None:
            with open(path, "rb") as f:
                out[name] = f.read()
    return out


def request_params(args: argparse.Namespace) -> dict:
    """CLI options -> the conductor's request params (only those given)."""
    names = {"max_frames": "max_frames", "min_frames": "min_frames", "max_text_tokens": "max_new_tokens",
             "speaker": "speaker", "seed": "seed", "temperature": "temperature"}
    params = preset_params(args)
    for option, param in names.items():
        value = getattr(args, option, None)
        if value is not None:
            if isinstance(value, int) and value < 0:
                raise ValueError(f"--{option.replace('_', '-')} must be >= 0, got {value}")
            params[param] = value
    return params


def _describe(code: str, details: str, address: str, model: str) -> str:
    """A failed call (its gRPC status name and details) as one line that names the problem."""
    if code == "UNAVAILABLE":
        return f"conductor at {address} is unavailable (UNAVAILABLE): {details}"
    if code == "INVALID_ARGUMENT" and details.startswith("model "):
        return f"{details} (INVALID_ARGUMENT)"  # the details name the model
    if code == "DEADLINE_EXCEEDED":
        return f"no answer from {address} in time (DEADLINE_EXCEEDED): {details}"
    return f"request failed ({code}): {details}"


class _NoOutput(Exception):
    """The -o file could not be opened (exit status 2, as for bad arguments)."""


async def _speak(args, connection, ids: list[int] | None, params: dict, media: dict):
    """(summary, sink, sample rate): the model's card first (its sample rate sizes the WAV
    header; a model that is not served or makes no audio fails before any file is made),
    then the request, each audio chunk appended to the WAV file as it arrives."""
    from client.session import ConductorSession, model_card
    from client.speech import speak

    text_only = bool(getattr(args, "text_only", False))
    async with ConductorSession(connection) as session:
        card = await model_card(session, args.model)
        if not text_only and not card.makes("audio"):
            from client.call_failed import CallFailed

            raise CallFailed("INVALID_ARGUMENT", f"model {args.model!r} makes no audio (it makes "
                                                 f"{list(card.output_modalities)}); use --text-only")
        try:
            sink = WavSink(args.output, card.sample_rate) if args.output else None
        except OSError as e:
            raise _NoOutput(str(e)) from None

        def on_event(ev) -> None:
            if ev.kind == "audio" and sink is not None:
                sink.write(ev.value)

        try:
            summary = await speak(session, args.model, ids, params, on_event=on_event, timeout_s=args.timeout,
                                  request_id=args.request_id, text=(args.text or "") if ids is None else "",
                                  text_only=text_only, **media)
        except BaseException:
            if sink is not None:
                sink.close(keep=sink.num_samples > 0)  # the audio that arrived stays playable
            raise
    return summary, sink, card.sample_rate


def run(args: argparse.Namespace) -> int:
    import asyncio

    import grpc

    from client.call_failed import CallFailed
    from core.errors import StarmeshError

    address = conductor_address(args)
    try:
        connection = connection_from_args(args, address)
        if bool(args.text_only) == bool(args.output):
            raise ValueError("give -o OUT.wav or --text-only (one of them)")
        ids, params, media = prompt_ids(args), request_params(args), media_bytes(args)
        summary, sink, rate = asyncio.run(_speak(args, connection, ids, params, media))
    except (ValueError, OSError, StarmeshError, _NoOutput) as e:
        print(f"starmesh speak: {e}", file=sys.stderr)
        return 2
    except CallFailed as e:
        print(f"starmesh speak: {_describe(e.code, e.message, address, args.model)}", file=sys.stderr)
        return 1
    except grpc.aio.AioRpcError as e:
        print(f"starmesh speak: {_describe(e.code().name, e.details() or '', address, args.model)}",
              file=sys.stderr)
        return 1
    if sink is not None:
        sink.close()
    _report(args, summary, rate)
    return 0


def _report(args, summary, rate: int) -> None:
    if getattr(args, "text_only", False):  # as `starmesh generate` prints an answer
        print(json.dumps({"text": summary.text, "text_ids": summary.text_ids}) if args.json else summary.text,
              flush=True)
        return
    if args.json:
        print(json.dumps(summary.as_json()), flush=True)
        return
    ttfa = "-" if summary.ttfa_ms is None else f"{summary.ttfa_ms:.1f} ms"
    rtf = "-" if summary.rtf is None else f"{summary.rtf:.3f}"
    print(f"wrote {args.output}: {summary.audio_s:.2f} s of audio at {summary.sample_rate or rate} Hz\n"
          f"time to first audio  {ttfa}\n"
          f"real-time factor     {rtf} (wall / audio seconds)\n"
          f"audio seconds        {summary.audio_s:.3f}\n"
          f"chunks               {summary.num_chunks}\n"
          f"text ids             {len(summary.text_ids)}, codec frames {len(summary.codec_codes)}", flush=True)
