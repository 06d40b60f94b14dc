"""--voice-map parsing (pairs or a file) and what a request's voice name resolves to."""

from __future__ import annotations

import subprocess
import sys

import pytest

from s2studio.errors import InputError
from s2studio.server.voice_map import STOCK_VOICES, VoiceMap, parse_voice_map


def test_pairs_and_file(tmp_path):
    assert parse_voice_map("alloy=hope, Nova=anna") == (("alloy", "hope"), ("nova", "anna"))
    table = tmp_path / "voices.map"
    table.write_text("# stock names\nalloy=hope\necho=anna, fable=hope  # two on a line\n\n", encoding="utf-8")
    assert parse_voice_map(str(table)) == (("alloy", "hope"), ("echo", "anna"), ("fable", "hope"))


@pytest.mark.parametrize("value, words", [("alloy", "neither"), ("alloy=", "line 1"), ("=hope", "line 1"),
                                          ("alloy=../x", "not name=voice"), ("a=b,c", "'c'")])
def test_bad_maps_name_the_entry(value, words):
    with pytest.raises(InputError, match=words):
        parse_voice_map(value)


def test_big_files_and_many_entries_are_refused(tmp_path):
    big = tmp_path / "big.map"
    big.write_text("a=b\n" * 20_000, encoding="utf-8")
    with pytest.raises(InputError, match="larger than"):
        parse_voice_map(str(big))
    with pytest.raises(InputError, match="at most 256"):
        parse_voice_map(",".join(f"n{i}=v" for i in range(300)))


def test_resolution():
    table = VoiceMap(entries=(("alloy", "hope"), ("narrator", "anna")), default="bob")
    assert table.resolve("Alloy") == "hope"  # OpenAI's names are case-insensitive
    assert table.resolve("narrator") == "anna"  # any name can be mapped
    assert table.resolve("echo") == "bob"  # a stock name without an entry: the default
    assert table.resolve("") == "bob"
    assert table.resolve("hope") == "hope"  # anything else: a voice id of the folder
    assert VoiceMap().resolve("shimmer") == ""  # no default: the model's own voice
    assert {"alloy", "ash", "coral", "sage", "verse"} <= set(STOCK_VOICES)


def test_serve_refuses_a_bad_map_before_loading_anything(tmp_path):
    result = subprocess.run([sys.executable, "-m", "s2studio", "serve", "-m", str(tmp_path / "none.gguf"),
                             "--voice-map", "alloy=../../etc"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--voice-map" in result.stderr and "not name=voice" in result.stderr
    assert "Traceback" not in result.stderr
