"""The app with "A server" as its engine: the settings dialog's Engine tab (Connect shows the
server's /health, a warning for plain HTTP to another machine, the API key kept out of the
settings file), and the window generating and saving a voice through a real server on loopback."""

from __future__ import annotations

import json
import pathlib

import pytest

from s2studio.app.server_engine import ApiKeyStore
from s2studio.app.settings import AppSettings, load_settings, save_settings

CLONE = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden" / "clone_f32_qknorm"
KEY = "app-test-key"


@pytest.fixture(scope="module")
def model_server(tmp_path_factory):
    """s2studio's server on 127.0.0.1 (in this process), with the tiny clone model and an API key."""
    from s2studio.engine.pipeline import EngineSettings, Pipeline
    from s2studio.server import ServerConfig, ServerThread, create_app

    pipeline = Pipeline(EngineSettings(str(CLONE / "model.gguf"), codec_mode="cpu", threads=1))
    config = ServerConfig(voice_dir=tmp_path_factory.mktemp("app-server-voices"), api_key=KEY)
    server = ServerThread(create_app(pipeline, config)).start()
    yield server
    server.stop()


def dialog_for(qtbot, settings: AppSettings, keys: ApiKeyStore):
    from s2studio.app.widgets.settings_dialog import SettingsDialog

    dialog = SettingsDialog(settings, api_keys=keys)
    qtbot.addWidget(dialog)
    return dialog


def test_engine_tab_connects_warns_and_keeps_the_key_out_of_the_settings_file(qtbot, model_server, tmp_path):
    keys = ApiKeyStore()
    dialog = dialog_for(qtbot, AppSettings(), keys)
    assert not dialog.server_url.isEnabled()  # "This computer" by default
    dialog.engine_kind.setCurrentIndex(dialog.engine_kind.findData("server"))
    dialog.server_url.setText(model_server.url)
    assert dialog.server_warning.text() == ""  # loopback: nothing crosses a network

    dialog.server_key.setText("wrong")
    dialog.connect_button.click()
    qtbot.waitUntil(lambda: dialog.server_status.text().startswith("Not connected"), timeout=20_000)
    assert "rejected the API key" in dialog.server_status.text()

    dialog.server_key.setText(KEY)
    dialog.connect_button.click()
    qtbot.waitUntil(lambda: "model.gguf on cpu, ready" in dialog.server_status.text(), timeout=20_000)
    assert "queue: 0 running, 0 waiting" in dialog.server_status.text()

    dialog.server_url.setText("http://192.0.2.7:3030")
    assert "plain HTTP to another machine" in dialog.server_warning.text()
    dialog.server_url.setText("http://gpu box")
    dialog.accept()
    assert dialog.result() == 0 and "not valid" in dialog.server_status.text()  # OK refused, reason shown

    dialog.server_url.setText(model_server.url.replace("http://", ""))  # typed without the scheme
    dialog.accept()
    s = dialog.result_settings()
    assert (s.engine, s.server_url) == ("server", model_server.url)
    assert keys.get(model_server.url) == KEY
    path = tmp_path / "settings.json"
    save_settings(s, path)
    assert KEY not in path.read_text()
    assert load_settings(path).settings.server_url == model_server.url
    if not keys.persistent:
        assert "only until you quit" in keys.note


def test_connect_reports_each_of_several_servers(qtbot, model_server):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    keys = ApiKeyStore()
    dialog = dialog_for(qtbot, AppSettings(engine="server", server_url=f"{model_server.url}, {dead}"), keys)
    dialog.server_key.setText(KEY)
    dialog.connect_button.click()
    qtbot.waitUntil(lambda: dialog.connect_button.isEnabled(), timeout=30_000)
    first, second = dialog.server_status.text().splitlines()
    assert first.startswith(f"{model_server.url}: model.gguf on cpu, ready")
    assert second.startswith(f"Not connected: Cannot reach the server at {dead} (connection refused)")
    dialog.accept()
    assert dialog.result_settings().server_url == f"{model_server.url},{dead}"
    assert keys.get(f"{model_server.url},{dead}") == KEY


def test_api_key_goes_to_the_keyring_when_it_is_installed(monkeypatch):
    """``keyring`` is optional; when it imports, keys live in the OS keychain, not only the session.
    (An in-memory module with keyring's three calls stands in for the OS keychain here.)"""
    import sys
    import types

    vault = {}
    module = types.ModuleType("keyring")
    module.get_password = lambda service, user: vault.get((service, user))
    module.set_password = lambda service, user, secret: vault.__setitem__((service, user), secret)
    module.delete_password = lambda service, user: vault.pop((service, user))
    monkeypatch.setitem(sys.modules, "keyring", module)
    keys = ApiKeyStore()
    assert keys.persistent and "keychain" in keys.note
    keys.set("http://h:1", "k1")
    assert ApiKeyStore().get("http://h:1") == "k1"  # a later session (a new store) finds it
    keys.set("http://h:1", "")
    assert vault == {} and ApiKeyStore().get("http://h:1") == ""


def test_unknown_engine_in_the_settings_file_is_reset(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"engine": "cloud", "server_url": "http://h:1"}))
    loaded = load_settings(path)
    assert loaded.settings.engine == "local" and "engine" in loaded.notice


def test_window_generates_and_saves_a_voice_on_the_server(make_window, qtbot, model_server, fast_settings):
    import numpy as np

    from s2studio.audio import read_audio

    window = make_window(fast_settings("", engine="server", server_url=model_server.url, max_new_tokens=12,
                                       temperature=0.0))
    assert window.pages.currentIndex() != 0  # no model file here, yet the studio opens
    window.api_keys.set(model_server.url, KEY)
    window.editor.set_text("Hello from the other machine.")
    with qtbot.waitSignal(window.worker.finished, timeout=60_000):
        window.generate()
    qtbot.waitUntil(lambda: not window.generating, timeout=5000)
    assert window.output.current is not None and len(window.output.current.audio) == 12 * 2048
    assert f"served by {model_server.url}" in window.model_status.text()

    samples = read_audio(CLONE / "reference.wav")
    with qtbot.waitSignal(window.worker.voice_saved, timeout=60_000) as saved:
        window.save_voice(samples, "A short sample of the reference speaker.", "Remote voice")
    voice = window.library.get(saved.args[0].id)
    assert voice.transcript == "A short sample of the reference speaker."
    assert voice.codes.ndim == 2 and voice.codes.shape[1] > 0 and np.all(voice.codes >= 0)


def test_replacing_a_voice_works_when_the_server_encodes_it(make_window, qtbot, model_server, fast_settings):
    from s2studio.audio import read_audio

    window = make_window(fast_settings("", engine="server", server_url=model_server.url))
    window.api_keys.set(model_server.url, KEY)
    samples = read_audio(CLONE / "reference.wav")
    with qtbot.waitSignal(window.worker.voice_saved, timeout=60_000) as first:
        window.save_voice(samples, "The first transcript.", "Twice")
    with qtbot.waitSignal(window.worker.voice_saved, timeout=60_000) as second:
        window.save_voice(samples, "The second transcript.", "Twice", first.args[0].id)  # the user chose Replace
    assert second.args[0].id == first.args[0].id
    assert [(v.id, v.transcript) for v in window.library.list()] == [(first.args[0].id, "The second transcript.")]
