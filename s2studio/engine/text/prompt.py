"""The prompt matrix the Slow-AR is prefilled with (docs/spec/engine.md §4, s2.cpp ``src/s2_prompt.cpp``).

Row 0 holds token ids, rows 1..num_codebooks the codes of the reference-audio columns (zero
everywhere else). The layout is a chat: a system turn (with the reference transcript and its
codes when cloning), a user turn with the text, and an open assistant turn ending in
``<|voice|>``, after which the model emits semantic tokens.

Segment boundaries are s2.cpp's: every template string, the speaker tag, the transcript and
the text are *separate* encode calls, and the newline after a role is the literal id 198.
With the ``s2cpp`` tokenizer the result is id-for-id s2.cpp's prompt. With the ``hf``
tokenizer only the tokenization inside segments changes; for the cloning template that hits
``"...following:\\n\\nText:\\n"`` and ``"\\n\\nSpeech:\\n"`` (HF keeps ``"\\n\\n"`` and
``":\\n"`` as single tokens, as fish-speech did during training).

User text (target text and transcript) goes through
:meth:`~s2studio.engine.text.tokenizer.Tokenizer.check_user_text` first: a control token such as
``<|im_end|>`` in it is rejected with an :class:`InputError` instead of silently breaking
the chat structure. ``<|speaker:N|>`` tags are allowed.
"""

from __future__ import annotations

import logging

import numpy as np

from s2studio.errors import InputError
from s2studio.engine.text.tokenizer import NEWLINE_ID, Tokenizer

log = logging.getLogger(__name__)

SYSTEM_TTS = "convert the provided text to speech"
SYSTEM_CLONE = "convert the provided text to speech reference to the following:\n\nText:\n"
SPEECH_HEADER = "\n\nSpeech:\n"
SPEAKER_0 = "<|speaker:0|>"


def has_reference(ref_codes: np.ndarray | None, ref_text: str | None) -> bool:
    """s2.cpp's rule: codes with at least one frame *and* a non-empty transcript."""
    return ref_codes is not None and ref_codes.shape[-1] > 0 and bool(ref_text)


def _check_codes(ref_codes, num_codebooks: int) -> np.ndarray:
    codes = np.asarray(ref_codes)
    if codes.ndim != 2 or codes.shape[0] != num_codebooks:
        raise InputError(
            f"Reference codes must have shape [{num_codebooks}, frames], not {list(codes.shape)}; "
            "the voice was probably made for a different model."
        )
    if codes.size and not np.issubdtype(codes.dtype, np.integer):
        raise InputError(f"Reference codes must be integers, not {codes.dtype}.")
    # Not clamped, as in s2.cpp: the codec produced them for this model's codebooks.
    return codes.astype(np.int32, copy=False)


def build_prompt(
    tokenizer: Tokenizer,
    text: str,
    *,
    semantic_begin_id: int,
    num_codebooks: int = 10,
    ref_codes: np.ndarray | None = None,
    ref_text: str | None = None,
) -> np.ndarray:
    """Return the prompt as int32 ``[num_codebooks + 1, L]`` (docs/spec/engine.md §4.3 / §4.4);
    :func:`build_prompt_and_prefix` also says where its voice prefix ends."""
    return build_prompt_and_prefix(tokenizer, text, semantic_begin_id=semantic_begin_id,
                                   num_codebooks=num_codebooks, ref_codes=ref_codes, ref_text=ref_text)[0]


def build_prompt_and_prefix(
    tokenizer: Tokenizer,
    text: str,
    *,
    semantic_begin_id: int,
    num_codebooks: int = 10,
    ref_codes: np.ndarray | None = None,
    ref_text: str | None = None,
) -> tuple[np.ndarray, int]:
    """The prompt (as :func:`build_prompt`) and the length of its *voice prefix*: the columns
    before the user turn (the system turn with the reference transcript and codes), the same
    for every text spoken with that voice, so its KV can be computed once
    (``engine.model.prefix_cache``). 0 for a prompt without a reference: its system turn is
    a dozen tokens, not worth keeping.

    ``ref_codes`` is codebook-major ``[num_codebooks, T_ref]`` (what codec encode returns and
    a voice profile stores); ``ref_text`` is its transcript. As in s2.cpp, a transcript without
    codes is ignored, and codes without a (non-empty) transcript give a prompt without a
    reference. Raises :class:`InputError` for empty text, control tokens in user text, or
    codes of the wrong shape.
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError("There is no text to speak: the text is empty or only whitespace.")
    tokenizer.check_user_text(text, "text")

    codes = None if ref_codes is None else _check_codes(ref_codes, num_codebooks)
    use_ref = has_reference(codes, ref_text)
    if ref_text and codes is None:
        log.info("reference transcript given without reference audio codes: ignored")
    elif codes is not None and codes.shape[1] > 0 and not ref_text:
        log.warning("reference audio given without a transcript: generating without the reference")

    enc = tokenizer.encode
    im_end, voice = tokenizer.im_end_id, tokenizer.voice_id
    nl = [NEWLINE_ID]

    pre: list[int] = []
    if use_ref:
        assert ref_text is not None
        tokenizer.check_user_text(ref_text, "reference transcript")
        pre += enc("<|im_start|>system") + nl + enc(SYSTEM_CLONE)
        # s2.cpp tests for the substring, not fish-speech's full <|speaker:\d+|> regex.
        if "<|speaker:" not in ref_text:
            pre += enc(SPEAKER_0)
        pre += enc(ref_text) + enc(SPEECH_HEADER)
        post: list[int] = [im_end] + nl
    else:
        post = enc("<|im_start|>system") + nl + enc(SYSTEM_TTS) + [im_end] + nl
    post += enc("<|im_start|>user") + nl + enc(text) + [im_end] + nl
    post += enc("<|im_start|>assistant") + nl + [voice]

    t_ref = codes.shape[1] if use_ref else 0
    length = len(pre) + t_ref + len(post)
    prompt = np.zeros((num_codebooks + 1, length), dtype=np.int32)
    prompt[0, : len(pre)] = pre
    if use_ref:
        cols = slice(len(pre), len(pre) + t_ref)
        prompt[0, cols] = codes[0] + np.int32(semantic_begin_id)
        prompt[1:, cols] = codes
    prompt[0, len(pre) + t_ref :] = post
    # The system turn ends with <|im_end|> and the newline: the first two columns of ``post``.
    prefix = len(pre) + t_ref + 2 if use_ref else 0
    return prompt, prefix
