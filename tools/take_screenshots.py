"""Screenshots of the app's main states (first run, idle with a voice, generating, error, a
dialogue with its speakers, the voice library, the studio at 200 % scale, a take sentence by
sentence, and the takes found again after a restart) into docs/screenshots, from real xcb windows. Run on a virtual screen:

    Xvfb :99 -screen 0 1280x800x24 &  DISPLAY=:99 python tools/take_screenshots.py [name ...]

Names (default: all): first-run idle-with-voice generating error speakers voice-library high-dpi
per-sentence history-after-restart book studio studio-200 reference-workbench.
"high-dpi" and "studio-200" run themselves again with QT_SCALE_FACTOR=2 (the factor must be set
before Qt starts). "studio": the studio with a take at 1180x760 and 1280x720, light and dark;
"studio-200": the same at 200 % (needs a 2560x1600 screen).

Needs Debian's xvfb and imagemagick (`import`); uses the tiny golden model, and temporary
config/voice folders, so it never touches your own settings.
"""
import os, sys, shutil, subprocess, tempfile, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]; sys.path.insert(0, str(ROOT))
ALL = ("first-run", "idle-with-voice", "generating", "error", "speakers", "voice-library", "high-dpi",
       "per-sentence", "history-after-restart", "book", "studio", "studio-200", "reference-workbench")
WANTED = set(sys.argv[1:]) or set(ALL)
SCALED = {"high-dpi", "studio-200"}
if WANTED & SCALED and os.environ.get("QT_SCALE_FACTOR") != "2":
    subprocess.run([sys.executable, __file__, *sorted(WANTED & SCALED)], env={**os.environ, "QT_SCALE_FACTOR": "2"},
                   check=True)
    WANTED -= SCALED
    if not WANTED:
        sys.exit(0)
OUT = ROOT / "docs" / "screenshots"
scratch = Path(tempfile.mkdtemp())
for var in ("S2STUDIO_CONFIG_DIR", "S2STUDIO_LOG_DIR", "S2STUDIO_VOICES_DIR", "S2STUDIO_MODELS_DIR",
            "S2STUDIO_PROJECTS_DIR"):
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
host.worker.failed.connect(lambda e: print("worker failed:", e.message, file=sys.stderr))

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

def save_voice(w, samples, transcript, name):
    done = []
    slot = lambda info: done.append(info)
    host.worker.voice_saved.connect(slot)
    w.submit_request.emit(SaveVoiceRequest(w.engine_config(), samples, transcript, name))
    until(lambda: done)
    host.worker.voice_saved.disconnect(slot)
    wait(300)
    return done[0]


OUT.mkdir(parents=True, exist_ok=True)
SCRIPT = ("Good evening, and welcome to the studio. [pause] Tonight we have a very special guest. "
          "[excited] You won't believe who it is! [whisper] It's a secret until the end.")
DIALOGUE = ("<|speaker:0|>Good evening, and welcome back to the show.\n"
            "<|speaker:1|>Thanks for having me! [laugh] It's been a while.\n"
            "<|speaker:0|>So, tell us about the new record.\n"
            "<|speaker:1|>[whisper] It's a secret until the end.")
ref = read_audio(ROOT / "tests/data/golden/clone_f32_qknorm/reference.wav")
s = AppSettings(model_path=str(clone / "model.gguf"), codec_mode="cpu", max_new_tokens=160, seed=3, seed_locked=True)

def studio(sizes, suffix=""):
    """The studio with a narrator and a take of three sentences, light and dark, at each size."""
    from s2studio.app.theme import apply_theme
    st = AppSettings(model_path=str(clone / "model.gguf"), codec_mode="cpu", max_new_tokens=60, seed=11,
                     seed_locked=True, segmentation_enabled=True)
    w = MainWindow(st, host.worker); w.resize(*sizes[0]); w.show(); wait(300)
    narrator = save_voice(w, ref, "The quick brown fox jumps over the lazy dog.", "Studio Narrator")
    w.voice_panel.reload_voices(narrator.id)
    w.editor.set_text("Good evening, and welcome to the studio. Tonight we have a very special guest. "
                      "You won't believe who it is! It's a secret until the end.")
    w.generate(); until(lambda: not w.generating)
    for theme in ("light", "dark"):
        apply_theme(app, theme); wait(300)
        for width, height in sizes:
            w.resize(width, height); wait(400)
            shot(w, f"studio-{width}x{height}{suffix}-{theme}.png")
    w.close()


if WANTED & SCALED:  # this process runs at QT_SCALE_FACTOR=2 (see the top)
    if "studio-200" in WANTED:
        studio([(1180, 760)], "-200pct")
    if "high-dpi" in WANTED:
        w = MainWindow(s, host.worker); w.show(); wait(300)
        voice = save_voice(w, ref, "The quick brown fox jumps over the lazy dog.", "Studio Narrator")
        w.voice_panel.reload_voices(voice.id)
        w.editor.set_text(SCRIPT)
        wait(300)
        shot(w, "high-dpi.png"); w.close()
    host.shutdown(); sys.exit(0)

if "studio" in WANTED:
    studio([(1180, 760), (1280, 720)])

if "first-run" in WANTED:
    w = MainWindow(AppSettings(), host.worker); w.resize(1180, 760); w.show(); wait(800)
    shot(w, "first-run.png"); w.close()

if WANTED & {"idle-with-voice", "generating"}:
    w = MainWindow(s, host.worker); w.resize(1180, 760); w.show(); wait(300)
    voice = save_voice(w, ref, "The quick brown fox jumps over the lazy dog.", "Studio Narrator")
    w.voice_panel.reload_voices(voice.id)
    w.voice_panel.set_reference(ref, "narrator-take2.wav", "The quick brown fox jumps over the lazy dog.")
    w.voice_panel.name_edit.setText("Narrator, take 2")
    w.voice_panel.waveform.set_selection((int(0.2 * 44100), int(1.7 * 44100)))
    w.voice_panel.select_voice(voice.id)
    w.editor.set_text(SCRIPT)
    wait(300)
    shot(w, "idle-with-voice.png")
    # a take in flight
    w.generate()
    until(lambda: w.output.waveform.duration_seconds > 2.0)
    shot(w, "generating.png")
    w.stop(); until(lambda: not w.generating)
    w.close()

if "error" in WANTED:  # a corrupt model file
    bad = scratch / "s2-pro-q8_0.gguf"; bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    w = MainWindow(AppSettings(model_path=str(bad), codec_mode="cpu"), host.worker); w.resize(1180, 760); w.show()
    w.editor.set_text("Hello! This is S2 Pro, running locally.")
    w.generate(); until(lambda: w.error_banner.isVisible()); wait(300)
    shot(w, "error.png"); w.close()

if WANTED & {"speakers", "voice-library"}:
    w = MainWindow(s.copy(), host.worker); w.resize(1180, 760); w.show(); wait(300)
    w.settings.max_new_tokens = 40
    host_voice = save_voice(w, ref, "The quick brown fox jumps over the lazy dog.", "Evening Host")
    guest = save_voice(w, ref[int(0.3 * 44100):], "brown fox jumps over the lazy dog.", "Guest Singer")
    save_voice(w, ref[:int(1.8 * 44100)], "The quick brown fox.", "Radio Announcer")
    w.voice_panel.reload_voices(host_voice.id)
    w.speakers.reload_voices()
    w.editor.set_text(DIALOGUE)
    w.speakers.set_voice(0, host_voice.id)
    w.speakers.set_voice(1, guest.id)
    if "speakers" in WANTED:
        w.generate(); until(lambda: not w.generating, timeout=300); wait(300)
        shot(w, "speakers.png")
    if "voice-library" in WANTED:
        d = w.open_voice_library(); wait(300)
        d.reload(guest.id); wait(300)
        shot(d, "voice-library.png"); d.close()
    w.close()

if WANTED & {"per-sentence", "history-after-restart"}:
    # a take sentence by sentence: one sentence regenerated (2 versions), one locked, one being spoken
    from PySide6.QtCore import Qt
    shutil.rmtree(os.environ["S2STUDIO_PROJECTS_DIR"], ignore_errors=True)  # a project of its own
    st = AppSettings(model_path=str(clone / "model.gguf"), codec_mode="cpu", max_new_tokens=60, seed=11,
                     seed_locked=True, segmentation_enabled=True)
    w = MainWindow(st, host.worker); w.resize(1180, 760); w.show(); wait(300)
    narrator = save_voice(w, ref, "The quick brown fox jumps over the lazy dog.", "Studio Narrator")
    w.voice_panel.reload_voices(narrator.id)
    for text in ("Chapter one. The lighthouse keeper.", "Previously, on the night shift: a storm rolled in."):
        w.editor.set_text(text); w.generate(); until(lambda: not w.generating)
    w.editor.set_text("Good evening, and welcome to the studio. Tonight we have a very special guest. "
                      "You won't believe who it is! It's a secret until the end.")
    w.generate(); until(lambda: not w.generating)
    view = w.segments_view
    view.table.selectRow(1); view.regenerate_button.click(); wait(200); until(lambda: not w.generating)
    view.table.item(0, 3).setCheckState(Qt.CheckState.Checked)
    w.output.seek(view.take.spans()[2][0] + 2000)  # the playhead in sentence 3, as during playback
    view.set_spoken(2)
    view.table.selectRow(1)
    wait(300)
    if "per-sentence" in WANTED:
        shot(w, "per-sentence.png")
    w.close()
    # the same data folder, a new window: the takes, their sentences, the script and the voice are back
    w = MainWindow(st, host.worker); w.resize(1180, 760); w.show(); wait(500)
    w.output.history.setCurrentRow(0)  # an older take: "Chapter one. The lighthouse keeper."
    if "history-after-restart" in WANTED:
        shot(w, "history-after-restart.png")
    w.close()
if "book" in WANTED:  # the Book view: an imported manuscript, a cast, a pronunciation, a render paused
    book = scratch / "the-lighthouse.md"
    book.write_text("# The Lighthouse\n\n## Contents\n\n1. The Keeper\n2. The Storm\n\n"
                    "## Chapter 1: The Keeper\n\nThe keeper climbed the stairs at dusk. The lamp was cold. "
                    "He struck a match and waited.\n\n<|speaker:1|>Is anyone there? <|speaker:0|>Only the sea, "
                    "he said. Only the sea.\n\nNguyen had warned him about the winter.\n\n"
                    "## Chapter 2: The Storm\n\nThe storm came in from the west. The windows shook. "
                    "By midnight the boats were gone.\n\n## Chapter 3: Morning\n\nThe light was still burning.\n",
                    encoding="utf-8")
    w = MainWindow(s.copy(), host.worker); w.resize(1180, 760); w.show(); wait(300)
    w.settings.max_new_tokens = 40  # the studio's; the book has its own (its Sampling tab)
    narrator = save_voice(w, ref, "The quick brown fox jumps over the lazy dog.", "Studio Narrator")
    visitor = save_voice(w, ref[int(0.3 * 44100):], "brown fox jumps over the lazy dog.", "The Visitor")
    w.import_book(str(book)); wait(300)
    w.book.set_narrator(narrator.id)
    w.book.set_character("Visitor", visitor.id)
    w.book.assign_speaker(1, "Visitor")
    w.book.add_pronunciation("Nguyen", "Win", False)
    w.book.set_sampling(max_new_tokens=40)
    w.book_view.reload_voices()
    w.book_view.parallel.setValue(2)
    w.book_view.select_chapter(1)
    w.book_view.render_button.click()
    until(lambda: w.book.chapter_progress(1)[0] >= 3, timeout=300)
    w.book.pause(); until(lambda: not w.book.rendering, timeout=300); wait(600)
    w.book_view.sentences.selectRow(4)
    shot(w, "book.png")
    w.book_view.tabs.setCurrentIndex(1); wait(300)
    shot(w, "book-cast.png")
    # A chapter of its own voice: chosen on the Sentences page; only its sentences render again.
    w.book_view.tabs.setCurrentIndex(0)
    w.book_view.select_chapter(2); wait(300)
    i = w.book_view.chapter_voice.findData(visitor.id)
    w.book_view.chapter_voice.setCurrentIndex(i); w.book_view.chapter_voice.activated.emit(i); wait(600)
    shot(w, "book-chapter-voice.png")
    # The book's own sampling settings, and the question before the whole book renders again.
    w.book_view.tabs.setCurrentIndex(3)
    w.book_view.temperature.setValue(0.6); wait(300)
    shot(w, "book-sampling.png")
    from PySide6.QtWidgets import QMessageBox
    def answer_later():
        box = app.activeModalWidget()
        if box is None:
            QTimer.singleShot(200, answer_later); return
        shot(box, "book-sampling-confirm.png")
        box.done(QMessageBox.StandardButton.Cancel)
    QTimer.singleShot(500, answer_later)
    w.book_view.apply_sampling(); wait(300)
    w.close()
if "reference-workbench" in WANTED:  # a long clip (noisy, clipped, clean parts) and its best part found
    import numpy as np
    import soundfile as sf
    spoken = ref[:44100]
    def repeated(times, pause):
        return np.concatenate([np.concatenate([spoken, np.zeros(int(pause * 44100), np.float32)]) for _ in range(times)])
    noisy = repeated(8, 0.4)
    noisy = noisy + np.random.default_rng(0).standard_normal(len(noisy)).astype(np.float32) * 0.05
    silence = np.zeros(8 * 44100, np.float32)
    long_clip = np.concatenate([noisy, silence, np.clip(repeated(6, 0.4) * 4, -1, 1), silence, repeated(14, 0.3)])
    clip_path = scratch / "interview.wav"
    sf.write(clip_path, long_clip, 44100)
    clip_path.with_suffix(".txt").write_text("What the whole interview says, word for word.", encoding="utf-8")
    w = MainWindow(s, host.worker); w.resize(1180, 760); w.show(); wait(300)
    w.voice_panel.load_reference_file(clip_path)
    w.voice_panel.workbench.find_best_part()
    until(lambda: w.voice_panel.workbench.last_proposal is not None)
    until(lambda: w.voice_panel.workbench.last_check is not None); wait(300)
    shot(w, "reference-workbench.png"); w.close()
host.shutdown()
