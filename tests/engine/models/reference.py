"""What transformers computes for the same tiny checkpoints (the parity reference)."""
from __future__ import annotations

from pathlib import Path

import torch


def hf_model(path: Path, family: str):
    import transformers as tf

    if family == "qwen3_omni_moe":
        return tf.Qwen3OmniMoeForConditionalGeneration.from_pretrained(path).thinker.eval()
    return tf.AutoModelForCausalLM.from_pretrained(path).eval()


@torch.no_grad()
def hf_greedy(path: Path, family: str, prompt: list[int], num_new: int) -> tuple[list[int], torch.Tensor]:
    """(new ids, logits [num_new, vocab] fp32) of greedy decoding with transformers."""
    model = hf_model(path, family)
    if family == "qwen3_omni_moe":  # the thinker alone has no generate(); a plain greedy loop
        seq, logits = list(prompt), []
        for _ in range(num_new):
            last = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
            logits.append(last)
            seq.append(int(last.argmax()))
        return seq[len(prompt):], torch.stack(logits)
    out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=num_new, min_new_tokens=0,
                         output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), torch.stack([step[0] for step in out.logits]).float()


@torch.no_grad()
def hf_hidden_states(path: Path, family: str, prompt: list[int]) -> tuple[torch.Tensor, ...]:
    """HF hidden_states for the prompt: index 0 = embeddings, ..., last = final normed."""
    model = hf_model(path, family)
    out = model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
    return tuple(h[0] for h in out.hidden_states)
