"""Project files from the fuzzers opened in the real window (offscreen): each one is a banner
naming the file, or a project the window shows; never an uncaught exception (issue 24).
pytest-qt fails a test on any exception raised inside a Qt slot or event handler."""

from __future__ import annotations

import json
import random

from tests.fuzz.test_fuzz_files import MEMBER, VALID_PATHS, _replaced, _valid_manifest, _zip, mutate

HOSTILE_VALUES = [None, True, -1, 0, 2**64, 2_000_000_000, 1e308, "../../escaped", "\x1b[2J", "", "x" * 300,
                  [], [1], {}, {"a": {"b": []}}, [[1, "hope"]] * 100]


def corpus() -> list[tuple[str, bytes]]:
    """The fuzzers' regression cases and a fixed-seed sample of one-field replacements and
    byte-level damage of a valid project."""
    rng = random.Random(24)
    files = [("valid", _zip(json.dumps(_valid_manifest()), {"audio/v1.wav": MEMBER})),
             ("deep", _zip('{"format": "s2studio-project", "version": 1, "takes": [], "x": '
                           + "[" * 50_000 + "]" * 50_000 + "}", {})),
             ("nan", _zip('{"format": "s2studio-project", "version": 1, "takes": [], "script": NaN}', {})),
             ("member", _zip(json.dumps(_valid_manifest()), {"audio/v1.wav": b"garbage"}))]
    for i in range(24):
        manifest = _replaced(_valid_manifest(), rng.choice(VALID_PATHS), rng.choice(HOSTILE_VALUES))
        files.append((f"field{i}", _zip(json.dumps(manifest), {"audio/v1.wav": MEMBER})))
    valid = files[0][1]
    for i in range(8):
        edits = [(rng.random(), rng.randrange(256)) for _ in range(rng.randrange(1, 6))]
        files.append((f"bytes{i}", mutate(valid, edits, rng.choice([1.0, rng.random()]))))
    return files


def test_fuzzed_project_files_open_as_a_banner_or_a_project(make_window, fast_settings, tts_model, qtbot, tmp_path):
    window = make_window(fast_settings(tts_model))
    opened = refused = 0
    for name, data in corpus():
        path = tmp_path / f"{name}.s2project"
        path.write_bytes(data)
        window.takes.model.saved_as_file()  # nothing unsaved: opening asks no question
        window.takes.ask_project_path = lambda save, p=path: str(p)
        window.takes.open_project()
        qtbot.wait(1)
        if window.error_banner.isVisible() and path.name in window.error_banner.text:
            refused += 1
            assert "Traceback" not in window.error_banner.text and "\x1b" not in window.error_banner.text
        else:
            opened += 1
            window.error_banner.hide()
    assert refused >= 20 and opened >= 1  # the valid file opens; most hostile ones are refused
