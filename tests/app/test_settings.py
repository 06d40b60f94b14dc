"""Settings: JSON dataclass, atomic save, forgiving load, survives a restart of the window."""

from __future__ import annotations

import json

from s2studio.app import paths
from s2studio.app.settings import AppSettings, load_settings, save_settings


def test_round_trip_keeps_types(tmp_path):
    path = tmp_path / "settings.json"
    s = AppSettings(model_path="/m.gguf", temperature=0.5, top_k=12, seed=99, seed_locked=True,
                    segmentation_enabled=False, recent_texts=["a", "b"])
    save_settings(s, path)
    loaded = load_settings(path)
    assert loaded.notice is None and loaded.settings == s
    assert isinstance(loaded.settings.seed_locked, bool) and isinstance(loaded.settings.top_k, int)
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no temp file left


def test_env_var_redirects_the_config_dir(isolated_dirs):
    assert paths.settings_file() == isolated_dirs / "config" / "settings.json"
    save_settings(AppSettings(model_path="x"))
    assert load_settings().settings.model_path == "x"


def test_missing_file_gives_defaults_without_notice(tmp_path):
    loaded = load_settings(tmp_path / "nope.json")
    assert loaded.settings == AppSettings() and loaded.notice is None


def test_corrupt_file_gives_defaults_a_notice_and_a_backup(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text("{not json", encoding="utf-8")
    loaded = load_settings(path)
    assert loaded.settings == AppSettings()
    assert "damaged" in loaded.notice and str(path) in loaded.notice
    assert (tmp_path / "settings.json.corrupt").read_text() == "{not json"


def test_wrong_types_and_unknown_keys(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"top_k": "thirty", "temperature": 1, "seed_locked": "true", "codec_mode": "gpu",
                                "from_the_future": 1, "model_path": "/m.gguf"}), encoding="utf-8")
    loaded = load_settings(path)
    s = loaded.settings
    assert s.model_path == "/m.gguf" and s.temperature == 1.0 and isinstance(s.temperature, float)
    assert s.top_k == 30 and s.seed_locked is False and s.codec_mode == "auto"
    assert "top_k" in loaded.notice and "seed_locked" in loaded.notice and "codec_mode" in loaded.notice


def test_settings_survive_a_restart(make_window, fast_settings, tts_model, isolated_dirs, qtbot):
    window = make_window(fast_settings(tts_model))
    s = window.settings.copy()
    s.temperature, s.pause_ms, s.normalize = 0.33, 420, True
    window.apply_settings(s)
    window.close()
    loaded = load_settings(isolated_dirs / "config" / "settings.json")
    again = make_window(loaded.settings)
    assert again.settings.temperature == 0.33 and again.settings.pause_ms == 420 and again.settings.normalize
    assert again.settings.model_path == str(tts_model)


def test_corrupt_settings_notice_is_visible(make_window, isolated_dirs):
    path = isolated_dirs / "config" / "settings.json"
    path.parent.mkdir(parents=True)
    path.write_text("\x00\x01garbage", encoding="utf-8")
    loaded = load_settings(path)
    window = make_window(loaded.settings, notice=loaded.notice)
    window.pages.setCurrentIndex(1)
    assert window.notice_banner.isVisible() and "damaged" in window.notice_banner.text


def test_settings_dialog_edits_a_copy(qtbot):
    from s2studio.app.widgets.settings_dialog import SettingsDialog

    original = AppSettings(model_path="/m.gguf", gpu_layers=-1, seed_locked=False)
    dialog = SettingsDialog(original, engine_devices=[("cpu", "CPU"), ("cuda:0", "Test GPU (8.0 GiB)")])
    qtbot.addWidget(dialog)
    assert [dialog.device.itemData(i) for i in range(dialog.device.count())] == ["cpu", "cuda:0"]
    dialog.device.setCurrentIndex(1)
    dialog.gpu_layers_all.setChecked(False)
    dialog.gpu_layers.setValue(20)
    dialog.seed.setValue(1234)
    dialog.seed_locked.setChecked(True)
    dialog.codec_mode.setCurrentIndex(dialog.codec_mode.findData("follow"))
    result = dialog.result_settings()
    assert (result.device, result.gpu_layers, result.seed, result.seed_locked, result.codec_mode) == \
        ("cuda:0", 20, 1234, True, "follow")
    assert original.device == "cpu" and original.gpu_layers == -1  # untouched until applied
    # without PortAudio the audio tab says why and cannot be edited
    assert not dialog.input_device.isEnabled()


def test_non_utf8_settings_start_with_defaults_and_a_notice(tmp_path):
    path = tmp_path / "settings.json"
    path.write_bytes(b'{"model_path": "/m\xff.gguf"}')  # one byte that is not UTF-8
    loaded = load_settings(path)  # used to raise UnicodeDecodeError on every launch
    assert loaded.settings == AppSettings()
    assert "damaged" in loaded.notice and "UTF-8" in loaded.notice
    assert (tmp_path / "settings.json.corrupt").read_bytes() == b'{"model_path": "/m\xff.gguf"}'


def test_a_byte_order_mark_is_fine(tmp_path):
    path = tmp_path / "settings.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"top_k": 12}).encode("utf-8"))
    loaded = load_settings(path)
    assert loaded.notice is None and loaded.settings.top_k == 12
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_each_damaged_file_gets_its_own_backup_and_only_a_few_are_kept(tmp_path):
    from s2studio.app.settings import MAX_CORRUPT_BACKUPS

    path = tmp_path / "settings.json"
    for i in range(MAX_CORRUPT_BACKUPS + 3):
        path.write_text(f"broken {i}", encoding="utf-8")
        assert str(tmp_path) in load_settings(path).notice
    backups = sorted(p for p in tmp_path.iterdir() if p.name.startswith("settings.json.corrupt"))
    assert len(backups) == MAX_CORRUPT_BACKUPS
    kept = {p.read_text("utf-8") for p in backups}
    assert kept == {f"broken {i}" for i in range(3, MAX_CORRUPT_BACKUPS + 3)}  # the newest ones


def test_settings_that_are_a_pipe_do_not_hang_the_start(tmp_path):
    import os

    if os.name != "posix":
        return
    path = tmp_path / "settings.json"
    os.mkfifo(path)
    loaded = load_settings(path)
    assert loaded.settings == AppSettings() and "not a settings file" in loaded.notice


def _visible_texts(widget):
    from PySide6.QtWidgets import QAbstractButton, QLabel

    found = [*widget.findChildren(QLabel), *widget.findChildren(QAbstractButton)]
    return [w.text() for w in found if w.isVisibleTo(widget)]


def test_gpu_layers_only_for_a_gpu_and_all_said_once(qtbot):
    from s2studio.app.widgets.settings_dialog import SettingsDialog

    dialog = SettingsDialog(AppSettings(device="cpu", gpu_layers=-1),
                            engine_devices=[("cpu", "CPU"), ("cuda:0", "Test GPU (8.0 GiB)")])
    qtbot.addWidget(dialog)
    row = dialog.gpu_layers.parentWidget()
    assert _visible_texts(row).count("all") == 1
    assert not dialog.gpu_layers.isEnabled() and not dialog.gpu_layers_all.isEnabled()  # meaningless on a CPU
    dialog.gpu_layers_all.setChecked(False)
    assert not dialog.gpu_layers.isEnabled()
    dialog.device.setCurrentIndex(dialog.device.findData("cuda:0"))
    assert dialog.gpu_layers.isEnabled() and dialog.gpu_layers_all.isEnabled()
    dialog.gpu_layers.setValue(12)
    assert "12" in _visible_texts(row) and "all" in _visible_texts(row)
    dialog.gpu_layers_all.setChecked(True)
    assert not dialog.gpu_layers.isEnabled() and _visible_texts(row).count("all") == 1
    assert dialog.result_settings().gpu_layers == -1


def test_gpus_are_listed_at_start_without_loading_a_model(make_window, fast_settings, tts_model, qtbot,
                                                          monkeypatch):
    import types

    import torch

    from s2studio.app.widgets.settings_dialog import SettingsDialog
    from tests.app.conftest import answer_modal

    # a machine with one CUDA GPU, as torch's cheap queries report it (no model, no GPU memory)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(name="Test GPU", total_memory=8 * 2**30))
    window = make_window(fast_settings(tts_model))
    with qtbot.waitSignal(window.worker.devices_found, timeout=30_000):
        window.detect_devices()
    qtbot.waitUntil(lambda: window.engine_devices is not None, timeout=2000)
    assert ("cuda:0", "Test GPU (8.0 GiB)") in window.engine_devices
    assert not window.model_loaded and window.worker._pipeline is None
    seen = []

    def look(dialog):
        seen.extend(dialog.device.itemData(i) for i in range(dialog.device.count()))
        dialog.reject()

    with answer_modal(SettingsDialog, look):
        window.open_settings()
    assert seen == ["cpu", "cuda:0"]


RUN_APP_UNTIL_DEVICES = """
import os, sys
os.environ['QT_QPA_PLATFORM'] = 'offscreen'
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])
from s2studio.app.main import run_app

def poll():
    window = getattr(app, 'main_window', None)
    if window is not None and window.engine_devices is not None:
        print(window.engine_devices, window.model_loaded)
        app.quit()
    else:
        QTimer.singleShot(50, poll)

QTimer.singleShot(0, poll)
sys.exit(run_app([]))
"""


def test_the_app_lists_devices_at_start(isolated_dirs):
    import ast
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}  # the test's env has the isolated dirs
    out = subprocess.run([sys.executable, "-c", RUN_APP_UNTIL_DEVICES], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    devices, loaded = out.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert ast.literal_eval(devices)[0] == ("cpu", "CPU")  # and any GPU torch sees after it
    assert loaded == "False"  # no model was loaded to find them
