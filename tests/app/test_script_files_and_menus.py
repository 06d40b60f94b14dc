"""File ▸ Open script… and Recent scripts; the Generate menu and the shortcuts shown in the menus;
Settings ▸ Reset to defaults."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence

from s2studio.app.settings import MAX_RECENT_SCRIPTS, load_settings


def _menu(window, title):
    for action in window.menuBar().actions():
        if action.text().replace("&", "") == title:
            return action.menu()
    raise AssertionError(f"no {title} menu")


def test_open_script_reads_utf8_with_bom_and_crlf_and_remembers_it(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    script = tmp_path / "scene.md"
    script.write_bytes("\ufeffBonjour à tous.\r\nSecond line.".encode("utf-8"))
    window.ask_script_path = lambda: str(script)
    window.open_script_dialog()
    assert window.editor.text() == "Bonjour à tous.\nSecond line."
    assert window.settings.recent_scripts == [str(script)]
    window.close()  # the recent list is kept in the settings file
    assert load_settings(window.settings_path).settings.recent_scripts == [str(script)]


def test_a_bad_script_file_is_one_sentence_in_the_banner(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    window.pages.setCurrentIndex(1)
    window.editor.set_text("kept")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("café".encode("latin-1"))
    for path, words in ((latin1, "is not UTF-8"), (tmp_path / "gone.txt", "does not exist"),
                        (tmp_path / "song.mp3", "not a .txt or .md"), (tmp_path, "not a .txt")):
        assert not window.open_script(str(path))
        assert window.error_banner.isVisible() and words in window.error_banner.text, window.error_banner.text
        assert str(path) in window.error_banner.text
    assert window.editor.text() == "kept" and window.settings.recent_scripts == []
    good = tmp_path / "good.txt"
    good.write_text("Fine.", encoding="utf-8")
    assert window.open_script(str(good)) and not window.error_banner.isVisible()


def test_recent_scripts_are_bounded_newest_first_and_drop_missing_files(make_window, fast_settings, tmp_path):
    window = make_window(fast_settings())
    paths = []
    for i in range(MAX_RECENT_SCRIPTS + 3):
        p = tmp_path / f"s{i}.txt"
        p.write_text(f"Script {i}.", encoding="utf-8")
        paths.append(str(p))
        window.open_script(str(p))
    assert window.settings.recent_scripts == paths[::-1][:MAX_RECENT_SCRIPTS]
    window.open_script(paths[-5])  # opened again: moves to the top, once
    assert window.settings.recent_scripts[0] == paths[-5] and window.settings.recent_scripts.count(paths[-5]) == 1
    (tmp_path / "s12.txt").unlink()
    window.recent_menu.aboutToShow.emit()
    titles = [a.text() for a in window.recent_menu.actions()]
    assert "s12.txt" not in titles and titles[0] == "s8.txt" and len(titles) == MAX_RECENT_SCRIPTS - 1
    window.recent_menu.actions()[1].trigger()  # reopen from the menu
    assert window.editor.text() == "Script 11."


def test_menus_show_the_shortcuts_and_the_generate_menu_drives_a_take(make_window, fast_settings, tts_model, qtbot):
    window = make_window(fast_settings(tts_model, max_new_tokens=400, seed=1))
    generate_menu = _menu(window, "Generate")
    shown = {a.text(): a.shortcut().toString(QKeySequence.SequenceFormat.PortableText)
             for a in generate_menu.actions() if a.text()}
    assert shown == {"Generate": "Ctrl+Return", "Stop": "Esc", "Play / Pause": "Space"}
    assert window.generate_action.shortcuts()[1].toString() == "Ctrl+Enter"
    file_actions = {a.text(): a.shortcut().toString() for a in _menu(window, "File").actions()}
    assert file_actions["Export…"] == "Ctrl+S" and file_actions["Open script…"] == "Ctrl+O"
    window.editor.set_text("A long sentence that would take a while to speak on this machine.")
    window.activateWindow()
    window.editor.edit.setFocus()
    qtbot.waitUntil(lambda: window.isActiveWindow(), timeout=2000)  # shortcuts fire in the active window
    with qtbot.waitSignal(window.worker.chunk, timeout=60_000):
        qtbot.keyClick(window.editor.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.generating
    with qtbot.waitSignal(window.worker.cancelled, timeout=10_000):
        window.stop_action.trigger()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)


def test_settings_reset_to_defaults_asks_first_and_keeps_the_model(qtbot, fast_settings, tmp_path):
    from s2studio.app.settings import AppSettings
    from s2studio.app.widgets.settings_dialog import SettingsDialog

    mine = fast_settings(tmp_path / "model.gguf", temperature=1.3, top_k=5, pause_ms=900, normalize=True,
                         tokenizer_path=str(tmp_path / "tok.json"))
    dialog = SettingsDialog(mine)
    qtbot.addWidget(dialog)
    dialog.confirm_reset = lambda: False
    assert not dialog.reset_to_defaults()
    assert dialog.result_settings().temperature == 1.3  # refused: nothing changed
    dialog.confirm_reset = lambda: True
    assert dialog.reset_to_defaults()
    result, d = dialog.result_settings(), AppSettings()
    for name in ("temperature", "top_p", "top_k", "max_new_tokens", "seed", "seed_locked", "segmentation_enabled",
                 "segment_max_chars", "pause_ms", "trim_silence", "normalize", "dynamic_normalize", "threads",
                 "codec_mode", "tokenizer_mode", "device", "gpu_layers"):
        assert getattr(result, name) == getattr(d, name), name
    assert result.model_path == str(tmp_path / "model.gguf") and result.tokenizer_path == str(tmp_path / "tok.json")
    assert dialog.reset_button.text() == "Reset to defaults…"
