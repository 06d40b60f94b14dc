"""Audio file I/O and post-processing (numpy, soundfile, soxr only: no torch, no Qt).

Playback and recording (sounddevice) live elsewhere and must not be imported from here:
importing sounddevice raises OSError on machines without PortAudio.
"""

from s2studio.audio.postprocess import (
    apply_postprocess,
    dynamic_normalize,
    peak_normalize,
    trim_trailing_silence,
)
from s2studio.audio.reading import (
    MAX_CHANNELS,
    MAX_SAMPLE_RATE,
    SUPPORTED_EXTENSIONS,
    check_declared_size,
    decode_audio_bytes,
    decode_exact_wav,
    downmix_to_mono,
    read_audio,
    read_reference_clip,
)
from s2studio.audio.resample import resample, resample_linear
from s2studio.audio.streaming import StreamingWavWriter
from s2studio.audio.validation import (
    CODEC_SAMPLE_RATE,
    DEFAULT_MAX_REFERENCE_SECONDS,
    MIN_REFERENCE_SECONDS,
    RECOMMENDED_REFERENCE_SECONDS,
    SAMPLES_PER_CODE_FRAME,
    SILENCE_PEAK_THRESHOLD,
    validate_reference,
)
from s2studio.audio.wav_writing import (
    check_output_format,
    float_to_pcm16,
    pcm16_wav_header,
    supported_output_extensions,
    wav_bytes,
    write_audio_file,
    write_wav,
)

__all__ = [
    "MAX_CHANNELS",
    "MAX_SAMPLE_RATE",
    "check_declared_size",
    "CODEC_SAMPLE_RATE",
    "DEFAULT_MAX_REFERENCE_SECONDS",
    "MIN_REFERENCE_SECONDS",
    "RECOMMENDED_REFERENCE_SECONDS",
    "SAMPLES_PER_CODE_FRAME",
    "SILENCE_PEAK_THRESHOLD",
    "SUPPORTED_EXTENSIONS",
    "StreamingWavWriter",
    "apply_postprocess",
    "check_output_format",
    "decode_audio_bytes",
    "decode_exact_wav",
    "downmix_to_mono",
    "dynamic_normalize",
    "float_to_pcm16",
    "pcm16_wav_header",
    "peak_normalize",
    "read_audio",
    "read_reference_clip",
    "resample",
    "resample_linear",
    "supported_output_extensions",
    "trim_trailing_silence",
    "validate_reference",
    "wav_bytes",
    "write_audio_file",
    "write_wav",
]
