"""The takes model's wiring: the project (app/project.py), its autosave and files, the
sentence view, A/B comparisons, and the requests that regenerate sentences.

The window keeps running takes (the worker, live playback, the generate bar); this object turns
what the worker finished into project takes, keeps the output's history in step with the
project, and asks the window to run sentence regenerations (``GenerateRequest.take_id``).

Saving never blocks the event loop: the project is copied structurally on the UI thread (the
audio arrays are shared; they never change once made) and written on a background thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PySide6.QtCore import QLockFile, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog, QMessageBox

from s2studio.app import paths
from s2studio.app.project import Project, ProjectTake, Sentence, SentenceVersion
from s2studio.app.project_file import (
    PROJECT_SUFFIX,
    ProjectFileError,
    load_project_file,
    load_project_folder,
    save_project_file,
    save_project_folder,
    versions_of,
)
from s2studio.app.requests import FinishedTake, GenerateRequest
from s2studio.app.widgets.ab_compare import ABCompareDialog, Candidate
from s2studio.app.widgets.output_panel import Take
from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import Segmentation, split_request_text

log = logging.getLogger(__name__)

AUTOSAVE_DELAY_MS = 600  # typing in the script saves once it pauses, not per key
PREVIEW_DELAY_MS = 250
PROJECTS, AUTOSAVE = "project", "autosave"  # banner causes


def snapshot(project: Project) -> Project:
    """A structural copy for the saving thread: new lists, the same (immutable) audio."""
    return Project(script=project.script, voice_id=project.voice_id, voice_label=project.voice_label,
                   speaker_voices=dict(project.speaker_voices), current_take=project.current_take,
                   takes=[dataclasses.replace(t, settings=dict(t.settings), sentences=[
                       dataclasses.replace(s, versions=list(s.versions)) for s in t.sentences]) for t in project.takes])


def segmentation_of(settings: dict) -> Segmentation:
    seg = settings.get("segmentation", {})
    return Segmentation(enabled=bool(seg.get("enabled", True)), max_chars=int(seg.get("max_chars", 0)),
                        pause_ms=int(seg.get("pause_ms", 180)))


def take_settings(request: GenerateRequest) -> dict:
    return {
        # every sampling field but the seed (the take's base seed), so a regenerated sentence is
        # sampled exactly as the take was
        "sampling": {k: v for k, v in dataclasses.asdict(request.sampling).items() if k != "seed"},
        "segmentation": {"enabled": request.segmentation, "max_chars": request.segment_max_chars,
                         "pause_ms": request.pause_ms},
        "postprocess": {"trim_silence": request.trim_silence, "normalize": request.normalize,
                        "dynamic_normalize": request.dynamic_normalize},
        "voice_kind": "reference" if request.reference_audio is not None else
                      ("voice" if request.voice_id else "none"),
        "reference_text": request.reference_text,
        # a dialogue: each speaker's saved voice (app/dialogue.py)
        "speaker_voices": [[int(n), str(v)] for n, v in request.speaker_voices],
    }


def params_summary(settings: dict) -> str:
    s = settings.get("sampling", {})
    return (f"temp {s.get('temperature', 0):g} · top-p {s.get('top_p', 0):g} · top-k {s.get('top_k', 0)} · "
            f"max {s.get('max_new_tokens', 0)} frames")


def segment_audio(result, seg) -> np.ndarray:
    """A segment's own audio: the pipeline's, or (a server's result) its slice of the take."""
    if getattr(seg, "audio", None) is not None:
        return np.asarray(seg.audio, np.float32)
    return np.asarray(result.audio[seg.start_sample:seg.end_sample], np.float32)


SAMPLING_FIELDS = {f.name for f in dataclasses.fields(GenerationParams)} - {"seed"}


def new_seed() -> int:
    return random.SystemRandom().randrange(2**63)


class TakesController(QObject):
    saved = Signal(str)  # a project file written (path)
    save_failed = Signal(str)  # one sentence
    # from the saving thread to the UI thread (queued): what happened, and its message or path
    _io_done = Signal(str, str)

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.project = Project()
        self.autosave_folder = paths.autosave_dir()
        self._references: dict[str, tuple[np.ndarray, str]] = {}  # take id -> unsaved clip (this session)
        self._known_audio: set[str] = set()  # WAV names of versions this session had: the only ones it removes
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
        self._preview_timer.timeout.connect(self.show_script_preview)
        self._io_done.connect(self._on_io_done)
        self.compare_dialog: ABCompareDialog | None = None
        view = window.segments_view
        view.play_from.connect(self.play_from)
        view.regenerate.connect(lambda i: self.regenerate([i]))
        view.regenerate_unlocked.connect(self.regenerate_unlocked)
        view.lock_toggled.connect(self.set_locked)
        view.version_chosen.connect(self.choose_version)
        view.compare_requested.connect(self.compare_sentence)
        view.reuse_seed.connect(self.reuse_seed)
        window.output.take_shown.connect(self._on_take_shown)
        self.unsaved_changes = False  # since the project was last saved as (or opened from) a file
        history = window.output.history
        history.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        for text, slot in (("Compare with the take on screen (A/B)…", self._compare_selected),
                           ("Reuse this take's seed", self._reuse_selected_seed),
                           ("Delete take", self.delete_selected_take)):
            action = QAction(text, history)
            action.triggered.connect(slot)
            history.addAction(action)
        window.audio.position_changed.connect(self._on_position)
        window.audio.playback_stopped.connect(lambda owner: owner == "output" and view.set_spoken(None))

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
        self.window.show_notice(f"Another s2studio is open: this window's takes are saved in "
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
            kept = self.autosave_folder.with_name(f"{self.autosave_folder.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
            try:
                os.replace(self.autosave_folder, kept)
                where = f" It was kept as {kept}."
            except OSError:
                where = ""
                self.autosave_folder = self.autosave_folder.with_name(f"{self.autosave_folder.name}-new")
            self.window.show_problem(f"The autosaved project could not be read ({err.problem}) A new project "
                                     f"was started.{where}", AUTOSAVE)
            return
        if project is not None:
            self._adopt(project)

    def _adopt(self, project: Project) -> None:
        self.project = project
        self._known_audio |= {f"{v.id}.wav" for v in versions_of(project)}
        output = self.window.output
        self.window.segments_view.show_take(None)
        output.clear_takes()
        for take in project.takes:
            output.add_take(self.output_take(take))
        if project.script:
            self.window.editor.set_text(project.script)
        if project.voice_id:  # the voice the last take used, if the library still has it
            self.window.voice_panel.select_voice(project.voice_id)
        current = project.take(project.current_take) or (project.takes[-1] if project.takes else None)
        if current is not None:
            output.select_take(current.id)
        else:
            self.show_script_preview()

    def output_take(self, take: ProjectTake) -> Take:
        return Take(text=take.text, voice=take.voice_label, seed=take.base_seed, params=params_summary(take.settings),
                    audio=take.assemble(), sample_rate=take.sample_rate,
                    stopped=take.stopped or any(s.current is None for s in take.sentences), stats=take.stats,
                    segments=tuple(span for span in take.spans() if span[1] > span[0]),  # Export sentences…
                    created=take.created, key=take.id)

    def changed(self, take: ProjectTake | None = None) -> None:
        """Something in the project changed: refresh what shows it, save soon."""
        if take is not None:
            self.window.output.replace_take(self.output_take(take))
            if self.window.segments_view.take is take:
                self.window.segments_view.show_take(take)
        self.unsaved_changes = True
        self._timer.start()

    def script_changed(self, text: str) -> None:
        self.project.script = text
        view = self.window.segments_view
        if view.take is None:
            self._preview_timer.start()
        else:
            view.set_script_differs(text.strip() != view.take.text.strip())
        self._timer.start()

    def show_script_preview(self) -> None:
        self._preview_timer.stop()
        s = self.window.settings
        seg = Segmentation(enabled=s.segmentation_enabled, max_chars=s.segment_max_chars, pause_ms=s.pause_ms)
        text = self.window.editor.text().strip()
        try:
            texts = [x.text for x in split_request_text(text, seg)] if text else []
        except Exception:  # noqa: BLE001 - a preview must never break typing; the take reports it
            texts = []
        self.window.segments_view.show_preview(texts)

    # ---- saving -------------------------------------------------------------------------------
    def autosave_now(self) -> Future | None:
        self._timer.stop()
        self._claim_or_warn()
        copy, folder = snapshot(self.project), self.autosave_folder
        self._known_audio |= {f"{v.id}.wav" for v in versions_of(copy)}
        removable = set(self._known_audio)

        def work():
            try:
                save_project_folder(copy, folder, removable)
            except OSError as err:
                log.warning("autosave to %s failed: %s", folder, err)
                self._io_done.emit(AUTOSAVE, f"The project could not be saved automatically in {folder} "
                                             f"({err.strerror or err}); save it with File ▸ Save project….")
        return self._submit(work)

    def save_to(self, path: str) -> Future | None:
        if not path.lower().endswith(PROJECT_SUFFIX):
            path += PROJECT_SUFFIX
        copy = snapshot(self.project)

        def work():
            try:
                save_project_file(copy, path)
            except (OSError, ValueError) as err:
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

    def flush(self) -> None:
        """At exit: the last changes on disk before the window goes."""
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
            self.unsaved_changes = False
            self.window.error_banner.dismiss(PROJECTS)
            self.window.statusBar().showMessage(f"Project saved as {text}", 5000)
            self.saved.emit(text)
            return
        self.window.show_problem(text, what)
        if what == PROJECTS:
            self.save_failed.emit(text)

    def open_file(self, path: str) -> bool:
        try:
            project = load_project_file(path)
        except ProjectFileError as err:
            self.window.show_problem(str(err), PROJECTS)  # the project on screen stays as it was
            return False
        self.window.error_banner.dismiss(PROJECTS)
        self._adopt(project)
        self.unsaved_changes = False
        self.autosave_now()
        return True

    # ---- takes from the worker --------------------------------------------------------------------
    def record(self, finished: FinishedTake, stats: str) -> ProjectTake:
        """A new take (complete, or stopped: the sentences not reached have no version yet)."""
        request, result = finished.request, finished.result
        settings = take_settings(request)
        # The segments the engine really used (a text too long for the model's context is split
        # further); a server's result does not list them: the same split, made here.
        if request.speaker_voices:
            # A dialogue is one take per speaker's turn, joined (app/dialogue.py): its sentences are
            # the segments it made, in order, with the sentence pause between them.
            sentences = [Sentence(seg.text, request.pause_ms) for seg in result.segments]
            if sentences:
                sentences[-1].pause_after_ms = 0
            made = list(enumerate(result.segments))
        else:
            segments = getattr(result, "all_segments", None) or split_request_text(
                request.text, segmentation_of(settings), int(result.seed))
            sentences = [Sentence(s.text, s.pause_after_ms) for s in segments]
            made = [(seg.index, seg) for seg in result.segments]
        for index, seg in made:
            audio = segment_audio(result, seg)
            if index < len(sentences) and (len(audio) or seg.stop_reason != "cancelled"):
                sentences[index].add_version(SentenceVersion(int(seg.seed), audio, result.sample_rate,
                                                             seg.stop_reason))
        take = ProjectTake(text=request.text, sentences=sentences, base_seed=int(result.seed),
                           voice_id=request.voice_id, voice_label=request.voice_label, settings=settings,
                           stopped=bool(result.cancelled), stats=stats)
        if request.reference_audio is not None:
            self._references[take.id] = (request.reference_audio, request.reference_text)
        self.project.takes.append(take)
        self.project.current_take = take.id
        self.project.voice_id, self.project.voice_label = request.voice_id, request.voice_label
        self.project.speaker_voices = {str(n): str(v) for n, v in request.speaker_voices}
        self.unsaved_changes = True
        self._timer.start()
        return take

    def sentences_made(self, finished: FinishedTake) -> None:
        """Regenerated sentences: each becomes the chosen version of its sentence (a sentence
        stopped half-way is dropped: the old version stays)."""
        take = self.project.take(finished.request.take_id)
        self.window.segments_view.set_busy(set())
        if take is None:
            return
        result = finished.result
        for seg in result.segments:
            if seg.stop_reason == "cancelled" or seg.index >= len(take.sentences):
                continue
            take.sentences[seg.index].add_version(SentenceVersion(int(seg.seed), segment_audio(result, seg),
                                                                  result.sample_rate, seg.stop_reason))
        take.stopped = take.stopped and any(s.current is None for s in take.sentences)
        self.changed(take)

    # ---- sentence actions ------------------------------------------------------------------------
    def current_take(self) -> ProjectTake | None:
        return self.window.segments_view.take

    def regenerate(self, indices: list[int], seeds: dict[int, int] | None = None) -> bool:
        """Generate these sentences of the shown take again (new seeds unless given)."""
        take = self.current_take()
        if take is None or self.window.generating or not indices:
            return False
        settings = take.settings
        if settings.get("speaker_voices"):
            self.window.show_problem("Sentences of a dialogue (speakers with voices of their own) cannot be "
                                     "regenerated one by one yet; generate the take again.", PROJECTS)
            return False
        reference = self._references.get(take.id)
        if settings.get("voice_kind") == "reference" and reference is None:
            self.window.show_problem("This take was made with an unsaved reference clip, which projects do not "
                                     "keep, so its sentences cannot be regenerated after a restart. Save the clip "
                                     "as a voice and use it for new takes.", PROJECTS)
            return False
        sampling = settings.get("sampling", {})
        seg = segmentation_of(settings)
        post = settings.get("postprocess", {})
        request = GenerateRequest(
            engine=self.window.engine_config(), text=take.text, voice_id=take.voice_id,
            reference_audio=reference[0] if reference else None, reference_text=reference[1] if reference else "",
            sampling=GenerationParams(**{k: v for k, v in sampling.items() if k in SAMPLING_FIELDS},
                                      seed=take.base_seed),
            segmentation=seg.enabled, segment_max_chars=seg.max_chars, pause_ms=seg.pause_ms,
            trim_silence=bool(post.get("trim_silence")), normalize=bool(post.get("normalize")),
            dynamic_normalize=bool(post.get("dynamic_normalize")), voice_label=take.voice_label,
            only_segments=tuple(sorted(indices)),
            segment_seeds={i: (seeds or {}).get(i, new_seed()) for i in indices}, take_id=take.id)
        self.window.segments_view.set_busy(set(indices))
        self.window.start_job(request, live=False)
        return True

    def regenerate_unlocked(self) -> None:
        take = self.current_take()
        if take is not None:
            self.regenerate([i for i, s in enumerate(take.sentences) if not s.locked])

    def set_locked(self, index: int, locked: bool) -> None:
        take = self.current_take()
        if take is not None and index < len(take.sentences):
            take.sentences[index].locked = locked
            self.window.segments_view.show_take(take)
            self.unsaved_changes = True
            self._timer.start()

    def choose_version(self, index: int, version: int) -> None:
        take = self.current_take()
        if take is not None and 0 <= version < len(take.sentences[index].versions):
            take.sentences[index].chosen = version
            self.changed(take)

    def play_from(self, index: int) -> None:
        take = self.current_take()
        if take is None or take.sentences[index].current is None:
            return
        output = self.window.output
        if output.current is None or output.current.key != take.id:
            output.select_take(take.id)
        output.audio.stop() if output.audio.playing_owner == "output" else None
        output.seek(take.spans()[index][0])
        self.window.segments_view.set_spoken(index)
        output.toggle_play()

    def reuse_seed(self) -> None:
        take = self.current_take()
        if take is None:
            return
        s = self.window.settings.copy()
        s.seed, s.seed_locked = int(take.base_seed), True
        self.window.apply_settings(s)
        self.window.statusBar().showMessage(f"The next takes use seed {take.base_seed} (Settings ▸ seed, locked).",
                                            8000)

    def _selected_output_take(self) -> Take | None:
        row = self.window.output.history.currentRow()
        takes = self.window.output.takes
        return takes[row] if 0 <= row < len(takes) else None

    def delete_selected_take(self) -> None:
        take = self._selected_output_take()
        if take is None or not self.confirm_delete_take(take):
            return
        if take.key:
            self.project.takes = [t for t in self.project.takes if t.id != take.key]
            if self.window.segments_view.take is not None and self.window.segments_view.take.id == take.key:
                self.window.segments_view.show_take(None)
                self.show_script_preview()
        self.window.output.remove_take(take.key) if take.key else None
        self.unsaved_changes = True
        self._timer.start()

    def _reuse_selected_seed(self) -> None:
        take = self._selected_output_take()
        if take is not None and take.key:
            self.window.output.select_take(take.key)
            self.reuse_seed()

    def _compare_selected(self) -> None:
        selected = self._selected_output_take()
        takes = self.window.output.takes
        current = self.window.output.current
        if selected is None or current is None or selected is current or len(takes) < 2:
            self.compare_takes()
            return
        candidates = [Candidate(t.summary(), t.audio, t.sample_rate) for t in takes]
        dialog = ABCompareDialog("Compare takes", candidates, takes.index(selected), takes.index(current),
                                 self.window.audio, self.window)
        dialog.picked.connect(lambda i: self.window.output.select_take(takes[i].key))
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
                                 self.window.audio, self.window)
        dialog.picked.connect(lambda v: self.choose_version(index, v))
        return self._open(dialog)

    def compare_takes(self) -> ABCompareDialog | None:
        """The take on screen (B) against the one before it in the history (A); keep one: it is shown."""
        takes = self.window.output.takes
        if len(takes) < 2:
            self.window.statusBar().showMessage("Make at least two takes to compare them.", 5000)
            return None
        current = self.window.output.current
        b = takes.index(current) if current in takes else len(takes) - 1
        a = b - 1 if b > 0 else len(takes) - 1
        candidates = [Candidate(t.summary(), t.audio, t.sample_rate) for t in takes]
        dialog = ABCompareDialog("Compare takes", candidates, a, b, self.window.audio, self.window)
        dialog.picked.connect(lambda i: self.window.output.select_take(takes[i].key) if takes[i].key
                              else self.window.output.show_take(takes[i]))
        return self._open(dialog)

    def _open(self, dialog: ABCompareDialog) -> ABCompareDialog:
        if self.compare_dialog is not None:
            self.compare_dialog.close()
        self.compare_dialog = dialog
        dialog.open()
        return dialog

    # ---- following the output ----------------------------------------------------------------------
    def _on_take_shown(self, take: Take) -> None:
        project_take = self.project.take(take.key) if take.key else None
        if project_take is not None:
            self.project.current_take = project_take.id
            view = self.window.segments_view
            view.script_differs = self.window.editor.text().strip() != project_take.text.strip()
            view.show_take(project_take)

    def _on_position(self, owner: str, sample: int) -> None:
        view = self.window.segments_view
        if owner == "output" and self.window.generating:  # the take being made, heard as it arrives
            starts = self.window.live_starts
            heard = [i for i, start in starts.items() if start <= sample]
            view.set_spoken(max(heard) if heard else None)
            return
        current = self.window.output.current
        if owner == "output" and view.take is not None and current is not None and current.key == view.take.id:
            view.set_spoken(view.take.sentence_at(sample))

    # ---- File ▸ Save project… / Open project… --------------------------------------------------
    def ask_project_path(self, save: bool) -> str | None:
        """A separate method so tests can answer it without a modal dialog."""
        folder = self.window.settings.last_export_dir or str(Path.home())
        if save:
            name = f"s2studio-{time.strftime('%Y%m%d-%H%M')}{PROJECT_SUFFIX}"
            path, _ = QFileDialog.getSaveFileName(self.window, "Save project", str(Path(folder) / name),
                                                  f"s2studio project (*{PROJECT_SUFFIX})")
        else:
            path, _ = QFileDialog.getOpenFileName(self.window, "Open project", folder,
                                                  f"s2studio project (*{PROJECT_SUFFIX});;All files (*)")
        return path or None

    def ask_keep_current_project(self) -> str:
        """Before another project replaces this one: "save", "discard" or "cancel" (tests answer it)."""
        box = QMessageBox(QMessageBox.Icon.Question, "Open project",
                          "Opening a project replaces the takes on screen. Save them as a project first?",
                          QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard
                          | QMessageBox.StandardButton.Cancel, self.window)
        answer = QMessageBox.StandardButton(box.exec())
        return {QMessageBox.StandardButton.Save: "save", QMessageBox.StandardButton.Discard: "discard"}.get(
            answer, "cancel")

    def confirm_delete_take(self, take: Take) -> bool:
        """Deleting a take from the history (and the project) asks first (tests answer it)."""
        answer = QMessageBox.question(self.window, "Delete take", f"Delete the take “{take.summary()}” and all "
                                      "its sentence versions?", QMessageBox.StandardButton.Yes
                                      | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def save_project(self) -> bool:
        """Ask where, then save in the background (``saved`` or a banner). False: no path chosen."""
        path = self.ask_project_path(save=True)
        if path:
            self.save_to(path)
            self.window.statusBar().showMessage(f"Saving the project to {path}…", 5000)
        return bool(path)

    def open_project(self) -> None:
        if self.window.generating:
            self.window.show_notice("Stop the take being generated before opening another project.")
            return
        if self.unsaved_changes and self.project.takes:
            answer = self.ask_keep_current_project()
            # "save": the project is copied at once, so opening another cannot change what is saved
            if answer == "cancel" or (answer == "save" and not self.save_project()):
                return
        path = self.ask_project_path(save=False)
        if path and self.open_file(path):
            self.window.statusBar().showMessage(f"Opened {path}", 5000)
