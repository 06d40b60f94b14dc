"""The stated schema of a project's ``project.json``, and the checks that hold a file to it.

Project files come from other people, so every field is read through :class:`Fields`, which
accepts only the declared type (``true`` is not a number, ``1.5`` is not a count), a finite
number in the field's range, text of bounded length without control characters, and ids from
a safe alphabet. JSON itself is parsed with ``NaN``/``Infinity`` refused and its nesting depth
and number of values bounded (:func:`parse_json`), so no value can make a later step raise
``OverflowError``, ``TypeError`` or ``RecursionError``. Every failure is a ``ValueError`` whose
text is the problem for the user; ``project_file`` turns it into the one ``ProjectFileError``.

The schema (format 1); a field not listed is ignored, a listed one that is wrong is an error:

=====================  ======================================================================
project                format "s2studio-project", version 1, script (≤ 1 000 000 chars),
                       voice_id, voice_label, speaker_voices {speaker: voice id} (≤ 64),
                       current_take, takes (≤ 10 000)
take                   id (ID), text (≤ 100 000 chars), base_seed (0..2⁶⁴-1), voice_id,
                       voice_label, settings (below), stopped, stats, created, sentences (≤ 100 000)
sentence               text, pause_after_ms (0..10 000), chosen (-1..versions-1), locked,
                       versions (≤ 1 000)
version                id (ID), seed, sample_rate (:data:`SAMPLE_RATES`), samples
                       (0..:data:`MAX_VERSION_SAMPLES`), stop_reason (end|max_tokens|cancelled),
                       created, file ("audio/<ID>.wav")
settings               sampling {max_new_tokens, temperature, top_p, top_k, min_tokens_before_end:
                       the engine's limits; ras: bool}, segmentation {enabled, max_chars,
                       pause_ms}, postprocess {trim_silence, normalize, dynamic_normalize},
                       voice_kind (reference|voice|none), reference_text, speaker_voices
                       [[speaker, voice id], ...]
=====================  ======================================================================

ID: 1-64 characters from ``A-Z a-z 0-9 _ -`` (a version's id names its WAV in the project's
folder, so nothing else may reach a path). Voice ids: at most 200 characters, no control
characters (the voice library checks them again when one is used).
"""

from __future__ import annotations

import json
import math
import re

from s2studio.engine.limits import LIMITS, MAX_CONTEXT, MAX_DIALOGUE_SPEAKERS, MAX_TEXT_CHARS, SAMPLES_PER_CODE_FRAME

# The rates an s2studio take can have: the codec's 44.1 kHz and the usual rates a model
# variant or an exported take could use. Anything else is not a project we wrote.
SAMPLE_RATES = (8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000)
ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_VOICE_ID_CHARS = 200
MAX_LABEL_CHARS = 1000
MAX_SCRIPT_CHARS = 10 * MAX_TEXT_CHARS
MAX_TAKES = 10_000
MAX_SENTENCES = 100_000
MAX_VERSIONS = 1000
# One version is one segment: at most the model's context in frames.
MAX_VERSION_SAMPLES = MAX_CONTEXT * SAMPLES_PER_CODE_FRAME
# All audio of one project, decoded (float32: 4 bytes a sample): two hours at 48 kHz, 1.4 GB.
MAX_PROJECT_SAMPLES = 2 * 3600 * 48000
MAX_JSON_DEPTH = 32  # project.json nests 6 deep; settings a few more
MAX_JSON_VALUES = 2_000_000  # every value, key and element counted
MAX_TIME = 1e11  # a time stamp (seconds since 1970) beyond year 5000 is not a time stamp
STOP_REASONS = ("end", "max_tokens", "cancelled")
VOICE_KINDS = ("reference", "voice", "none")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # text may hold tabs and newlines
_MISSING = object()


def _refuse_constant(name: str):
    raise ValueError(f"holds {name}, which is not a finite number")


def parse_json(raw: bytes, what: str) -> object:
    """``raw`` as JSON, with NaN/Infinity refused and depth and size bounded."""
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError(f"its {what} is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as err:
        if "not a finite number" in str(err):
            raise ValueError(f"its {what} {err}") from None
        raise ValueError(f"its {what} is damaged (not JSON text)") from None
    check_shape(value, what)
    return value


def check_shape(value, what: str) -> None:
    """Depth and number of values, walked without recursion."""
    stack, count = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if depth > MAX_JSON_DEPTH:
            raise ValueError(f"its {what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
        if count > MAX_JSON_VALUES:
            raise ValueError(f"its {what} holds too many values (more than {MAX_JSON_VALUES})")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            count += len(item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"its {what} holds {item}, which is not a finite number")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Fields:
    """The fields of one JSON object, each read with its type and range; ``where`` names the
    object in messages ("take 2, sentence 5")."""

    def __init__(self, value, where: str):
        if not isinstance(value, dict):
            raise ValueError(f"{where} is not an object")
        self.data = value
        self.where = where

    def _get(self, key: str, default):
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is _MISSING:
            raise ValueError(f"{self.where}: '{key}' is missing")
        return default

    def _bad(self, key: str, expected: str, value) -> ValueError:
        shown = repr(value) if isinstance(value, (int, float, bool, str)) and len(repr(value)) < 40 else \
            type(value).__name__
        return ValueError(f"{self.where}: '{key}' must be {expected}, not {shown}")

    def integer(self, key: str, lo: int, hi: int, default=_MISSING) -> int:
        value = self._get(key, default)
        if not _is_int(value) or not lo <= value <= hi:
            raise self._bad(key, f"a whole number in {lo}..{hi}", value)
        return value

    def number(self, key: str, lo: float, hi: float, default=_MISSING) -> float:
        value = self._get(key, default)
        if not (_is_int(value) or isinstance(value, float)) or not math.isfinite(value) or not lo <= value <= hi:
            raise self._bad(key, f"a number in {lo:g}..{hi:g}", value)
        return float(value)

    def flag(self, key: str, default=_MISSING) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false", value)
        return value

    def text(self, key: str, max_chars: int, default=_MISSING, *, multiline: bool = True) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise self._bad(key, "text", value)
        if len(value) > max_chars:
            raise ValueError(f"{self.where}: '{key}' is too long ({len(value)} characters, at most {max_chars})")
        if _CONTROL.search(value) or (not multiline and ("\n" in value or "\r" in value)):
            raise ValueError(f"{self.where}: '{key}' holds control characters")
        return value

    def ident(self, key: str, default=_MISSING) -> str:
        value = self._get(key, default)
        if not isinstance(value, str) or not ID_RE.fullmatch(value):
            raise self._bad(key, "an id of 1-64 letters, digits, '_' or '-'", value)
        return value

    def voice_id(self, key: str) -> str | None:
        value = self._get(key, "")
        if value == "":
            return None
        return self.text(key, MAX_VOICE_ID_CHARS, multiline=False)

    def choice(self, key: str, options: tuple[str, ...], default=_MISSING) -> str:
        value = self._get(key, default)
        if value not in options:
            raise self._bad(key, "one of " + ", ".join(options), value)
        return value

    def items(self, key: str, max_items: int, default=_MISSING) -> list:
        value = self._get(key, default)
        if not isinstance(value, list):
            raise self._bad(key, "a list", value)
        if len(value) > max_items:
            raise ValueError(f"{self.where}: '{key}' has too many entries ({len(value)}, at most {max_items})")
        return value

    def fields(self, key: str) -> "Fields":
        return Fields(self._get(key, {}), f"{self.where}, {key}")


def _limited(fields: Fields, key: str):
    lim = LIMITS[key]
    if lim.integer:
        return fields.integer(key, lim.min, lim.max)
    return fields.number(key, lim.min, lim.max)


def speaker_voices(value, where: str) -> list[list]:
    """A dialogue's ``[[speaker, voice id], ...]``."""
    if not isinstance(value, list) or len(value) > MAX_DIALOGUE_SPEAKERS:
        raise ValueError(f"{where}: 'speaker_voices' must be a list of at most {MAX_DIALOGUE_SPEAKERS} pairs")
    pairs = []
    for pair in value:
        if (not isinstance(pair, list) or len(pair) != 2 or not _is_int(pair[0]) or not 0 <= pair[0] < 1_000_000
                or not isinstance(pair[1], str)):
            raise ValueError(f"{where}: 'speaker_voices' must hold [speaker number, voice id] pairs")
        voice = Fields({"voice": pair[1]}, where).text("voice", MAX_VOICE_ID_CHARS, multiline=False)
        pairs.append([pair[0], voice])
    return pairs


def take_settings(value, where: str) -> dict:
    """How a take was made (``take_model.take_settings``), each known field checked; what a
    newer or foreign writer added is dropped."""
    where = f"{where}, settings"
    raw = Fields(value if value is not None else {}, where)
    out: dict = {}
    if "sampling" in raw.data:
        s = raw.fields("sampling")
        out["sampling"] = {k: _limited(s, k) for k in
                           ("max_new_tokens", "temperature", "top_p", "top_k", "min_tokens_before_end") if k in s.data}
        if "ras" in s.data:
            out["sampling"]["ras"] = s.flag("ras")
    if "segmentation" in raw.data:
        s = raw.fields("segmentation")
        seg = {}
        if "enabled" in s.data:
            seg["enabled"] = s.flag("enabled")
        for k, limit in (("max_chars", "max_chars"), ("pause_ms", "pause_ms")):
            if k in s.data:
                seg[k] = s.integer(k, LIMITS[limit].min, LIMITS[limit].max)
        out["segmentation"] = seg
    if "postprocess" in raw.data:
        p = raw.fields("postprocess")
        out["postprocess"] = {k: p.flag(k) for k in ("trim_silence", "normalize", "dynamic_normalize") if k in p.data}
    if "voice_kind" in raw.data:
        out["voice_kind"] = raw.choice("voice_kind", VOICE_KINDS)
    if "reference_text" in raw.data:
        out["reference_text"] = raw.text("reference_text", MAX_TEXT_CHARS, "")
    if "speaker_voices" in raw.data:
        out["speaker_voices"] = speaker_voices(raw.data["speaker_voices"], where)
    return out
