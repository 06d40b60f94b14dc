"""Voices: s2.cpp's ``.s2voice`` file (:mod:`.voice_file`) and the studio's library folder
(:mod:`.library`). Callers import from here."""

from s2studio.engine.voices.library import (
    REFERENCE_SUFFIX,
    SIDECAR_SUFFIX,
    InvalidVoiceIdError,
    Voice,
    VoiceExistsError,
    VoiceInfo,
    VoiceLibrary,
    VoiceNotFoundError,
    check_existing_voice_id,
    default_voice_dir,
    is_voice_sidecar,
    name_sidecar_bytes,
    resolve_voice_path,
    saved_name_beside,
    slugify,
    validate_voice_id,
)
from s2studio.engine.voices.voice_file import (
    HEADER,
    MAGIC,
    VOICE_SUFFIX,
    IncompatibleVoiceError,
    VoiceFileError,
    VoiceProfile,
    check_compatible,
    decode_s2voice,
    encode_s2voice,
    read_s2voice,
    write_s2voice,
)

__all__ = [
    "HEADER", "MAGIC", "REFERENCE_SUFFIX", "SIDECAR_SUFFIX", "VOICE_SUFFIX",
    "IncompatibleVoiceError", "InvalidVoiceIdError", "Voice", "VoiceExistsError", "VoiceFileError",
    "VoiceInfo", "VoiceLibrary", "VoiceNotFoundError", "VoiceProfile",
    "check_compatible", "check_existing_voice_id", "decode_s2voice", "default_voice_dir",
    "encode_s2voice", "is_voice_sidecar", "name_sidecar_bytes", "read_s2voice", "resolve_voice_path",
    "saved_name_beside", "slugify", "validate_voice_id",
    "write_s2voice",
]
