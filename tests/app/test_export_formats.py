"""Export: every format libsndfile can write (read back: format, bit depth, sample count), the
default file name from the script, and one numbered file per sentence of a real take."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from s2studio.app import export
from s2studio.app.widgets.output_panel import Take

EXPECTED = {  # format key -> (libsndfile format, subtype)
    "wav32f": ("WAV", "FLOAT"), "wav24": ("WAV", "PCM_24"), "wav16": ("WAV", "PCM_16"),
    "flac": ("FLAC", "PCM_24"), "mp3": ("MP3", "MPEG_LAYER_III"), "ogg": ("OGG", "VORBIS"),
}


def _take(text="Hello there. How are you?", segments=()) -> Take:
    t = np.arange(44100) / 44100
    audio = (0.5 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    audio[100] = 1.5  # past full scale: integer formats must clip it, not wrap it
    return Take(text=text, voice="v", seed=1, params="", audio=audio, sample_rate=44100, segments=segments)


def test_the_formats_offered_are_the_ones_libsndfile_can_write():
    keys = [f.key for f in export.available_formats()]
    assert keys[:4] == ["wav32f", "wav24", "wav16", "flac"]
    for key in ("mp3", "ogg"):
        fmt = EXPECTED[key][0]
        assert (key in keys) == (fmt in sf.available_formats())


@pytest.mark.parametrize("key", list(EXPECTED))
def test_each_format_is_written_and_reads_back(make_window, fast_settings, tmp_path, key):
    if key not in [f.key for f in export.available_formats()]:
        pytest.skip(f"this libsndfile cannot write {key}")
    window = make_window(fast_settings())
    take = _take()
    fmt = export.format_by_key(key)
    target = tmp_path / f"take{fmt.extension}"
    window.output.export_format = key  # what the save dialog's type list would set
    window.output.ask_save_path = lambda suggestion: str(target)
    assert window.output.export_take(take) == str(target)
    info = sf.info(str(target))
    assert (info.format, info.subtype, info.samplerate, info.channels) == (*EXPECTED[key], 44100, 1)
    data, _ = sf.read(str(target), dtype="float32")
    if key in ("mp3", "ogg"):  # lossy: encoder padding changes the length a little
        assert abs(len(data) - len(take.audio)) < 4096
    else:
        assert len(data) == len(take.audio)
        assert np.max(np.abs(data)) <= (1.5 if key == "wav32f" else 1.0)
        assert data[100] == pytest.approx(1.5 if key == "wav32f" else 1.0, abs=1e-3)  # clipped, not wrapped
        assert np.allclose(data[2000:3000], take.audio[2000:3000], atol=1e-4 if key != "wav16" else 1e-3)
    assert window.settings.export_format == key  # remembered for the next export
    assert not list(tmp_path.glob(".*"))  # no temp file left


def test_a_wav_name_keeps_the_chosen_depth_and_a_bare_name_gets_the_extension(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    window.output.export_format = "wav16"
    window.output.ask_save_path = lambda suggestion: str(tmp_path / "plain")
    assert window.output.export_take(_take()) == str(tmp_path / "plain.wav")
    assert sf.info(str(tmp_path / "plain.wav")).subtype == "PCM_16"
    window.output.ask_save_path = lambda suggestion: str(tmp_path / "other.flac")  # the name's type wins
    window.output.export_take(_take())
    assert sf.info(str(tmp_path / "other.flac")).format == "FLAC"


def test_default_file_name_is_the_scripts_first_words(make_window, fast_settings, tmp_path):
    assert export.default_file_name("Hello, world! How are you today, my friend?") == \
        "hello-world-how-are-you-today.wav"
    assert export.default_file_name("<|speaker:0|>[laugh] Ça va? 你好", ".flac") == "ça-va-你好.flac"
    assert export.default_file_name("  ?!/\\:*  ") == "s2studio-take.wav"
    assert export.default_file_name("../../etc/passwd") == "etc-passwd.wav"
    assert export.default_file_name("Con.") == "s2studio-take-con.wav"  # a reserved name on Windows
    window = make_window(fast_settings())
    window.output.last_export_dir = str(tmp_path)
    offered = []
    window.output.ask_save_path = lambda suggestion: offered.append(suggestion)
    window.output.export_take(_take("Good morning, everyone."))
    assert offered == [str(tmp_path / "good-morning-everyone.wav")]


def test_every_sentence_of_a_real_take_as_numbered_files(make_window, fast_settings, tts_model, tmp_path, qtbot):
    window = make_window(fast_settings(tts_model, segmentation_enabled=True, max_new_tokens=12, pause_ms=200))
    window.editor.set_text("Hello there. How are you? Fine, thanks.")
    with qtbot.waitSignal(window.worker.finished, timeout=120_000):
        window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    take = window.output.current
    assert len(take.segments) == 3
    window.output.export_format = "wav24"
    window.output.ask_save_path = lambda suggestion: str(tmp_path / "scene.wav")
    window.output.export_sentences_action.trigger()
    files = sorted(tmp_path.glob("scene-*.wav"))
    assert [f.name for f in files] == ["scene-01.wav", "scene-02.wav", "scene-03.wav"]
    for f, (start, end) in zip(files, take.segments):
        info = sf.info(str(f))
        assert (info.subtype, info.frames) == ("PCM_24", end - start)
        data, _ = sf.read(str(f), dtype="float32")
        assert np.allclose(data, np.clip(take.audio[start:end], -1, 1), atol=1e-6)
    assert window.output.last_written == [str(f) for f in files]


def test_a_failed_sentence_export_leaves_no_files(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    (tmp_path / "scene-02.wav").mkdir()  # the second file cannot be written: nothing may remain
    window.output.ask_save_path = lambda suggestion: str(tmp_path / "scene.wav")
    take = _take(segments=((0, 1000), (2000, 3000), (4000, 5000)))
    assert window.output.export_take(take, sentences=True) is None
    assert "is a folder" in window.error_banner.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene-02.wav"]
