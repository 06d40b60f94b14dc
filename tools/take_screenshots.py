"""Screenshots of the app's main states (first run, idle with a voice, generating, error) into
docs/screenshots, from real xcb windows. Run on a virtual screen:

    Xvfb :99 -screen 0 1280x800x24 &  DISPLAY=:99 python tools/take_screenshots.py

Needs Debian's xvfb and imagemagick (`import`); uses the tiny golden model, and temporary
config/voice folders, so it never touches your own settings.
"""
import os, sys, shutil, subprocess, tempfile, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]; sys.path.insert(0, str(ROOT))
OUT = ROOT / "docs" / "screenshots"
scratch = Path(tempfile.mkdtemp())
for var in ("S2STUDIO_CONFIG_DIR", "S2STUDIO_LOG_DIR", "S2STUDIO_VOICES_DIR", "S2STUDIO_MODELS_DIR"):
    os.environ[var] = str(scratch / var.lower())
os.environ["QT_QPA_PLATFORM"] = "xcb"
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication
from PySide6.QtGui import QIcon
from s2studio.app.main import tune_for_responsiveness
from s2studio.app.theme import follow_os_theme
from s2studio.app.main_window import MainWindow
from s2studio.app.settings import AppSettings
from s2studio.app.requests import SaveVoiceRequest
from s2studio.app.worker import WorkerThread
from s2studio.app import paths
from s2studio.audio import read_audio

tune_for_responsiveness()
app = QApplication(sys.argv); app.setStyle("Fusion"); follow_os_theme(app)
app.setWindowIcon(QIcon(str(paths.resource("s2studio.png"))))
clone = scratch / "clone"; clone.mkdir()
for n in ("model.gguf", "tokenizer.json"):
    shutil.copy(ROOT / "tests/data/golden/clone_f32_qknorm" / n, clone / n)
host = WorkerThread(os.environ["S2STUDIO_VOICES_DIR"])

def wait(ms):
    loop = QEventLoop(); QTimer.singleShot(ms, loop.quit); loop.exec()

def until(cond, timeout=120):
    t = time.time()
    while not cond() and time.time() - t < timeout:
        wait(50)

def shot(window, name):
    window.raise_(); window.activateWindow(); wait(400)
    wid = int(window.winId())
    subprocess.run(["import", "-window", hex(wid), str(OUT / name)], check=True)
    print("wrote", name)

OUT.mkdir(parents=True, exist_ok=True)
# 1. first run
w = MainWindow(AppSettings(), host.worker); w.resize(1180, 760); w.show(); wait(800)
shot(w, "first-run.png"); w.close()

# 2. idle with a voice
s = AppSettings(model_path=str(clone / "model.gguf"), codec_mode="cpu", max_new_tokens=160, seed=3, seed_locked=True)
w = MainWindow(s, host.worker); w.resize(1180, 760); w.show(); wait(300)
ref = read_audio(ROOT / "tests/data/golden/clone_f32_qknorm/reference.wav")
done = []
host.worker.voice_saved.connect(lambda info: done.append(info))
w.submit_request.emit(SaveVoiceRequest(w.engine_config(), ref, "The quick brown fox jumps over the lazy dog.", "Studio Narrator"))
until(lambda: done)
wait(300)
w.voice_panel.reload_voices(done[0].id)
w.voice_panel.set_reference(ref, "narrator-take2.wav", "The quick brown fox jumps over the lazy dog.")
w.voice_panel.name_edit.setText("Narrator, take 2")
w.voice_panel.waveform.set_selection((int(0.2 * 44100), int(1.7 * 44100)))
w.voice_panel.select_voice(done[0].id)
w.editor.set_text("Good evening, and welcome to the studio. [pause] Tonight we have a very special guest. "
                  "[excited] You won't believe who it is! [whisper] It's a secret until the end.")
wait(300)
shot(w, "idle-with-voice.png")

# 3. generating (a take is in flight)
w.generate()
until(lambda: w.output.waveform.duration_seconds > 2.0)
shot(w, "generating.png")
w.stop(); until(lambda: not w.generating)
w.close()

# 4. error: a corrupt model file
bad = scratch / "s2-pro-q8_0.gguf"; bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
w = MainWindow(AppSettings(model_path=str(bad), codec_mode="cpu"), host.worker); w.resize(1180, 760); w.show()
w.editor.set_text("Hello! This is S2 Pro, running locally.")
w.generate(); until(lambda: w.error_banner.isVisible()); wait(300)
shot(w, "error.png"); w.close()
host.shutdown()
