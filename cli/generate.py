"""`starmesh generate`: the KV-cache engine in-process (no services), offline.

    starmesh generate --checkpoint DIR --input-ids 1,2,3 --max-new-tokens 16 --json
    starmesh generate --checkpoint DIR --requests reqs.jsonl     # one continuously batched workload
"""
from __future__ import annotations

import argparse
import json
import sys

SAMPLING = ("max_new_tokens", "temperature", "top_p", "top_k", "seed", "repetition_penalty")


def add_parser(sub) -> None:
    p = sub.add_parser("generate", help="generate tokens with the in-process engine (no services)",
                       description="Greedy or sampled generation from a Hugging Face checkpoint.")
    p.add_argument("--checkpoint", required=True, metavar="DIR")
    p.add_argument("--text-part", default="", metavar="PART",
                   help="a composite checkpoint's part whose text model runs (config PART_config.text_config, "
                        "tensors PART.*), e.g. thinker")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="text (needs tokenizer files in the checkpoint)")
    src.add_argument("--input-ids", help="comma-separated token ids, e.g. 1,2,3")
    src.add_argument("--requests", metavar="FILE.jsonl",
                     help='one request per line: {"prompt" | "input_ids", sampling fields...}')
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    p.add_argument("--no-cuda-graphs", action="store_true", help="on CUDA, run decode steps eagerly")
    p.add_argument("--json", action="store_true", help='print {"output_ids": [...], "text": ...}')
    p.set_defaults(func=run)


def _tokenizer(path):
    """The checkpoint's tokenizer (engine.models.loader found its files), or None."""
    if path is None:
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def _prompt_ids(spec: dict, tokenizer) -> list[int]:
    if "input_ids" in spec:
        ids = spec["input_ids"]
        return [int(t) for t in (ids.split(",") if isinstance(ids, str) else ids) if str(t).strip() != ""]
    if tokenizer is None:
        raise ValueError("--prompt needs tokenizer files in the checkpoint; pass --input-ids instead")
    return tokenizer(spec["prompt"])["input_ids"]


def _requests(args: argparse.Namespace) -> list[dict]:
    defaults = {k: getattr(args, k) for k in SAMPLING if getattr(args, k) is not None}
    if args.requests:
        with open(args.requests) as f:
            return [{**defaults, **json.loads(line)} for line in f if line.strip()]
    spec = {"prompt": args.prompt} if args.prompt is not None else {"input_ids": args.input_ids}
    return [{**defaults, **spec}]


def run(args: argparse.Namespace) -> int:
    from engine.llm_engine import EngineConfig, LLMEngine
    from engine.sampling_params import TextParams
    from core.errors import StarmeshError

    try:
        engine = LLMEngine.from_checkpoint(EngineConfig(checkpoint=args.checkpoint, text_part=args.text_part,
                                                        dtype=args.dtype, device=args.device,
                                                        cuda_graphs=not args.no_cuda_graphs))
        tokenizer = _tokenizer(engine.model.tokenizer_path)
        eos = engine.model.config.eos_token_ids
        for i, spec in enumerate(_requests(args)):
            params = TextParams.from_params({k: spec[k] for k in SAMPLING if k in spec}).sampling(eos)
            engine.add_request(str(spec.get("request_id", i)), _prompt_ids(spec, tokenizer), params)
    except (StarmeshError, ValueError, OSError) as e:
        print(f"starmesh generate: {e}", file=sys.stderr)
        return 2
    while engine.has_work():
        for out in engine.step():
            if out.is_finished:
                _print(args, out, tokenizer)
    return 0


def _print(args, out, tokenizer) -> None:
    text = tokenizer.decode(out.output_ids) if tokenizer is not None else None
    if args.json or args.requests:
        print(json.dumps({"request_id": out.request_id, "output_ids": out.output_ids, "text": text,
                          "finish_reason": out.finish_reason}), flush=True)
    else:
        print(text if text is not None else " ".join(map(str, out.output_ids)), flush=True)
