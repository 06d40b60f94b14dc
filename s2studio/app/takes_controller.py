"""The takes on screen: a thin Qt adapter over the takes model (app/take_model.py).

It turns the sentence view's and the output history's signals into the model's operations
and shows what changed; it keeps the project saved (autosave folder and project files, on a
background thread) and owns the project dialogs and A/B comparisons. Its collaborators (the
widgets it drives and a few narrow callables) are given to its constructor; it talks back to
the window only through its signals (``problem``, ``status_message``, ``regenerate_requested``,
``seed_reused``…), never through the window's attributes.

Saving never blocks the event loop: the project is copied structurally on the UI thread (the
audio arrays are shared; they never change once made) and written on a background thread.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QLockFile, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from s2studio.app import paths
from s2studio.app.project import Project, ProjectTake
from s2studio.app.project_file import (
    PROJECT_SUFFIX,
    ProjectFileError,
    load_project_file,
    load_project_folder,
    save_project_file,
    save_project_folder,
)
from s2studio.app.requests import FinishedTake
from s2studio.app.settings import AppSettings
from s2studio.app.take_model import CannotRegenerate, TakesModel, params_summary
from s2studio.app.widgets.ab_compare import ABCompareDialog, Candidate
from s2studio.app.widgets.output_panel import Take
from s2studio.engine.pipeline import EngineSettings, Segmentation, split_request_text

log = logging.getLogger(__name__)

AUTOSAVE_DELAY_MS = 600  # typing in the script saves once it pauses, not per key
PREVIEW_DELAY_MS = 250
PROJECTS, AUTOSAVE = "project", "autosave"  # banner causes


def output_take(take: ProjectTake) -> Take:
    """A project take as the output panel lists it (assembled from its chosen versions)."""
    return Take(text=take.text, voice=take.voice_label, seed=take.base_seed, params=params_summary(take.settings),
                audio=take.assemble(), sample_rate=take.sample_rate,
                stopped=take.stopped or any(s.current is None for s in take.sentences), stats=take.stats,
                segments=tuple(span for span in take.spans() if span[1] > span[0]),  # Export sentences…
                created=take.created, key=take.id)


class TakesController(QObject):
    saved = Signal(str)  # a project file written (path)
    save_failed = Signal(str)  # one sentence
    problem = Signal(str, str)  # for the error banner: text, cause (PROJECTS or AUTOSAVE)
    problem_gone = Signal(str)  # the cause's banner can go
    notice = Signal(str)  # for the notice banner
    status_message = Signal(str, int)  # text, how long it shows (ms)
    regenerate_requested = Signal(object)  # a GenerateRequest for sentences of a take: run it (not live)
    seed_reused = Signal(object)  # the next takes use this seed, locked (object: a 64-bit seed overflows int)
    # from the saving thread to the UI thread (queued): what happened, and its message or path
    _io_done = Signal(str, str)

    def __init__(self, parent: QWidget, *, segments_view, output, editor, voice_panel, audio,
                 settings: Callable[[], AppSettings], engine_config: Callable[[], EngineSettings],
                 is_generating: Callable[[], bool], live_starts: Callable[[], dict[int, int]],
                 model: TakesModel | None = None):
        """``parent`` owns this object and parents its dialogs. ``settings``: the app's current
        settings; ``engine_config``: what a regeneration runs on; ``is_generating``: a take is
        being made; ``live_starts``: where each sentence starts in the take being made."""
        super().__init__(parent)
        self._parent = parent
        self.model = model or TakesModel()
        self._view, self._output, self._editor, self._voice_panel, self._audio = (
            segments_view, output, editor, voice_panel, audio)
        self._settings, self._engine_config = settings, engine_config
        self._is_generating, self._live_starts = is_generating, live_starts
        self.autosave_folder = paths.autosave_dir()
        self._lock: QLockFile | None = None
        self._claimed = False
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="project-io")
        self._pending: list[Future] = []
        self._closed = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(AUTOSAVE_DELAY_MS)
        self._timer.timeout.connect(self.autosave_now)
        # the script's sentences are previewed once typing pauses, not at every key
        self._preview_timer = QTimer(self)
        self._preview_timer.setSingleShot(True)
        self._preview_timer.setInterval(PREVIEW_DELAY_MS)
        self._preview_timer.timeout.connect(self._preview_if_no_take)
        self._io_done.connect(self._on_io_done)
        self.compare_dialog: ABCompareDialog | None = None
        view = segments_view
        view.play_from.connect(self.play_from)
        view.regenerate.connect(lambda i: self.regenerate([i]))
        view.regenerate_unlocked.connect(self.regenerate_unlocked)
        view.lock_toggled.connect(self.set_locked)
        view.version_chosen.connect(self.choose_version)
        view.compare_requested.connect(self.compare_sentence)
        view.reuse_seed.connect(self.reuse_seed)
        output.take_shown.connect(self._on_take_shown)
        history = output.history
        history.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        for text, slot in (("Compare with the take on screen (A/B)…", self._compare_selected),
                           ("Reuse this take's seed", self._reuse_selected_seed),
                           ("Delete take", self.delete_selected_take)):
            action = QAction(text, history)
            action.triggered.connect(slot)
            history.addAction(action)
        audio.position_changed.connect(self._on_position)
        audio.playback_stopped.connect(lambda owner: owner == "output" and view.set_spoken(None))

    # ---- what tests and the window read -----------------------------------------------------------
    @property
    def project(self) -> Project:
        return self.model.project

    @property
    def unsaved_changes(self) -> bool:
        """Something changed since the project was last saved as (or opened from) a file."""
        return self.model.unsaved_changes

    # ---- the project --------------------------------------------------------------------------
    def _claim_autosave(self) -> None:
        """One running s2studio per autosave folder: a second one (another process) keeps its
        project in a folder of its own beside it, so neither overwrites the other's takes. Claimed
        at start when the folder exists, else before the first save (nothing is created on disk
        until there is something to keep)."""
        if self._claimed:
            return
        self._claimed = True
        self.autosave_folder.parent.mkdir(parents=True, exist_ok=True)
        lock = QLockFile(str(self.autosave_folder) + ".lock")
        lock.setStaleLockTime(0)  # stale only when its process is gone, however long it has run
        if lock.tryLock(200):
            self._lock = lock
            return
        info = lock.getLockInfo()  # PySide6: (pid, host name, app name)
        pid = info[-3] if isinstance(info, tuple) and len(info) >= 3 else None
        if pid == os.getpid():  # another window of this same process (tests): they take turns
            return
        self.autosave_folder = self.autosave_folder.with_name(f"{self.autosave_folder.name}-{os.getpid()}")
        self.notice.emit(f"Another s2studio is open: this window's takes are saved in "
                         f"{self.autosave_folder} (File ▸ Save project… keeps them in a file).")

    def _claim_or_warn(self) -> None:
        try:
            self._claim_autosave()
        except OSError as err:  # the save itself will report a folder that cannot be written
            log.warning("autosave folder %s: %s", self.autosave_folder, err)

    def restore(self) -> None:
        """At start: the autosaved project, or a banner and a fresh one if it cannot be read (the
        damaged folder is moved aside, untouched, so nothing is lost)."""
        if self.autosave_folder.parent.is_dir():
            self._claim_or_warn()
        try:
            project = load_project_folder(self.autosave_folder)
        except ProjectFileError as err:
            stamp = time.strftime('%Y%m%d-%H%M%S')
            kept = self.autosave_folder.with_name(f"{self.autosave_folder.name}.damaged-{stamp}")
            try:
                os.replace(self.autosave_folder, kept)
                where = f" It was kept as {kept}."
            except OSError:
                where = ""
                self.autosave_folder = self.autosave_folder.with_name(f"{self.autosave_folder.name}-new")
            self.problem.emit(f"The autosaved project could not be read ({err.problem}) A new project "
                              f"was started.{where}", AUTOSAVE)
            return
        if project is not None:
            self._adopt(project)

    def _adopt(self, project: Project) -> None:
        self.model.adopt(project)
        output = self._output
        self._view.show_take(None)
        output.clear_takes()
        for take in project.takes:
            output.add_take(output_take(take))
        if project.script:
            self._editor.set_text(project.script)
        if project.voice_id:  # the voice the last take used, if the library still has it
            self._voice_panel.select_voice(project.voice_id)
        current = self.model.current()
        if current is not None:
            output.select_take(current.id)
        else:
            self.show_script_preview()

    def _changed(self, take: ProjectTake | None = None) -> None:
        """Something in the project changed: refresh what shows it, save soon."""
        if take is not None:
            self._output.replace_take(output_take(take))
            if self._view.take is take:
                self._view.show_take(take)
        self.model.unsaved_changes = True
        self._timer.start()

    def script_changed(self, text: str) -> None:
        self.model.set_script(text)
        view = self._view
        if view.take is None:
            self._preview_timer.start()
        else:
            view.set_script_differs(text.strip() != view.take.text.strip())
        self._timer.start()

    def _preview_if_no_take(self) -> None:
        """The preview timer's end. Typing armed it while no take was shown; a take shown since
        (one finished before the timer was due, which a short take on a busy machine does, or one
        picked in the history) keeps its sentences: the preview would drop the take from the view,
        and with it the sentence buttons (Regenerate did nothing)."""
        if self._view.take is None:
            self.show_script_preview()

    def show_script_preview(self) -> None:
        self._preview_timer.stop()
        s = self._settings()
        seg = Segmentation(enabled=s.segmentation_enabled, max_chars=s.segment_max_chars, pause_ms=s.pause_ms)
        text = self._editor.text().strip()
        try:
            texts = [x.text for x in split_request_text(text, seg)] if text else []
        except Exception:  # noqa: BLE001 - a preview must never break typing; the take reports it
            texts = []
        self._view.show_preview(texts)

    # ---- saving -------------------------------------------------------------------------------
    def autosave_now(self) -> Future | None:
        self._timer.stop()
        self._claim_or_warn()
        copy, removable = self.model.for_saving()
        folder = self.autosave_folder

        def work():
            try:
                save_project_folder(copy, folder, removable)
            except (OSError, ValueError, ProjectFileError) as err:
                log.warning("autosave to %s failed: %s", folder, err)
                self._io_done.emit(AUTOSAVE, f"The project could not be saved automatically in {folder} "
                                             f"({err.strerror or err}); save it with File ▸ Save project….")
        return self._submit(work)

    def save_to(self, path: str) -> Future | None:
        if not path.lower().endswith(PROJECT_SUFFIX):
            path += PROJECT_SUFFIX
        copy = self.model.snapshot()

        def work():
            try:
                save_project_file(copy, path)
            except (OSError, ValueError, ProjectFileError) as err:
                self._io_done.emit(PROJECTS, f"The project could not be saved as {path}: "
                                             f"{getattr(err, 'strerror', None) or err}")
                return
            self._io_done.emit("saved", path)
        return self._submit(work)

    def _submit(self, work) -> Future | None:
        if self._closed:  # the window has gone; flush() wrote the last state
            return None
        self._pending = [f for f in self._pending if not f.done()]
        future = self._io.submit(work)
        self._pending.append(future)
        return future

    def flush(self, script: str | None = None) -> None:
        """At exit: the last changes (and ``script``, the editor's text) on disk before the window goes."""
        if script is not None:
            self.model.set_script(script)
        if self._closed:
            return
        if self._timer.isActive():
            self.autosave_now()
        self._closed = True
        for f in list(self._pending):
            f.result()
        self._io.shutdown(wait=True)
        if self._lock is not None:
            self._lock.unlock()
            self._lock = None

    def _on_io_done(self, what: str, text: str) -> None:
        if what == "saved":
            self.model.saved_as_file()
            self.problem_gone.emit(PROJECTS)
            self.status_message.emit(f"Project saved as {text}", 5000)
            self.saved.emit(text)
            return
        self.problem.emit(text, what)
        if what == PROJECTS:
            self.save_failed.emit(text)

    def open_file(self, path: str) -> bool:
        try:
            project = load_project_file(path)
        except ProjectFileError as err:
            self.problem.emit(str(err), PROJECTS)  # the project on screen stays as it was
            return False
        self.problem_gone.emit(PROJECTS)
        self._adopt(project)
        self.model.saved_as_file()
        self.autosave_now()
        return True

    # ---- takes from the worker --------------------------------------------------------------------
    def record(self, finished: FinishedTake, stats: str) -> ProjectTake:
        """A new take (complete, or stopped: the sentences not reached have no version yet)."""
        take = self.model.add_take(finished, stats)
        self._timer.start()
        return take

    def take_finished(self, finished: FinishedTake, stats: str) -> Take:
        """The finished take, kept in the project sentence by sentence (and so autosaved), as
        the output panel shows it."""
        return output_take(self.record(finished, stats))

    def sentences_made(self, finished: FinishedTake) -> None:
        """Regenerated sentences: each becomes the chosen version of its sentence (a sentence
        stopped half-way is dropped: the old version stays)."""
        self._view.set_busy(set())
        take = self.model.add_versions(finished)
        if take is not None:
            self._changed(take)

    # ---- sentence actions ------------------------------------------------------------------------
    def current_take(self) -> ProjectTake | None:
        return self._view.take

    def regenerate(self, indices: list[int], seeds: dict[int, int] | None = None) -> bool:
        """Generate these sentences of the shown take again (new seeds unless given)."""
        take = self.current_take()
        if take is None or self._is_generating() or not indices:
            return False
        try:
            request = self.model.regeneration(take, indices, self._engine_config(), seeds)
        except CannotRegenerate as why:
            self.problem.emit(str(why), PROJECTS)
            return False
        self._view.set_busy(set(indices))
        self.regenerate_requested.emit(request)
        return True

    def regenerate_unlocked(self) -> None:
        take = self.current_take()
        if take is not None:
            self.regenerate(self.model.unlocked(take))

    def set_locked(self, index: int, locked: bool) -> None:
        take = self.current_take()
        if take is not None and self.model.set_locked(take, index, locked):
            self._view.show_take(take)
            self._timer.start()

    def choose_version(self, index: int, version: int) -> None:
        take = self.current_take()
        if take is not None and self.model.choose_version(take, index, version):
            self._changed(take)

    def play_from(self, index: int) -> None:
        take = self.current_take()
        if take is None or take.sentences[index].current is None:
            return
        output = self._output
        if output.current is None or output.current.key != take.id:
            output.select_take(take.id)
        output.audio.stop() if output.audio.playing_owner == "output" else None
        output.seek(take.spans()[index][0])
        self._view.set_spoken(index)
        output.toggle_play()

    def reuse_seed(self) -> None:
        take = self.current_take()
        if take is not None:
            self.seed_reused.emit(int(take.base_seed))

    def _selected_output_take(self) -> Take | None:
        row = self._output.history.currentRow()
        takes = self._output.takes
        return takes[row] if 0 <= row < len(takes) else None

    def delete_selected_take(self) -> None:
        take = self._selected_output_take()
        if take is None or not self.confirm_delete_take(take):
            return
        self.model.delete_take(take.key)
        if take.key:
            if self._view.take is not None and self._view.take.id == take.key:
                self._view.show_take(None)
                self.show_script_preview()
            self._output.remove_take(take.key)
        self._timer.start()

    def _reuse_selected_seed(self) -> None:
        take = self._selected_output_take()
        if take is not None and take.key:
            self._output.select_take(take.key)
            self.reuse_seed()

    def _compare_selected(self) -> None:
        selected = self._selected_output_take()
        takes = self._output.takes
        current = self._output.current
        if selected is None or current is None or selected is current or len(takes) < 2:
            self.compare_takes()
            return
        candidates = [Candidate(t.summary(), t.audio, t.sample_rate) for t in takes]
        dialog = ABCompareDialog("Compare takes", candidates, takes.index(selected), takes.index(current),
                                 self._audio, self._parent)
        dialog.picked.connect(lambda i: self._output.select_take(takes[i].key))
        self._open(dialog)

    # ---- A/B ----------------------------------------------------------------------------------
    def compare_sentence(self, index: int) -> ABCompareDialog | None:
        take = self.current_take()
        if take is None or len(take.sentences[index].versions) < 2:
            return None
        s = take.sentences[index]
        candidates = [Candidate(f"Version {i + 1} · seed {v.seed} · {v.seconds:.1f} s", v.audio, v.sample_rate)
                      for i, v in enumerate(s.versions)]
        other = s.chosen - 1 if s.chosen > 0 else len(s.versions) - 1
        dialog = ABCompareDialog(f"Sentence {index + 1}: compare versions", candidates, other, s.chosen,
                                 self._audio, self._parent)
        dialog.picked.connect(lambda v: self.choose_version(index, v))
        return self._open(dialog)

    def compare_takes(self) -> ABCompareDialog | None:
        """The take on screen (B) against the one before it in the history (A); keep one: it is shown."""
        output = self._output
        takes = output.takes
        if len(takes) < 2:
            self.status_message.emit("Make at least two takes to compare them.", 5000)
            return None
        current = output.current
        b = takes.index(current) if current in takes else len(takes) - 1
        a = b - 1 if b > 0 else len(takes) - 1
        candidates = [Candidate(t.summary(), t.audio, t.sample_rate) for t in takes]
        dialog = ABCompareDialog("Compare takes", candidates, a, b, self._audio, self._parent)
        dialog.picked.connect(lambda i: output.select_take(takes[i].key) if takes[i].key
                              else output.show_take(takes[i]))
        return self._open(dialog)

    def _open(self, dialog: ABCompareDialog) -> ABCompareDialog:
        if self.compare_dialog is not None:
            self.compare_dialog.close()
        self.compare_dialog = dialog
        dialog.open()
        return dialog

    # ---- following the output ----------------------------------------------------------------------
    def _on_take_shown(self, take: Take) -> None:
        project_take = self.model.take(take.key)
        if project_take is not None:
            self._preview_timer.stop()  # the take's sentences, not the script's, are shown now
            self.model.show(project_take)
            view = self._view
            view.script_differs = self._editor.text().strip() != project_take.text.strip()
            view.show_take(project_take)

    def _on_position(self, owner: str, sample: int) -> None:
        view = self._view
        if owner == "output" and self._is_generating():  # the take being made, heard as it arrives
            starts = self._live_starts()
            heard = [i for i, start in starts.items() if start <= sample]
            view.set_spoken(max(heard) if heard else None)
            return
        current = self._output.current
        if owner == "output" and view.take is not None and current is not None and current.key == view.take.id:
            view.set_spoken(view.take.sentence_at(sample))

    # ---- File ▸ Save project… / Open project… --------------------------------------------------
    def ask_project_path(self, save: bool) -> str | None:
        """A separate method so tests can answer it without a modal dialog."""
        folder = self._settings().last_export_dir or str(Path.home())
        if save:
            name = f"s2studio-{time.strftime('%Y%m%d-%H%M')}{PROJECT_SUFFIX}"
            path, _ = QFileDialog.getSaveFileName(self._parent, "Save project", str(Path(folder) / name),
                                                  f"s2studio project (*{PROJECT_SUFFIX})")
        else:
            path, _ = QFileDialog.getOpenFileName(self._parent, "Open project", folder,
                                                  f"s2studio project (*{PROJECT_SUFFIX});;All files (*)")
        return path or None

    def ask_keep_current_project(self) -> str:
        """Before another project replaces this one: "save", "discard" or "cancel" (tests answer it)."""
        box = QMessageBox(QMessageBox.Icon.Question, "Open project",
                          "Opening a project replaces the takes on screen. Save them as a project first?",
                          QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                          | QMessageBox.StandardButton.Cancel, self._parent)
        answer = QMessageBox.StandardButton(box.exec())
        return {QMessageBox.StandardButton.Save: "save", QMessageBox.StandardButton.Discard: "discard"}.get(
            answer, "cancel")

    def confirm_delete_take(self, take: Take) -> bool:
        """Deleting a take from the history (and the project) asks first (tests answer it)."""
        answer = QMessageBox.question(self._parent, "Delete take", f"Delete the take “{take.summary()}” and all "
                                      "its sentence versions?", QMessageBox.StandardButton.Yes
                                      | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def save_project(self) -> bool:
        """Ask where, then save in the background (``saved`` or a banner). False: no path chosen."""
        path = self.ask_project_path(save=True)
        if path:
            self.save_to(path)
            self.status_message.emit(f"Saving the project to {path}…", 5000)
        return bool(path)

    def open_project(self) -> None:
        if self._is_generating():
            self.notice.emit("Stop the take being generated before opening another project.")
            return
        if self.model.unsaved_changes and self.model.project.takes:
            answer = self.ask_keep_current_project()
            # "save": the project is copied at once, so opening another cannot change what is saved
            if answer == "cancel" or (answer == "save" and not self.save_project()):
                return
        path = self.ask_project_path(save=False)
        if path and self.open_file(path):
            self.status_message.emit(f"Opened {path}", 5000)
