#!/usr/bin/env python3
"""Cost of the compat routes' audio stage: each response format's encoder and the time-stretch.

    python benchmarks/bench_encoders.py [--seconds 10] [--rounds 3] [--json]

Feeds ``--seconds`` of a speech-like test signal (a gliding, amplitude-modulated tone with a
little noise, 44.1 kHz) through ``audio.encoders.StreamEncoder`` in 8192-sample chunks (the
size of a server chunk at the default stride, about 186 ms), as a live response does, and
prints the best of ``--rounds`` as milliseconds of work per second of audio, per format at
speed 1 and for PCM at each speed (the stretch alone). Also checks what a speed change must
keep: the output length is the input's divided by the speed, and the dominant pitch of a
steady 440 Hz tone stays 440 Hz. Compare ratios within one run, not absolute times across
machines.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from s2studio.audio.encoders import FORMATS, EncodeOptions, StreamEncoder

RATE = 44100
CHUNK = 8192
SPEEDS = (0.25, 0.5, 1.5, 2.0, 4.0)


def test_signal(seconds: float) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    rng = np.random.default_rng(0)
    glide = 0.3 * np.sin(2 * np.pi * (150 + 50 * np.sin(2 * np.pi * 0.5 * t)) * t)
    return (glide * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def encode(x: np.ndarray, options: EncodeOptions) -> tuple[float, bytes]:
    encoder = StreamEncoder(options, RATE)
    start = time.perf_counter()
    parts = [encoder.write(x[i:i + CHUNK]) for i in range(0, x.size, CHUNK)]
    parts.append(encoder.finish())
    return time.perf_counter() - start, b"".join(parts)


def pitch_after_stretch(speed: float) -> tuple[int, float]:
    x = (0.4 * np.sin(2 * np.pi * 440 * np.arange(RATE) / RATE)).astype(np.float32)
    _, data = encode(x, EncodeOptions("pcm", speed=speed))
    y = np.frombuffer(data, "<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(y * np.hanning(y.size)))
    return y.size, float(np.argmax(spectrum) * RATE / y.size)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    x = test_signal(args.seconds)
    rows = []
    cases = [(fmt, 1.0) for fmt in FORMATS] + [("pcm", speed) for speed in SPEEDS]
    for fmt, speed in cases:
        best = min(encode(x, EncodeOptions(fmt, speed=speed))[0] for _ in range(args.rounds))
        row = {"format": fmt, "speed": speed, "ms_per_audio_s": round(best / args.seconds * 1000, 2)}
        if speed != 1.0:
            samples, hz = pitch_after_stretch(speed)
            row.update({"samples_per_1s": samples, "expected": round(RATE / speed), "pitch_hz": round(hz, 1)})
        rows.append(row)
        if not args.json:
            extra = (f"  length {row['samples_per_1s']} (expected {row['expected']}), 440 Hz tone -> "
                     f"{row['pitch_hz']} Hz" if speed != 1.0 else "")
            print(f"{fmt:5s} speed {speed:<4g} {row['ms_per_audio_s']:7.2f} ms per second of audio{extra}")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
