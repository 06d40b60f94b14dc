"""The tiny byte-level BPE ``tokenizer.json`` in the layout S2 Pro / s2.cpp expects.

Trained with the HuggingFace ``tokenizers`` library on a small English corpus embedded below;
the S2 control tokens and the semantic tokens are then appended as *special* added tokens:

    ids 0..255                 byte-level alphabet (GPT-2 byte order, so "\\n" == "Ċ" == 198,
                               the id s2.cpp hard-codes)
    ids 256..B-1               BPE merges learned from the corpus
    ids B..                    <|endoftext|>, <|im_start|>, <|im_end|>, modality and
                               speaker tokens (see CONTROL_TOKENS)
    ids S..S+codebook_size-1   <|semantic:0|> .. <|semantic:{codebook_size-1}|>

s2.cpp reads the <|im_start|>, <|im_end|> and <|voice|> ids from this file but takes the
semantic id range from the GGUF metadata; ``tiny_model`` reads the semantic range back from
this file so that both agree. Command line: ``tools/make_tiny_tokenizer.py`` (``main``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

NEWLINE_ID = 198  # s2.cpp hard-codes this id for "\n" when it builds the prompt

# Same normalizer / pre-tokenizer structure as the Qwen2/Qwen3 tokenizer.json that
# S2 Pro ships.  (s2.cpp ignores both: it splits on whitespace only, does no NFC
# normalization, and then applies the byte-level BPE merges.)
QWEN_SPLIT_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CONTROL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|phoneme_start|>",
    "<|phoneme_end|>",
    "<|text|>",
    "<|voice|>",
    "<|interleave|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<|pad|>",
] + [f"<|speaker:{i}|>" for i in range(8)]

# A few paragraphs of plain English (written for this tool) so the merges look
# like an ordinary small BPE vocabulary.  The strings s2.cpp puts into every
# prompt are included so they tokenize into a handful of pieces.
CORPUS = """
convert the provided text to speech
convert the provided text to speech reference to the following:

Text:
Speech:
system
user
assistant
The quick brown fox jumps over the lazy dog near the river bank.
A small model can still speak, if the weights are chosen with care.
We tested the voice on a quiet morning, and the sound was clear and warm.
Please read the following sentence slowly and with a calm voice.
She said that the weather would be bright and sunny all through the weekend.
Music, speech and noise are all just waves of pressure moving through the air.
The engineer checked every number twice before she wrote the final report.
Hello world, this is a test of the tiny text to speech system.
Good evening, and welcome to the studio where every voice is heard.
It was the best of times, it was the worst of times, it was the age of wisdom.
Open the window, let the light in, and listen to the birds outside.
Numbers like one, two, three and four are spoken in many different ways.
The children played in the garden while their parents talked about the news.
A reference recording helps the model copy the speaker's tone and pace.
The codec turns audio into codes, and the codes back into audio again.
Speak clearly, pause at the commas, and stop at the end of each sentence.
Every morning the baker makes fresh bread for the people of the town.
This sentence is only here to give the tokenizer a few more words to learn.
Where are you going? I am going to the station to meet my friend.
They walked along the beach, watching the waves roll in from the sea.
"""


def build_tokenizer(codebook_size: int, bpe_vocab: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],  # added afterwards so the alphabet keeps ids 0..255
    )
    lines = [line for line in CORPUS.splitlines()]
    # Repeat the corpus so that pairs pass min_frequency; also feed whole
    # paragraphs separated by blank lines and some indented text, so that
    # multi-newline / multi-space tokens ("ĊĊ", "ĠĠ") exist as in Qwen's vocab.
    paragraphs = "\n\n".join(lines[i] for i in range(0, len(lines), 2))
    indented = "\n".join("    " + line for line in lines[:12])
    tok.train_from_iterator(lines * 3 + [CORPUS, paragraphs, paragraphs, indented, indented], trainer=trainer)

    base = tok.get_vocab_size(with_added_tokens=False)
    specials = CONTROL_TOKENS + [f"<|semantic:{i}|>" for i in range(codebook_size)]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])

    vocab = tok.get_vocab(with_added_tokens=True)
    if vocab.get("Ċ") != NEWLINE_ID:
        raise RuntimeError(f"newline token 'Ċ' got id {vocab.get('Ċ')}, expected {NEWLINE_ID}")
    first = vocab["<|endoftext|>"]
    if first != base:
        raise RuntimeError(f"special tokens do not start right after the BPE vocab ({first} != {base})")
    return tok



def make_tiny_tokenizer(out: str | Path, codebook_size: int = 128, bpe_vocab: int = 512) -> dict:
    """Write the tiny ``tokenizer.json`` to ``out``; returns the ids a model file must agree with."""
    if bpe_vocab < 256:
        raise ValueError("bpe_vocab must be at least 256 (the byte alphabet)")
    tok = build_tokenizer(codebook_size, bpe_vocab)
    tok.save(str(out))
    vocab = tok.get_vocab(with_added_tokens=True)
    return {
        "bpe_vocab": tok.get_vocab_size(with_added_tokens=False),
        "total_tokens": tok.get_vocab_size(with_added_tokens=True),
        "im_start": vocab["<|im_start|>"],
        "im_end": vocab["<|im_end|>"],
        "voice": vocab["<|voice|>"],
        "semantic_begin": vocab["<|semantic:0|>"],
        "semantic_end": vocab[f"<|semantic:{codebook_size - 1}|>"],
        "newline": vocab["Ċ"],
    }


def main(argv=None) -> int:
    """Command line (``tools/make_tiny_tokenizer.py``): write the file, print its ids as JSON."""
    ap = argparse.ArgumentParser(prog="make_tiny_tokenizer.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output tokenizer.json path")
    ap.add_argument("--codebook-size", type=int, default=128,
                    help="number of <|semantic:N|> tokens (= fish_speech.codebook_size of the GGUF)")
    ap.add_argument("--bpe-vocab", type=int, default=512,
                    help="size of the byte-level BPE vocabulary before special tokens (>= 256)")
    a = ap.parse_args(argv)
    try:
        info = make_tiny_tokenizer(a.out, a.codebook_size, a.bpe_vocab)
    except ValueError as err:
        ap.error(str(err))
    json.dump(info, sys.stdout, indent=1)
    print()
    return 0
