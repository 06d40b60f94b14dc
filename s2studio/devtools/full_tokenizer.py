"""A synthetic ``tokenizer.json`` with the *full-size* S2 Pro id layout, for the full-size model.

The real S2 Pro tokenizer (Qwen3 BPE + Fish control tokens + 4096 semantic tokens) is not
available here. For performance work on a full-size model the only thing that matters is that
the ids agree with the GGUF metadata, so this keeps the tiny BPE of ``tiny_tokenizer`` (ids
0..B-1, "\\n" = 198) and pads the id space up to the real boundaries:

    ids 0..B-1            byte-level BPE from tiny_tokenizer.build_tokenizer()
    ids B..151642         unreachable filler vocab entries ``<|filler_N|>``
                          (no merge produces them; they only occupy ids)
    151643                <|endoftext|>   (Qwen3 id)
    151644                <|im_start|>    (Qwen3 id)
    151645                <|im_end|>      (Qwen3 id)
    151646..              the other S2 control tokens of tiny_tokenizer
                          (<|voice|> = 151649, speakers ...), then
                          <|reserved_N|> specials up to 151677
    151678..155773        <|semantic:0|> .. <|semantic:4095|>

155774 tokens in all; the model generators round the GGUF vocab up to a multiple of 8 = 155776,
the real value. Which real ids the Fish control tokens (<|voice|> ...) have is not known; only
the Qwen3 ones and the semantic range are taken from the real model.

Text tokenizes with the tiny BPE, so prompts are longer (more tokens per word) than with the
real Qwen3 vocabulary. Command line: ``tools/make_full_tokenizer.py`` (``main``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tokenizers import Tokenizer

from .tiny_tokenizer import CONTROL_TOKENS, build_tokenizer


def added(content: str, idx: int) -> dict:
    return {"id": idx, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def build_full_tokenizer_json(first_special: int = 151643, semantic_begin: int = 151678,
                              codebook_size: int = 4096, bpe_vocab: int = 512) -> str:
    # tiny BPE + control tokens right after it; only the BPE part is kept
    base = build_tokenizer(codebook_size=0, bpe_vocab=bpe_vocab)
    j = json.loads(base.to_str())
    vocab = j["model"]["vocab"]
    n_bpe = base.get_vocab_size(with_added_tokens=False)
    for tok in j["added_tokens"]:
        vocab.pop(tok["content"], None)
    if sorted(vocab.values()) != list(range(n_bpe)):
        raise ValueError("unexpected BPE id layout")
    if first_special < n_bpe:
        raise ValueError(f"first_special {first_special} < BPE size {n_bpe}")
    for i in range(n_bpe, first_special):
        vocab[f"<|filler_{i}|>"] = i

    controls = list(CONTROL_TOKENS)  # <|endoftext|>, <|im_start|>, <|im_end|>, ... (Qwen order first)
    n_reserved = semantic_begin - first_special - len(controls)
    if n_reserved < 0:
        raise ValueError("not enough room for the control tokens below semantic_begin")
    specials = controls + [f"<|reserved_{i}|>" for i in range(n_reserved)]
    specials += [f"<|semantic:{i}|>" for i in range(codebook_size)]
    j["added_tokens"] = [added(t, first_special + k) for k, t in enumerate(specials)]
    return json.dumps(j, ensure_ascii=False)


def make_full_tokenizer(out: str | os.PathLike, first_special: int = 151643, semantic_begin: int = 151678,
                        codebook_size: int = 4096, bpe_vocab: int = 512) -> dict:
    """Write the full-layout ``tokenizer.json`` to ``out`` after checking its ids with the HF
    library; returns those ids and an example encoding."""
    text = build_full_tokenizer_json(first_special, semantic_begin, codebook_size, bpe_vocab)
    tok = Tokenizer.from_str(text)  # validates the JSON with the HF library
    v = tok.get_vocab(with_added_tokens=True)
    checks = {
        "newline": (tok.encode("\n").ids, [198]),
        "im_start": (v["<|im_start|>"], first_special + 1),
        "im_end": (v["<|im_end|>"], first_special + 2),
        "semantic_begin": (v["<|semantic:0|>"], semantic_begin),
        "semantic_end": (v[f"<|semantic:{codebook_size - 1}|>"], semantic_begin + codebook_size - 1),
    }
    bad = {k: got for k, (got, want) in checks.items() if got != want}
    if bad:
        raise ValueError(f"id check failed: {bad}")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    info = {k: got for k, (got, _) in checks.items()}
    info.update(voice=v["<|voice|>"], total_tokens=tok.get_vocab_size(with_added_tokens=True),
                bpe_learned=sum(1 for t in v if not t.startswith("<|")),
                example=tok.encode("<|im_start|>user\nHello world.<|im_end|>").ids)
    return info


def main(argv=None) -> int:
    """Command line (``tools/make_full_tokenizer.py``): write the file, print its ids as JSON."""
    ap = argparse.ArgumentParser(prog="make_full_tokenizer.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--first-special", type=int, default=151643, help="id of <|endoftext|> (Qwen3: 151643)")
    ap.add_argument("--semantic-begin", type=int, default=151678)
    ap.add_argument("--codebook-size", type=int, default=4096)
    ap.add_argument("--bpe-vocab", type=int, default=512)
    a = ap.parse_args(argv)
    try:
        info = make_full_tokenizer(a.out, a.first_special, a.semantic_begin, a.codebook_size, a.bpe_vocab)
    except ValueError as err:
        raise SystemExit(str(err))
    json.dump(info, sys.stdout, indent=1)
    print()
    return 0
