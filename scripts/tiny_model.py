"""Write a tiny random-weight llama model as GGUF, for running a real ``llama-server`` in tests.

No weights can be downloaded, and none are needed: the tests care about how the server
tokenizes, counts and rejects prompts, not about what it says.  The model is a 2-layer llama
(hidden 64) with an embedded byte-level BPE tokenizer (gpt2-style, Qwen2 pre-tokenizer) whose
merges are learned here from a small built-in text, plus ChatML special tokens.  Everything is
deterministic from ``seed``; the file is well under 1 MB and written in about a second.

Usage: ``python scripts/tiny_model.py OUT.gguf [--seed N] [--chat-template FILE]``.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections import Counter
from pathlib import Path

import gguf
import numpy as np

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_LAYER = 2
CONTEXT_LENGTH = 32768  # trained length: caps -c, so keep it above anything a test asks for
N_MERGES = 256
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Text the merges are learned from: chat, support and JSON-ish words like those the tests send.
TRAINING_TEXT = """
You are a helpful assistant for a bike shop. The customer asked about the order status, the
shipping address, the return policy and the replacement parts. The assistant called the tool
get_order with the order id and the tool returned a JSON object with the items, the prices, the
quantity, the status and the tracking number. Then the assistant searched the parts catalog for a
compatible chain, a brake pad, a derailleur hanger, an inner tube and a tire for the road bike.
{"order_id": "4471", "status": "shipped", "items": [{"sku": "CH-11S", "name": "chain", "price": 29.99}]}
{"name": "search_parts", "arguments": {"query": "brake pads", "compatible_with": "road bike"}}
The user wants to create a return for the damaged wheel and asks whether the refund goes to the
original payment method. The assistant explains the policy: returns are accepted within thirty
days, the item must be unused, and the shipping label is sent by email. Thank you for your
patience. Is there anything else I can help you with today? Please let me know the model and the
size of the frame, and I will check the stock in the warehouse and the delivery date.
def function(self, value): return value if value is not None else self.default
"""

# ASCII approximation of llama.cpp's Qwen2 pre-tokenizer regex (letters, single digits,
# punctuation runs, newlines, spaces): only used to decide which merges to learn.
_PRETOKENIZE = re.compile(
    r"'(?:[sStTmMdD]|re|ve|ll)|[^\r\na-zA-Z0-9]?[a-zA-Z]+|[0-9]| ?[^\sa-zA-Z0-9]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-character map, which byte-level BPE vocabularies use."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def learn_merges(text: str, n_merges: int) -> list[tuple[str, str]]:
    """Plain BPE training over the pre-tokenized text; ties broken by the pair itself, so stable."""
    to_unicode = _byte_to_unicode()
    words = Counter(
        tuple(to_unicode[b] for b in piece.encode("utf-8")) for piece in _PRETOKENIZE.findall(text)
    )
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], pair))
        merges.append(best)
        words = Counter({_merge_word(word, best): count for word, count in words.items()})
    return merges


def _merge_word(word: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def build_vocab(merges: list[tuple[str, str]]) -> list[str]:
    tokens = list(_byte_to_unicode().values())
    seen = set(tokens)
    for first, second in merges:
        merged = first + second
        if merged not in seen:
            tokens.append(merged)
            seen.add(merged)
    return [*tokens, *SPECIAL_TOKENS]


def write_tiny_model(path: Path, *, seed: int = 0, chat_template: str | None = None) -> Path:
    """Write the model to ``path`` and return it; same seed and template give the same bytes."""
    rng = np.random.default_rng(seed)
    merges = learn_merges(TRAINING_TEXT, N_MERGES)
    tokens = build_vocab(merges)
    n_vocab = len(tokens)
    special = {name: tokens.index(name) for name in SPECIAL_TOKENS}

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("compacting-proxy tiny test model")
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges([f"{first} {second}" for first, second in merges])
    writer.add_bos_token_id(special["<|endoftext|>"])
    writer.add_eos_token_id(special["<|im_end|>"])
    writer.add_pad_token_id(special["<|endoftext|>"])
    writer.add_add_bos_token(False)  # ChatML templates carry their own markers
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    def weight(*shape: int) -> np.ndarray:
        # numpy (rows, cols) is GGUF ne=[cols, rows], the orientation llama.cpp expects.
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    n_embd_kv = N_EMBD // N_HEAD * N_HEAD_KV
    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    for layer in range(N_LAYER):
        prefix = f"blk.{layer}"
        writer.add_tensor(f"{prefix}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{prefix}.attn_q.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"{prefix}.attn_k.weight", weight(n_embd_kv, N_EMBD))
        writer.add_tensor(f"{prefix}.attn_v.weight", weight(n_embd_kv, N_EMBD))
        writer.add_tensor(f"{prefix}.attn_output.weight", weight(N_EMBD, N_EMBD))
        writer.add_tensor(f"{prefix}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"{prefix}.ffn_gate.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{prefix}.ffn_up.weight", weight(N_FF, N_EMBD))
        writer.add_tensor(f"{prefix}.ffn_down.weight", weight(N_EMBD, N_FF))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", weight(n_vocab, N_EMBD))

    path.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the tiny random-weight test model.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--chat-template", type=Path, help="a .jinja file to embed as tokenizer.chat_template"
    )
    args = parser.parse_args(argv)
    template = args.chat_template.read_text() if args.chat_template else None
    print(write_tiny_model(args.out, seed=args.seed, chat_template=template))
    return 0


if __name__ == "__main__":
    sys.exit(main())
