"""Write the Hugging Face reference outputs the loader tests compare toykv against.

The test command needs neither torch nor transformers: toykv's logits, greedy tokens and
token ids are compared with what transformers computed here, once, and committed:

- tests/data/hf_tiny/<name>/: four tiny random checkpoints saved by transformers (Llama untied
  and tied, Mistral with a sliding window, a bf16 checkpoint in shards), and
  tests/data/references/hf_tiny.npz: transformers' logits and greedy tokens for each.
- tests/data/references/smollm2_logits.npz and smollm2.json: transformers reading the same
  SmolLM2-135M-Instruct GGUF toykv reads (same dequantized weights): logits, greedy tokens and
  text, tokenizer ids and chat-template text, a few weight entries, its config.

Every file records the versions that wrote it. To regenerate (a maintainer, after changing what
is compared; about a minute on 2 cores), from the repository root:

    pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    pip install transformers==5.24.0 accelerate==1.15.0
    PYTHONPATH=. python tests/make_references.py

then run `pytest tests/test_loaders.py tests/test_gguf.py -o addopts=""` and commit tests/data.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"              # before transformers is imported: no hub
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

import numpy as np
import torch
import transformers

DATA = Path(__file__).parent / "data"
REFERENCES = DATA / "references"

# -- tiny checkpoints ----------------------------------------------------------------------
TINY = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
            bos_token_id=None, eos_token_id=None, pad_token_id=None)   # nothing stops greedy
TINY_MODELS = {             # name -> (family, config changes, save as bf16 shards)
    "llama_untied": ("llama", dict(tie_word_embeddings=False, rope_theta=10000.0), False),
    "llama_tied_theta1e6": ("llama", dict(tie_word_embeddings=True, rope_theta=1e6), False),
    "mistral_window8": ("mistral", dict(sliding_window=8, rope_theta=1000.0), False),
    "llama_bf16_sharded": ("llama", dict(tie_word_embeddings=True, rope_theta=500.0), True),
}
PROMPT = [1, 7, 42, 19, 3, 60, 18, 33]
SEQUENCE = PROMPT + [5, 57, 31, 2, 50, 11, 46, 63, 8, 59, 23, 14, 36, 40, 0, 27]  # 24 > window 8
GREEDY_TOKENS = 16

# -- SmolLM2 -------------------------------------------------------------------------------
LOGIT_COLUMNS = 512         # logits kept at every position: these many vocabulary ids
GREEDY_SMOLLM2 = 24
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one short sentence."},
     {"role": "user", "content": "Why do language models cache keys and values?"}],
]
TOKENIZER_TEXTS = [
    "The KV cache stores the keys and values of every past token.",
    "Grüße aus Köln! 東京は大きい。Привет, мир! مرحبا بالعالم 🙂👍🏽",
    "café naïve résumé vs cafe\u0301 (decomposed)",
    "  leading spaces\n\n\ttabs\t\tand   runs   \r\n trailing  ",
    "\n\n\n",
    "    def f(x):\n        return x ** 2  # squared\n",
    "In 2024, 3.14159 × 10^6 = 3141590; call 555-0199.",
    "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>two<|endoftext|><jupyter_code>print(1)<jupyter_output>",
    "",
    " ",
]
CHAT_EXAMPLES = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
]


def versions() -> dict:
    import gguf
    import tokenizers
    from importlib.metadata import version
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "gguf": version("gguf"),
            "numpy": np.__version__, "python": sys.version.split()[0],
            "written_by": "tests/make_references.py"}


def tiny_model(family: str, changes: dict, seed: int):
    """A tiny random transformers model with weights wide enough for attention to matter."""
    Config, Model = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                     "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM)}[family]
    torch.manual_seed(seed)
    model = Model(Config(**TINY, **changes, attn_implementation="eager"))
    with torch.no_grad():          # HF's init (std 0.02) makes attention near-uniform: widen it
        for param in model.parameters():
            if param.ndim == 1:
                param.copy_(1 + 0.2 * torch.randn_like(param))
            else:                                         # [out, in]: variance 1/in
                param.copy_(torch.randn_like(param) / param.shape[1] ** 0.5)
    return model.eval()


def greedy(model, prompt, n, use_cache=True, **kwargs):
    ids = torch.tensor([prompt])
    with torch.no_grad():         # an explicit mask: else ids equal to pad_token_id are masked
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                             do_sample=False, use_cache=use_cache, **kwargs)
    return out[0, len(prompt):].tolist()


def logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def write_tiny():
    out = {"prompt": np.array(PROMPT), "sequence": np.array(SEQUENCE),
           "versions": np.array(json.dumps(versions()))}
    for seed, (name, (family, changes, bf16)) in enumerate(TINY_MODELS.items()):
        model = tiny_model(family, changes, seed)
        folder = DATA / "hf_tiny" / name
        shutil.rmtree(folder, ignore_errors=True)
        if bf16:
            model = model.to(torch.bfloat16)
            model.save_pretrained(folder, max_shard_size="20KB")
            # reload in float32: model.float() would keep RoPE's inv_freq rounded to bf16
            model = type(model).from_pretrained(folder, dtype=torch.float32).eval()
        else:
            model.save_pretrained(folder)
        out[f"{name}/logits"] = logits(model, SEQUENCE)
        out[f"{name}/greedy"] = np.array(greedy(model, PROMPT, GREEDY_TOKENS))
        out[f"{name}/greedy_no_cache"] = np.array(greedy(model, PROMPT, GREEDY_TOKENS, False))
    np.savez_compressed(REFERENCES / "hf_tiny.npz", **out)


def write_smollm2():
    from toykv.smollm2 import smollm2_gguf_path      # the same file toykv's tests read
    path = smollm2_gguf_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None       # fixed-length greedy runs
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True,
                                             return_dict=False) for c in CHATS]
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]

    full = logits(model, prompts[0])                                  # [T, vocab]
    columns = np.sort(np.random.default_rng(0).choice(full.shape[1], LOGIT_COLUMNS, replace=False))
    state = model.state_dict()
    arrays = {
        "prompt": np.array(prompts[0]), "columns": columns,
        "logits_columns": full[:, columns],                           # [T, 512]
        "logits_last": full[-1],                                      # [vocab]
        "top5": np.argsort(-full, axis=1)[:, :5],                     # [T, 5]
        # a few weights as transformers holds them ([out, in]; Q and K un-permuted by it)
        "q_proj_0_cols": state["model.layers.0.self_attn.q_proj.weight"][:, :4].numpy(),
        "k_proj_7_cols": state["model.layers.7.self_attn.k_proj.weight"][:, :4].numpy(),
        "embed_rows": state["model.embed_tokens.weight"][[0, 2, 100, 49151]].numpy(),
        "versions": np.array(json.dumps(versions())),
    }
    np.savez_compressed(REFERENCES / "smollm2_logits.npz", **arrays)

    greedy_runs = []
    for prompt in prompts:
        ids = greedy(model, prompt, GREEDY_SMOLLM2)
        model.generation_config.eos_token_id = tokenizer.eos_token_id    # the reply alone
        reply = greedy(model, prompt, 64)
        model.generation_config.eos_token_id = None
        greedy_runs.append({"prompt": prompt, "greedy": ids,
                            "greedy_text": tokenizer.decode(ids, skip_special_tokens=False),
                            "reply": reply,
                            "reply_text": tokenizer.decode(reply, skip_special_tokens=True)})
    c = model.config
    text = {
        "versions": versions(),
        "gguf_file": path.name,
        "config": {k: getattr(c, k) for k in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "intermediate_size", "max_position_embeddings",
            "rms_norm_eps", "tie_word_embeddings", "head_dim")}
        | {"rope_theta": c.rope_parameters["rope_theta"]},
        "special": {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
                    "pad_token_id": tokenizer.pad_token_id, "vocab_size": len(tokenizer)},
        "chats": CHATS,
        "greedy": greedy_runs,
        "texts": [{"text": t, "ids": tokenizer.encode(t),
                   "decoded": tokenizer.decode(tokenizer.encode(t), skip_special_tokens=False),
                   "decoded_skip": tokenizer.decode(tokenizer.encode(t), skip_special_tokens=True)}
                  for t in TOKENIZER_TEXTS],
        "chat_examples": [
            {"messages": m, "generation_prompt": g,
             "text": tokenizer.apply_chat_template(m, add_generation_prompt=g, tokenize=False),
             "ids": tokenizer.encode(tokenizer.apply_chat_template(
                 m, add_generation_prompt=g, tokenize=False), add_special_tokens=False)}
            for m in CHAT_EXAMPLES for g in (True, False)],
    }
    (REFERENCES / "smollm2.json").write_text(json.dumps(text, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    torch.set_num_threads(1)      # tiny matrices: threads only add waiting (and noise)
    REFERENCES.mkdir(parents=True, exist_ok=True)
    write_tiny()
    torch.set_num_threads(2)
    write_smollm2()
    for file in sorted(DATA.rglob("*")):
        if file.is_file():
            print(f"{file.stat().st_size:>9,}  {file.relative_to(DATA.parent.parent)}")
