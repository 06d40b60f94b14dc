"""A tiny byte-level BPE ``tokenizer.json`` in the layout S2 Pro / s2.cpp expects (adapted from
``tools/make_tiny_tokenizer.py``): ids 0..255 the GPT-2 byte alphabet (so "\\n" is 198, which
s2.cpp hard-codes), then BPE merges learned from a small embedded English corpus, then the S2
control tokens, then ``<|semantic:0|>`` .. ``<|semantic:{codebook_size-1}|>``."""

from __future__ import annotations

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

