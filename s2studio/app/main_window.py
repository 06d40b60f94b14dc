"""The studio window: composition and wiring only.

Widgets do their own drawing and bookkeeping; this class connects them to the inference
worker (requests out as queued signals, results back as signals), the audio service and the
settings file. It never imports torch or runs model code: every engine call happens in the
worker's thread.

Error banners carry their cause (see ``Banner.dismiss``): "clip", "transcript" and "voices" come
from the voice panel, "text" is an empty script, "engine" a failed load/take/encode (it goes
when the engine settings change or a load succeeds), "export" a failed export, "project" a project
file that could not be opened or saved and "autosave" the autosaved project (app/takes_controller.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QLabel,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from s2studio.app import paths, scripts, window_state
from s2studio.app.audio_service import AudioService
from s2studio.app.book_controller import BookController, is_book_file
from s2studio.app.requests import (
    FinishedTake,
    GenerateRequest,
    LoadInfo,
    LoadRequest,
    SaveVoiceRequest,
    WorkerError,
    engine_settings,
    generation_params,
    synthesis_request,
)
from s2studio.app.settings import MAX_RECENT_SCRIPTS, AppSettings, save_settings
from s2studio.app.theme import apply_theme
from s2studio.engine.pipeline import EngineSettings
from s2studio.engine.take import segments_of
from s2studio.app.widgets.book_view import BookView
from s2studio.app.widgets.error_banner import Banner
from s2studio.app.widgets.output_panel import OutputPanel, Take
from s2studio.app.progress_eta import EtaEstimator
from s2studio.app.takes_controller import TakesController
from s2studio.app.widgets.progress_bar import GenerateBar
from s2studio.app.widgets.segments_view import SegmentsView
from s2studio.app.widgets.script_editor import ScriptEditor, estimated_seconds
from s2studio.app.server_engine import ApiKeyStore
from s2studio.app.widgets.settings_dialog import SettingsDialog
from s2studio.app.widgets.speaker_panel import SpeakerPanel
from s2studio.app.widgets.voice_library_dialog import VoiceLibraryDialog
from s2studio.app.widgets.voice_panel import CLIP, TRANSCRIPT, VoicePanel
from s2studio.app.widgets.welcome import WelcomePage
from s2studio.app.worker import InferenceWorker
from s2studio.audio import CODEC_SAMPLE_RATE, DEFAULT_MAX_REFERENCE_SECONDS, SUPPORTED_EXTENSIONS
from s2studio.errors import S2Error
from s2studio.engine.voices import VoiceLibrary

log = logging.getLogger(__name__)

WELCOME_PAGE, STUDIO_PAGE, BOOK_PAGE = 0, 1, 2
DEFAULT_SIZE = (1180, 760)  # the window's size when the screen has room for it
SCREEN_SHARE = 0.92  # of the available screen, at most, for the initial window
MINIMUM_SIZE = (360, 300)  # below the pages' own minimum they scroll; no smaller than the screen
ENGINE, TEXT, EXPORT, SETTINGS = "engine", "text", "export", "settings"  # banner causes (see the docstring)
CLIP_ADVICE = "clip advice"  # the notice about the clip in the voice panel (too long, too short)
DROP = "drop"  # a dropped file that is not an audio file


def scrollable(page: QWidget) -> QScrollArea:
    """``page`` in a frameless scroll area: the window can shrink to fit any screen (200 % scaling
    on a laptop leaves ~640×380 logical pixels) and the page scrolls instead of squashing."""
    area = QScrollArea()
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidgetResizable(True)
    area.setWidget(page)
    return area


def _engine_identity(s: AppSettings) -> tuple:
    """What an engine error is about: the local engine's settings, or the server(s) used instead."""
    return (s.engine, s.server_url.strip()) if s.uses_server else (s.engine, engine_settings(s))


def dropped_book_path(mime) -> Path | None:
    """The first local manuscript (.txt, .md, .epub) in a drag's data, if any."""
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile() and is_book_file(url.toLocalFile()):
            return Path(url.toLocalFile())
    return None


def dropped_audio_path(mime) -> Path | None:
    """The first local audio file in a drag's data, if any."""
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile() and Path(url.toLocalFile()).suffix.lower() in SUPPORTED_EXTENSIONS:
            return Path(url.toLocalFile())
    return None


def dropped_local_path(mime) -> Path | None:
    """The first local file in a drag's data (audio or not), if any."""
    if not mime.hasUrls():
        return None
    return next((Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()), None)


class _DropCatcher(QObject):
    """Application-wide filter: an audio file dropped on *any* widget (even the text editor,
    which would otherwise paste its path) becomes the new reference, a manuscript is imported
    into the Book view, and any other file gets a banner saying why nothing happened."""

    def __init__(self, window: "MainWindow"):
        super().__init__(window)
        self._window = window

    def eventFilter(self, obj, event) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop):
            if not (isinstance(obj, QWidget) and obj.window() is self._window):
                return False
            book = dropped_book_path(event.mimeData())
            # A .md or .epub anywhere, and a .txt on the Book view, is a book to import; any other
            # file goes to open_dropped (audio: the reference; else a banner saying why not).
            if book is not None and (book.suffix.lower() != ".txt" or self._window.showing_book):
                event.acceptProposedAction()
                if kind == QEvent.Type.Drop:
                    self._window.import_book(str(book))
                return True
            if dropped_local_path(event.mimeData()):
                event.acceptProposedAction()
                if kind == QEvent.Type.Drop:
                    self._window.open_dropped(event.mimeData())
                return True
        return False


class MainWindow(QMainWindow):
    submit_request = Signal(object)
    request_devices = Signal()

    def __init__(self, settings: AppSettings, worker: InferenceWorker, *, notice: str | None = None,
                 audio: AudioService | None = None, settings_path: Path | None = None, client_factory=None):
        super().__init__()
        self.settings = settings
        self.settings_path = settings_path
        self.worker = worker
        self.audio = audio or AudioService(self)
        self.audio.output_device = settings.output_device
        self.audio.input_device = settings.input_device
        self.library = VoiceLibrary(settings.voices_folder or paths.voices_dir())
        self.generating = False
        self.busy = False
        self.model_loaded = False
        self.load_info: LoadInfo | None = None
        self.api_keys = ApiKeyStore()  # server API keys: the OS keychain, or this session only
        self.engine_devices: list[tuple[str, str]] | None = None  # None until the worker has looked
        self._pending_request: GenerateRequest | None = None
        self.setWindowTitle("s2studio")
        self._fit_to_screen()
        self.setAcceptDrops(True)

        self.pages = QStackedWidget()
        self.welcome = WelcomePage(client_factory=client_factory)
        self.welcome.files_chosen.connect(self.adopt_model_files)
        self.welcome.back_requested.connect(self.leave_welcome)
        self.pages.addWidget(scrollable(self.welcome))
        self.studio_page = self._build_studio()
        self.pages.addWidget(scrollable(self.studio_page))
        # The Book view (app/widgets/book_view.py over app/book_controller.py): long-form work on
        # the studio's engine; a studio take goes first (busy_changed below).
        self.book = BookController(self, engine_for=worker.engine_for, engine_config=self.engine_config,
                                   books_root=paths.books_dir, parallel=lambda: self.book_view.parallel.value() or None,
                                   voices=lambda: self.library)
        self.book_view = BookView(self.book, self.library, self.audio)
        self.book_view.back_requested.connect(self.show_studio)
        self.book_view.import_requested.connect(self.import_book_dialog)
        self.book.opened.connect(self._on_book_opened)
        self.pages.addWidget(scrollable(self.book_view))  # scrolls, as the studio does, on a small screen
        self.setCentralWidget(self.pages)
        self._build_menus()
        self._build_shortcuts()
        self._build_tab_order()
        self.model_status = QLabel("Model: not loaded")
        # The codec verdict can be long: it may be cut (the tooltip has it all) but must not set the
        # window's minimum width. An explicit minimum width replaces the label's full-text one.
        self.model_status.setMinimumWidth(1)
        self.statusBar().addPermanentWidget(self.model_status)

        self.submit_request.connect(worker.submit, Qt.ConnectionType.QueuedConnection)
        self.request_devices.connect(worker.query_devices, Qt.ConnectionType.QueuedConnection)
        worker.loading.connect(self._on_loading)
        worker.loaded.connect(self._on_loaded)
        worker.progress.connect(self._on_progress)
        worker.chunk.connect(self._on_chunk)
        worker.finished.connect(self._on_finished)
        worker.voice_saved.connect(self._on_voice_saved)
        worker.failed.connect(self._on_failed)
        worker.stopped.connect(self._on_stopped)
        worker.cancelled.connect(self._on_cancelled)
        worker.devices_found.connect(self._on_devices_found)
        worker.busy_changed.connect(self._on_busy)
        worker.busy_changed.connect(self.book.studio_busy)
        self.audio.problem.connect(self.show_notice)
        self._drop_catcher = _DropCatcher(self)
        QApplication.instance().installEventFilter(self._drop_catcher)
        # The takes (app/takes_controller.py over app/take_model.py): the autosaved project, the sentence
        # view. The controller gets the widgets it drives and answers through its signals.
        self._live_output = True  # False while sentences of a take are regenerated
        self.live_starts: dict[int, int] = {}
        self._chunk_start = 0
        self._eta: EtaEstimator | None = None
        self.takes = TakesController(
            self, segments_view=self.segments_view, output=self.output, editor=self.editor,
            voice_panel=self.voice_panel, audio=self.audio, settings=lambda: self.settings,
            engine_config=self.engine_config, is_generating=lambda: self.generating,
            live_starts=lambda: self.live_starts)
        self.takes.problem.connect(self.show_problem)
        self.takes.problem_gone.connect(self.error_banner.dismiss)
        self.takes.notice.connect(self.show_notice)
        self.takes.status_message.connect(lambda text, ms: self.statusBar().showMessage(text, ms))
        self.takes.regenerate_requested.connect(lambda request: self.start_job(request, live=False))
        self.takes.seed_reused.connect(self._use_seed)
        self.takes.restore()
        if settings.book_folder and BookController.is_book_folder(settings.book_folder):
            self.book.open_folder(settings.book_folder, quiet=True)
        if self.segments_view.take is None:
            self.takes.show_script_preview()
        self.editor.text_changed.connect(lambda: self.takes.script_changed(self.editor.text()))
        window_state.restore(self, self.settings)

        if notice:
            self.show_notice(notice)
        self.pages.setCurrentIndex(STUDIO_PAGE if settings.engine_chosen else WELCOME_PAGE)
        self.editor.edit.setFocus()  # the script is what one types first, not the voice list

    def _fit_to_screen(self) -> None:
        """The default size, or less where the screen is smaller (high scale factors), centred."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is None:
            self.resize(*DEFAULT_SIZE)
            return
        room = screen.availableGeometry()
        self.setMinimumSize(min(MINIMUM_SIZE[0], room.width()), min(MINIMUM_SIZE[1], room.height()))
        self.resize(min(DEFAULT_SIZE[0], int(room.width() * SCREEN_SHARE)),
                    min(DEFAULT_SIZE[1], int(room.height() * SCREEN_SHARE)))
        frame = self.frameGeometry()
        frame.moveCenter(room.center())
        self.move(frame.topLeft())

    def detect_devices(self) -> None:
        """Ask the worker which GPUs torch sees (without loading a model); the answer fills the
        Settings dialog's device list. Called once the window is up: the query imports torch."""
        self.request_devices.emit()

    # ---- layout -----------------------------------------------------------------------------
    def _build_studio(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        self.error_banner = Banner("error")
        self.notice_banner = Banner("notice")
        layout.addWidget(self.error_banner)
        layout.addWidget(self.notice_banner)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.voice_panel = VoicePanel(self.library, self.audio)
        self.voice_panel.save_requested.connect(self.save_voice)
        self.voice_panel.problem.connect(self.show_problem)
        self.voice_panel.problem_gone.connect(self.error_banner.dismiss)
        self.voice_panel.notice.connect(lambda text: self.notice_banner.show_message(text, CLIP_ADVICE))
        self.voice_panel.notice_gone.connect(lambda: self.notice_banner.dismiss(CLIP_ADVICE))
        self.voice_panel.library_requested.connect(self.open_voice_library)
        splitter.addWidget(self.voice_panel)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        self.editor = ScriptEditor()
        self.editor.text_changed.connect(lambda: self.editor.text().strip() and self.error_banner.dismiss(TEXT))
        # the script above, the take's sentences below it (app/widgets/segments_view.py)
        self.segments_view = SegmentsView()
        self.script_splitter = QSplitter(Qt.Orientation.Vertical)
        self.script_splitter.addWidget(self.editor)
        self.script_splitter.addWidget(self.segments_view)
        self.script_splitter.setChildrenCollapsible(False)
        # at the default 1180×760 the script shows ~5 lines and the table 8+ sentences (issue 26)
        self.script_splitter.setSizes([150, 330])
        rl.addWidget(self.script_splitter, 5)
        # shown while the script has <|speaker:N|> tags; its choices are kept in the settings
        self.speakers = SpeakerPanel(self.library, chosen=self.settings.speaker_voices)
        self.speakers.choices_changed.connect(self._remember_speaker_voices)
        self.editor.text_changed.connect(lambda: self.speakers.update_script(self.editor.text()))
        self.speakers.rows_changed.connect(self._order_speaker_combos)
        rl.addWidget(self.speakers)
        self.generate_bar = GenerateBar()
        self.generate_bar.button.clicked.connect(self.generate_or_stop)
        rl.addWidget(self.generate_bar)
        self.output = OutputPanel(self.audio)
        self.output.last_export_dir = self.settings.last_export_dir
        self.output.export_format = self.settings.export_format
        self.output.problem.connect(lambda text: self.show_problem(text, EXPORT))
        self.output.exported.connect(self._on_exported)
        self.output.take_shown.connect(self._on_take_shown)
        rl.addWidget(self.output, 3)
        splitter.addWidget(right)
        splitter.setChildrenCollapsible(False)  # a panel dragged to nothing is hard to find again
        splitter.setSizes([400, 780])
        self.main_splitter = splitter
        layout.addWidget(splitter, 1)
        return page

    def _build_menus(self) -> None:
        """Every command with its shortcut shown beside it; the shortcuts are the actions' own
        (added to the window too, so they work while no menu is open)."""
        def action(menu, text: str, slot, *keys) -> object:
            act = menu.addAction(text, slot)
            if keys:
                act.setShortcuts([QKeySequence(k) for k in keys])
                self.addAction(act)
            return act

        file_menu = self.menuBar().addMenu("&File")
        action(file_menu, "Open script…", self.open_script_dialog, QKeySequence.StandardKey.Open)
        self.recent_menu = file_menu.addMenu("Recent scripts")
        self.recent_menu.aboutToShow.connect(self._fill_recent_scripts)
        self._fill_recent_scripts()
        file_menu.addSeparator()
        self.book_action = action(file_menu, "Book…", self.show_book, "Ctrl+B")
        file_menu.addAction("Import book…", self.import_book_dialog)
        file_menu.addSeparator()
        file_menu.addAction("Open reference clip…", self.voice_panel.choose_file)
        self.export_action = action(file_menu, "Export…", self.output.export_current, "Ctrl+S")
        self.export_sentences_action = file_menu.addAction("Export sentences…", self.output.export_sentences_current)
        file_menu.addSeparator()
        self.save_project_action = file_menu.addAction("Save project…", lambda: self.takes.save_project())
        self.open_project_action = file_menu.addAction("Open project…", lambda: self.takes.open_project())
        self.compare_action = file_menu.addAction("Compare takes A/B…", lambda: self.takes.compare_takes())
        file_menu.addSeparator()
        file_menu.addAction("Quit", QKeySequence.StandardKey.Quit, self.close)
        generate_menu = self.menuBar().addMenu("&Generate")
        # Ctrl+Return is the main keyboard's Enter, Ctrl+Enter the keypad's: both generate.
        self.generate_action = action(generate_menu, "Generate", self.generate, "Ctrl+Return", "Ctrl+Enter")
        self.stop_action = action(generate_menu, "Stop", self._escape, "Esc")
        generate_menu.addSeparator()
        # Space reaches this only when no text field wants it (text widgets claim printable keys).
        self.play_action = action(generate_menu, "Play / Pause", self.output.toggle_play, "Space")
        voices_menu = self.menuBar().addMenu("&Voices")
        voices_menu.addAction("Voice library…", self.open_voice_library)
        model_menu = self.menuBar().addMenu("&Model")
        self.load_action = model_menu.addAction("Load now", self.load_model_now)
        model_menu.addAction("Choose model files…", self.choose_model_files)
        model_menu.addAction("Settings…", self.open_settings)
        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction("Open log folder", lambda: QDesktopServices.openUrl(
            QUrl.fromLocalFile(str(paths.log_dir()))))
        help_menu.addAction("About s2studio", self._about)

    def _build_shortcuts(self) -> None:
        """The shortcuts are the menu actions' (see ``_build_menus``)."""

    def _build_tab_order(self) -> None:
        """Script first, then its sentences (the table right under it; Tab leaves the table, the
        arrows move in it), then what acts on the script, then the output, then the voice panel."""
        vp, out = self.voice_panel, self.output
        chain = [self.editor.edit, self.segments_view.table, *self.editor.tag_buttons.values(),
                 self.generate_bar.button,
                 out.play_button, out.export_button, out.history, out.replay_button,
                 out.reexport_button, vp.voice_list, vp.rename_button, vp.delete_button, vp.library_button,
                 vp.open_button,
                 vp.record_button, vp.waveform, vp.play_button, vp.transcript, vp.name_edit, vp.save_button]
        for first, second in zip(chain, chain[1:]):
            QWidget.setTabOrder(first, second)

    def _order_speaker_combos(self) -> None:
        """Tab goes from the script through the speakers' voices to Generate."""
        if not hasattr(self, "generate_bar"):
            return  # still being built: _build_tab_order comes later
        last_tag = list(self.editor.tag_buttons.values())[-1] if self.editor.tag_buttons else self.editor.edit
        chain = [last_tag, *self.speakers.combos.values(), self.generate_bar.button]
        for first, second in zip(chain, chain[1:]):
            QWidget.setTabOrder(first, second)

    def _escape(self) -> None:
        """Esc stops a take; on the model-files page reached from the studio it goes back."""
        if self.pages.currentIndex() == WELCOME_PAGE and self.settings.engine_chosen:
            self.leave_welcome()
        else:
            self.stop()

    # ---- scripts and voices ----------------------------------------------------------------------
    def ask_script_path(self) -> str | None:
        """A separate method so tests can answer it without a modal dialog."""
        patterns = " ".join(f"*{e}" for e in scripts.SCRIPT_EXTENSIONS)
        path, _ = QFileDialog.getOpenFileName(self, "Open a script", "", f"Scripts ({patterns})")
        return path or None

    def open_script_dialog(self) -> None:
        path = self.ask_script_path()
        if path:
            self.open_script(path)

    def open_script(self, path: str) -> bool:
        """File ▸ Open script…: the file's text replaces the script; the file joins the recent list."""
        try:
            text = scripts.read_script(path)
        except scripts.ScriptFileError as err:
            self.show_problem(str(err), TEXT)
            return False
        self.pages.setCurrentIndex(STUDIO_PAGE if self.settings.engine_chosen else self.pages.currentIndex())
        self.editor.set_text(text)
        self.settings.recent_scripts = scripts.remember_script(self.settings.recent_scripts, path,
                                                               MAX_RECENT_SCRIPTS)
        self._fill_recent_scripts()
        self.error_banner.dismiss(TEXT)
        self.statusBar().showMessage(f"Script: {Path(path).name}", 5000)
        return True

    def _fill_recent_scripts(self) -> None:
        """The menu lists the recent scripts that still exist (gone ones leave the list too)."""
        self.settings.recent_scripts = scripts.existing_scripts(self.settings.recent_scripts)
        self.recent_menu.clear()
        for path in self.settings.recent_scripts:
            self.recent_menu.addAction(Path(path).name, lambda p=path: self.open_script(p)).setToolTip(path)
        self.recent_menu.setEnabled(bool(self.settings.recent_scripts))

    # ---- the Book view -------------------------------------------------------------------------------
    @property
    def showing_book(self) -> bool:
        return self.pages.currentIndex() == BOOK_PAGE

    def show_book(self) -> None:
        self.book.voices_changed()  # the voice folder may have changed behind the app's back
        self.book_view.reload_voices()
        self.pages.setCurrentIndex(BOOK_PAGE)

    def show_studio(self) -> None:
        self.pages.setCurrentIndex(STUDIO_PAGE if self.settings.engine_chosen else WELCOME_PAGE)

    def ask_book_path(self) -> str | None:
        """A separate method so tests can answer it without a modal dialog."""
        path, _ = QFileDialog.getOpenFileName(self, "Import a book", "", "Books (*.epub *.md *.markdown *.txt)")
        return path or None

    def import_book_dialog(self) -> None:
        path = self.ask_book_path()
        if path:
            self.import_book(path)

    def import_book(self, path: str) -> bool:
        """A manuscript becomes a book project (in the user's books folder) shown in the Book view."""
        self.show_book()
        return self.book.import_file(path) is not None

    def _on_book_opened(self, project) -> None:
        self.settings.book_folder = project.folder if project is not None else ""
        try:
            save_settings(self.settings, self.settings_path)  # a crash must not forget the open book
        except OSError as err:
            log.warning("settings not saved: %s", err)

    def open_voice_library(self) -> VoiceLibraryDialog:
        dialog = VoiceLibraryDialog(self.library, self.audio, parent=self)
        dialog.changed.connect(self._on_voices_changed)
        dialog.use_requested.connect(self._use_voice)
        dialog.open()  # window-modal, without a nested event loop
        self.library_dialog = dialog
        return dialog

    def _use_voice(self, voice_id: str) -> None:
        """The library's "Use this voice": listed afresh (the folder may have changed behind the
        panel's back), then selected for the next take."""
        self.voice_panel.reload_voices(voice_id)
        self.speakers.reload_voices()

    def _on_voices_changed(self, select_id: str) -> None:
        current = self.voice_panel.current_item_key()
        self.voice_panel.reload_voices(current)
        self.speakers.reload_voices()
        self.book.voices_changed()  # a voice saved again under its id: its book sentences render again
        self.book_view.reload_voices()

    # ---- messages -----------------------------------------------------------------------------
    def show_problem(self, text: str, cause: str = "") -> None:
        self.error_banner.show_message(text, cause)

    def show_notice(self, text: str) -> None:
        self.notice_banner.show_message(text)

    def _about(self) -> None:
        from s2studio import __version__

        QMessageBox.about(self, "About s2studio", f"s2studio {__version__}\nFish Audio S2 Pro, running locally.\n"
                                                  f"Log file: {paths.log_file()}")

    # ---- settings ---------------------------------------------------------------------------
    def _store_settings(self, settings: AppSettings) -> None:
        self.settings = settings
        self.audio.output_device = settings.output_device
        self.audio.input_device = settings.input_device
        try:
            save_settings(settings, self.settings_path)
        except OSError as err:
            self.show_problem(f"The settings could not be saved ({err.strerror or err}); they apply until you quit.",
                              SETTINGS)
        else:
            self.error_banner.dismiss(SETTINGS)

    def apply_settings(self, settings: AppSettings) -> None:
        engine_changed = _engine_identity(settings) != _engine_identity(self.settings)
        theme_changed = settings.theme != self.settings.theme
        self._store_settings(settings)
        if theme_changed:
            apply_theme(QApplication.instance(), settings.theme)
        if engine_changed:  # e.g. another model file: the last engine error was about the old one
            self.error_banner.dismiss(ENGINE)

    def _remember_speaker_voices(self, choices: dict) -> None:
        """Saved at once: a speaker's voice is chosen rarely and should survive a crash too."""
        s = self.settings.copy()
        s.speaker_voices = choices
        self._store_settings(s)

    def _use_seed(self, seed: int) -> None:
        """A take's "Reuse seed": the next takes use its seed, locked."""
        s = self.settings.copy()
        s.seed, s.seed_locked = int(seed), True
        self.apply_settings(s)
        self.statusBar().showMessage(f"The next takes use seed {seed} (Settings ▸ seed, locked).", 8000)

    def open_settings(self) -> None:
        dialog = SettingsDialog(self.settings, engine_devices=self.engine_devices,
                                codec_verdict=self._codec_verdict(), parent=self, api_keys=self.api_keys)
        if dialog.exec():
            self.apply_settings(dialog.result_settings())

    def adopt_model_files(self, model_path: str, tokenizer_path: str) -> None:
        s = self.settings.copy()
        s.model_path, s.tokenizer_path = model_path, tokenizer_path
        self.apply_settings(s)
        self.pages.setCurrentIndex(STUDIO_PAGE)
        self.editor.edit.setFocus()

    def choose_model_files(self) -> None:
        """Model ▸ Choose model files…: the welcome page, with a way back when a model is set."""
        self.welcome.set_can_go_back(self.settings.engine_chosen)
        self.pages.setCurrentIndex(WELCOME_PAGE)

    def leave_welcome(self) -> None:
        if self.settings.engine_chosen:
            self.pages.setCurrentIndex(STUDIO_PAGE)
            self.editor.edit.setFocus()

    def _codec_verdict(self) -> str:
        if self.load_info is None:
            return ""
        return f"Codec on {self.load_info.codec_device}: {self.load_info.codec_reason}"

    # ---- model / generation -------------------------------------------------------------------
    def engine_config(self) -> EngineSettings:
        """What the worker runs on: the local model's settings, or a server's (``RemoteSettings``)."""
        if self.settings.uses_server:
            from s2studio.app.server_engine import remote_settings

            return remote_settings(self.settings, self.api_keys)
        return engine_settings(self.settings)

    def load_model_now(self) -> None:
        if not self.settings.engine_chosen:
            self.pages.setCurrentIndex(WELCOME_PAGE)
            return
        self.error_banner.hide()
        self.submit_request.emit(LoadRequest(self.engine_config()))

    def build_request(self) -> GenerateRequest | None:
        text = self.editor.text().strip()
        if not text:
            self.show_problem("Type something to say first.", TEXT)
            return None
        choice = self.voice_panel.current_choice()
        if choice.kind == "reference" and not choice.transcript:
            self.show_problem("The reference clip needs its transcript: type exactly what is said in it.",
                              TRANSCRIPT)
            return None
        if choice.kind == "reference" and len(choice.samples) > DEFAULT_MAX_REFERENCE_SECONDS * CODEC_SAMPLE_RATE:
            # a long clip opens for trimming: the part kept must still fit
            kept = len(choice.samples) / CODEC_SAMPLE_RATE
            self.show_problem(f"The part of the reference clip kept is {kept:.1f} s; "
                              f"at most {DEFAULT_MAX_REFERENCE_SECONDS:g} s can be used. Drag on its waveform to keep "
                              "less (5–30 s works best).", CLIP)
            return None
        s = self.settings
        speakers = self.speakers.mapping()  # empty unless the script has mapped speaker tags
        return GenerateRequest(
            engine=self.engine_config(), text=text, voice_id=choice.voice_id,
            reference_audio=choice.samples if choice.kind == "reference" else None,
            reference_text=choice.transcript, sampling=generation_params(s),
            segmentation=s.segmentation_enabled, segment_max_chars=s.segment_max_chars, pause_ms=s.pause_ms,
            trim_silence=s.trim_silence, normalize=s.normalize, dynamic_normalize=s.dynamic_normalize,
            voice_label=f"dialogue ({self.speakers.label()})" if speakers else choice.label,
            speaker_voices=speakers)

    def generate_or_stop(self) -> None:
        if self.generating:
            self.stop()
        else:
            self.generate()

    def generate(self) -> None:
        if self.generating:  # other work (a load, a voice being saved) simply queues ahead of it
            return
        if not self.settings.engine_chosen:
            self.pages.setCurrentIndex(WELCOME_PAGE)
            return
        request = self.build_request()
        if request is None:
            return
        self.start_job(request)

    def start_job(self, request: GenerateRequest, live: bool = True) -> None:
        """Run a take (``live``: shown and played as it is made) or, with ``request.take_id``,
        regenerate sentences of a take (the take is re-assembled when they are done)."""
        try:
            all_segments = segments_of(synthesis_request(request))
        except S2Error as err:  # e.g. a hand-edited settings file with an impossible limit
            self.show_problem(str(err), TEXT)
            self.segments_view.set_busy(set())
            return
        self.error_banner.hide()
        self.audio.stop()
        self.generating = True
        self._live_started = False
        self._live_output = live
        self.live_starts: dict[int, int] = {}  # sentence -> its first sample in the live take
        self._chunk_start = 0
        segments = [(x.index, x.text) for x in all_segments
                    if request.only_segments is None or x.index in request.only_segments]
        self._eta = EtaEstimator(segments, request.sampling.max_new_tokens)
        self.generate_bar.set_running(True)
        self.generate_bar.stats.setText("")
        if live:
            self.segments_view.show_preview([x.text for x in all_segments])
            self.output.begin_live(estimated_seconds(request.text))
        self.submit_request.emit(request)

    def stop(self) -> None:
        if self.generating:
            self.audio.stop()  # first: the speakers go quiet now, whatever cancelling costs
            self.worker.cancel()  # thread-safe, direct: a queued call would wait behind the job
            self.statusBar().showMessage("Stopping…")

    def save_voice(self, samples, transcript: str, name: str, replace_id: str | None = None) -> None:
        if not self.settings.engine_chosen:
            self.voice_panel.save_failed()
            self.show_problem("Choose the model first: a voice is encoded with the model's audio codec.", ENGINE)
            return
        self.statusBar().showMessage("Encoding the reference…")
        self.submit_request.emit(SaveVoiceRequest(self.engine_config(), samples, transcript, name, replace_id))

    # ---- worker signals ---------------------------------------------------------------------
    def _on_busy(self, busy: bool) -> None:
        self.busy = busy
        self.load_action.setEnabled(not busy)

    def _on_loading(self, stage: str, fraction: float) -> None:
        self.generate_bar.show_loading(stage, fraction)
        self.model_status.setText(f"Model: {stage.lower()}…")

    def _on_loaded(self, info: LoadInfo) -> None:
        self.load_info = info
        self.engine_devices = list(info.devices)
        self.model_loaded = True
        self.error_banner.dismiss(ENGINE)
        if not self.generating:
            self.generate_bar.progress.hide()
        self.model_status.setText(f"Model loaded in {info.load_seconds:.1f} s · {self._codec_verdict()}")
        self.model_status.setToolTip(self.model_status.text())
        self.statusBar().showMessage("Model ready.", 5000)

    def _on_progress(self, p) -> None:
        self.generate_bar.show_progress(p, self._eta.update(p) if self._eta is not None else None)
        if not self.generating:
            return
        if self._live_output and not p.segment_done:  # where each sentence starts in the live take
            self.live_starts.setdefault(p.segment - 1, self._chunk_start)
        if not (self._live_output and self._live_started):  # heard: the highlight follows the playback
            self.segments_view.set_spoken(p.segment - 1)

    def _on_chunk(self, samples, rate: int) -> None:
        if not self.generating or not self._live_output:
            return
        self._chunk_start = self.output.waveform.sample_count
        self.output.append_live(samples, rate)
        if not self._live_started:
            self._live_started = self.audio.start_live("output", rate)
        self.audio.push_live(samples)

    def _take_of(self, finished: FinishedTake) -> Take:
        """The finished take, kept in the project sentence by sentence (and so autosaved)."""
        return self.takes.take_finished(finished, self.generate_bar.stats.text())

    def _on_finished(self, finished: FinishedTake) -> None:
        result = finished.result
        if finished.request.take_id:  # sentences of a take, regenerated
            self._end_generation()
            self.takes.sentences_made(finished)
            self.statusBar().showMessage(f"Regenerated {len(result.segments)} sentence(s) in "
                                         f"{result.timings.total_s:.1f} s.", 5000)
            return
        self.audio.end_live()
        self.output.end_live(self._take_of(finished))
        self._end_generation()
        t = result.timings
        self.statusBar().showMessage(f"Done: {t.audio_s:.1f} s of audio in {t.total_s:.1f} s (seed {result.seed}).")
        self._remember_text(finished.request.text)

    def _on_stopped(self, finished: FinishedTake) -> None:
        """Stop was pressed after some audio was made: that part is a take like any other (it can
        be played, exported and found in the history), marked as stopped."""
        if not self.generating:
            return
        if finished.request.take_id:  # the sentences finished before Stop are kept
            self._end_generation()
            self.takes.sentences_made(finished)
            return
        self.audio.stop()
        self.output.end_live(self._take_of(finished))
        self._end_generation()
        self._remember_text(finished.request.text)

    def _on_take_shown(self, take: Take) -> None:
        if not self.generating:  # the statistics line describes the take on screen, not the newest
            self.generate_bar.stats.setText(take.stats)

    def _on_devices_found(self, devices) -> None:
        if self.load_info is None:  # a load's list is as fresh; keep it
            self.engine_devices = list(devices)

    def _on_cancelled(self) -> None:
        if self.generating:
            self.output.end_live(None) if self._live_output else self.segments_view.set_busy(set())
            self._end_generation()
        self.statusBar().showMessage("Stopped.", 5000)

    def _on_failed(self, error: WorkerError) -> None:
        if self.generating:
            self.audio.stop()
            self.output.end_live(None) if self._live_output else self.segments_view.set_busy(set())
            self._end_generation()
        self.voice_panel.save_failed()
        self.generate_bar.progress.hide()
        self.model_status.setText("Model: not loaded")
        self.model_loaded = False
        self.error_banner.show_error(error, ENGINE)
        self.statusBar().showMessage("Failed.", 5000)

    def _on_voice_saved(self, info) -> None:
        self.voice_panel.voice_saved(info)
        self.speakers.reload_voices()
        self.book.voices_changed()  # re-recorded under the same id: its book sentences render again
        self.book_view.reload_voices()
        self.statusBar().showMessage(f"Voice “{info.name}” saved.", 5000)

    def _on_exported(self, path: str) -> None:
        self.error_banner.dismiss(EXPORT)
        self.settings.last_export_dir = str(Path(path).parent)
        self.settings.export_format = self.output.export_format
        self.statusBar().showMessage(f"Exported {path}", 5000)

    def _end_generation(self) -> None:
        self.generating = False
        self._live_output = True
        self._eta = None
        self.generate_bar.set_running(False)
        self.segments_view.set_spoken(None)
        if self.segments_view.take is None:
            self.takes.show_script_preview()

    def _remember_text(self, text: str) -> None:
        recent = [t for t in self.settings.recent_texts if t != text]
        self.settings.recent_texts = [text] + recent[:9]

    # ---- window -----------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:
        if dropped_local_path(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        if dropped_local_path(event.mimeData()):
            self.open_dropped(event.mimeData())
            event.acceptProposedAction()

    def open_dropped(self, mime) -> None:
        """A dropped audio file becomes the reference; anything else is named in a banner."""
        path = dropped_audio_path(mime)
        if path is not None:
            self.error_banner.dismiss(DROP)
            self.open_reference(path)
            return
        other = dropped_local_path(mime)
        if other is not None:
            kinds = ", ".join(SUPPORTED_EXTENSIONS)
            self.show_problem(f"{other} is not an audio file s2studio can use as a reference clip "
                              f"(it opens {kinds}). Scripts open with File ▸ Open script…; books (.epub, .md) are "
                              "imported when dropped, and a .txt on the Book view.", DROP)

    def open_reference(self, path: Path) -> None:
        self.pages.setCurrentIndex(STUDIO_PAGE if self.settings.model_path else self.pages.currentIndex())
        if self.voice_panel.load_reference_file(path):  # the panel dismisses the clip's old problem
            self.statusBar().showMessage(f"Reference: {path.name}", 5000)

    # ---- projects (the dialogs and actions are in app/takes_controller.py) -------------------------
    def confirm_quit(self) -> bool:
        """Asked when the window closes while a take is being generated (tests answer it)."""
        answer = QMessageBox.question(self, "Quit s2studio?", "A take is being generated. Quit anyway? "
                                      "The part generated so far is not kept.",
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def quit_from_terminal(self) -> None:
        """Ctrl+C (or SIGTERM) in the terminal that started the app: close as the window's close
        button does (the project autosaved, the settings saved), without asking about a take
        in progress: the person asked to stop from the terminal."""
        self._asked_by_terminal = True
        self.close()

    def closeEvent(self, event) -> None:
        if self.generating and not getattr(self, "_asked_by_terminal", False) and not self.confirm_quit():
            event.ignore()
            return
        window_state.remember(self, self.settings)
        self.takes.flush(script=self.editor.text())
        self.worker.cancel()
        if not self.book.shutdown():  # finished sentences are on disk; those in flight are dropped
            log.warning("the book render did not stop in time")
        self.audio.stop()
        if self.audio.recording:
            self.audio.stop_recording()
        self.settings.last_export_dir = self.output.last_export_dir
        try:
            save_settings(self.settings, self.settings_path)
        except OSError as err:
            log.warning("settings not saved at exit: %s", err)
        QApplication.instance().removeEventFilter(self._drop_catcher)
        super().closeEvent(event)
