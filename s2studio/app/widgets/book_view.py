"""The Book view: a manuscript's chapters and sentences, its cast and pronunciations, rendered in
the background and exported as an audiobook.

Drawing and user input only; every change goes to ``BookController`` (app/book_controller.py),
which saves it and runs the render. Tables are refreshed from the project at most a few times a
second while a render runs (a sentence finishing is a signal, not a repaint each).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from s2studio.app import book_controller as bc
from s2studio.app.widgets.error_banner import Banner
from s2studio.book import SentenceRef

REFRESH_MS = 400
MODEL_VOICE = "Model's own voice"
NARRATOR_VOICE = "The narrator's voice"
STATUS_TEXT = {"rendered": "✓ rendered", "failed": "✗ failed", "missing": "…"}
STATE_TEXT = {bc.IDLE: "Not rendering", bc.RENDERING: "Rendering", bc.PAUSING: "Pausing after the sentences in flight…",
              bc.PAUSED: "Paused", bc.WAITING: "Waiting: a studio take goes first", bc.DONE: "Every sentence is rendered"}
LOUDNESS = (("acx", "ACX audiobook (RMS −23…−18 dB, peaks ≤ −3 dBFS)"), ("podcast", "Podcast (−16 LUFS)"),
            ("ebu-r128", "EBU R128 (−23 LUFS)"))
CHAPTER_FORMATS = ("mp3", "flac", "wav")
BOOK_FORMATS = (("m4b", "M4B audiobook with chapters"), ("mp3", "MP3 with chapters"), ("none", "No book file"))


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class BookView(QWidget):
    back_requested = Signal()
    import_requested = Signal()  # the window asks for a file (one dialog for menu and button)

    def __init__(self, controller: bc.BookController, library, audio, parent=None):
        super().__init__(parent)
        self.controller, self.library, self.audio = controller, library, audio
        self._choices: list[tuple[str, str | None]] | None = None  # _voice_choices, until reload_voices
        self._filling = False  # tables being refilled: their change signals are not edits
        self._chapter = -1  # the chapter shown in the sentence table
        self._refs: list[SentenceRef] = []  # the sentence table's rows
        self._refresh = QTimer(self)
        self._refresh.setSingleShot(True)
        self._refresh.setInterval(REFRESH_MS)
        self._refresh.timeout.connect(self.refresh)

        layout = QVBoxLayout(self)
        self.error_banner = Banner("error")
        self.notice_banner = Banner("notice")
        layout.addWidget(self.error_banner)
        layout.addWidget(self.notice_banner)

        top = QHBoxLayout()
        self.import_button = QPushButton("Import book…")
        self.import_button.setToolTip("A .txt, .md or .epub file (or drag one onto the window)")
        self.import_button.clicked.connect(self.import_requested)
        self.open_button = QPushButton("Open book folder…")
        self.open_button.clicked.connect(self._choose_folder)
        self.title = QLabel("No book open. Import a manuscript (.txt, .md, .epub) or drag one onto the window.")
        self.title.setMinimumWidth(1)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.back_button = QPushButton("Back to the studio")
        self.back_button.clicked.connect(self.back_requested)
        for w in (self.import_button, self.open_button):
            top.addWidget(w)
        top.addWidget(self.title, 1)
        top.addWidget(self.back_button)
        layout.addLayout(top)

        controls = QHBoxLayout()
        controls.addWidget(QLabel("Narrator:"))
        self.narrator = QComboBox()
        self.narrator.setToolTip("The voice of every sentence that no character or chapter voice claims")
        self.narrator.activated.connect(lambda _i: self.controller.set_narrator(self.narrator.currentData()))
        controls.addWidget(self.narrator)
        controls.addWidget(QLabel("Sentences at once:"))
        self.parallel = QSpinBox()
        self.parallel.setRange(0, 8)
        self.parallel.setSpecialValueText("auto")
        self.parallel.setToolTip("How many sentences are rendered together (one pass over the model for all); "
                                 "auto: 4 on a CPU, 8 on a GPU")
        controls.addWidget(self.parallel)
        self.render_button = QPushButton("Render")
        self.render_button.clicked.connect(self._render_or_pause)
        controls.addWidget(self.render_button)
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        controls.addWidget(self.progress, 1)
        self.state_label = QLabel(STATE_TEXT[bc.IDLE])
        self.state_label.setMinimumWidth(1)
        controls.addWidget(self.state_label, 1)
        layout.addLayout(controls)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.chapters = QTableWidget(0, 3)
        self.chapters.setHorizontalHeaderLabels(["Chapter", "Sentences", "Status"])
        self.chapters.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.chapters.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.chapters.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.chapters.verticalHeader().setVisible(False)
        self.chapters.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.chapters.setTabKeyNavigation(False)
        self.chapters.itemSelectionChanged.connect(self._chapter_selected)
        self.chapters.itemChanged.connect(self._chapter_ticked)
        splitter.addWidget(self.chapters)

        self.tabs = QTabWidget()
        self.tabs.addTab(self._build_sentences(), "Sentences")
        self.tabs.addTab(self._build_cast(), "Cast")
        self.tabs.addTab(self._build_dictionary(), "Pronunciation")
        self.tabs.addTab(self._build_sampling(), "Sampling")
        splitter.addWidget(self.tabs)
        splitter.setSizes([330, 800])
        splitter.setChildrenCollapsible(False)
        layout.addWidget(splitter, 1)

        export = QHBoxLayout()
        export.addWidget(QLabel("Chapter files:"))
        self.chapter_format = QComboBox()
        for fmt in CHAPTER_FORMATS:
            self.chapter_format.addItem(fmt.upper(), fmt)
        export.addWidget(self.chapter_format)
        export.addWidget(QLabel("Book file:"))
        self.book_format = QComboBox()
        for key, text in BOOK_FORMATS:
            self.book_format.addItem(text, key)
        export.addWidget(self.book_format)
        export.addWidget(QLabel("Loudness:"))
        self.loudness = QComboBox()
        for key, text in LOUDNESS:
            self.loudness.addItem(text, key)
        export.addWidget(self.loudness)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("Master every fully rendered chapter and write the chapter files, the book file "
                                      "and a loudness report")
        self.export_button.clicked.connect(self._choose_export_folder)
        export.addWidget(self.export_button)
        export.addStretch(1)
        layout.addLayout(export)

        controller.opened.connect(self._on_opened)
        controller.changed.connect(self.schedule_refresh)
        controller.state_changed.connect(self._on_state)
        controller.progressed.connect(self._on_progress)
        controller.problem.connect(self.error_banner.show_message)
        controller.notice.connect(self.notice_banner.show_message)
        controller.exported.connect(self._on_exported)
        controller.export_progress.connect(lambda out: self.state_label.setText(f"Exported “{out.title}”…"))
        self.reload_voices()
        self._enable()

    # ---- building ------------------------------------------------------------------------------
    def _build_sentences(self) -> QWidget:
        page = QWidget()
        v = QVBoxLayout(page)
        voice_row = QHBoxLayout()
        voice_row.addWidget(QLabel("Chapter voice:"))
        self.chapter_voice = QComboBox()
        self.chapter_voice.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.chapter_voice.setMinimumContentsLength(18)
        self.chapter_voice.setToolTip("The voice of this chapter's sentences that no character or sentence voice "
                                      "claims (the narrator's unless you choose another)")
        self.chapter_voice.activated.connect(self._chapter_voice_chosen)
        voice_row.addWidget(self.chapter_voice)
        voice_row.addStretch(1)
        v.addLayout(voice_row)
        self.sentences = QTableWidget(0, 3)
        self.sentences.setHorizontalHeaderLabels(["Sentence (double-click to edit)", "Voice", "Status"])
        self.sentences.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.sentences.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.sentences.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked
                                       | QAbstractItemView.EditTrigger.EditKeyPressed)
        self.sentences.setWordWrap(True)
        self.sentences.setTabKeyNavigation(False)
        self.sentences.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.sentences.itemChanged.connect(self._sentence_edited)
        self.sentences.itemSelectionChanged.connect(self._enable)
        self.sentences.doubleClicked.connect(lambda index: index.column() != 0 and self.play_from_selected())
        v.addWidget(self.sentences, 1)
        row = QHBoxLayout()
        self.play_button = QPushButton("Play from here")
        self.play_button.clicked.connect(self.play_from_selected)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.audio.stop)
        self.regenerate_button = QPushButton("Regenerate")
        self.regenerate_button.setToolTip("Another take of this sentence only (a new seed)")
        self.regenerate_button.clicked.connect(self.regenerate_selected)
        row.addWidget(self.play_button)
        row.addWidget(self.stop_button)
        row.addWidget(self.regenerate_button)
        row.addWidget(QLabel("Paragraph spoken by:"))
        self.paragraph_character = QComboBox()
        self.paragraph_character.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.paragraph_character.setMinimumContentsLength(14)
        self.paragraph_character.setToolTip("Give the selected sentence's whole paragraph to a character of the cast")
        self.paragraph_character.activated.connect(self._paragraph_character_chosen)
        row.addWidget(self.paragraph_character)
        row.addStretch(1)
        v.addLayout(row)
        return page

    def _build_cast(self) -> QWidget:
        page = QWidget()
        v = QVBoxLayout(page)
        v.addWidget(QLabel("Characters, each with a saved voice. Give a paragraph to a character on the Sentences "
                           "tab, or map a <|speaker:N|> turn to one below."))
        self.cast = QTableWidget(0, 2)
        self.cast.setHorizontalHeaderLabels(["Character", "Voice"])
        self.cast.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.cast.setColumnWidth(1, 260)
        self.cast.verticalHeader().setVisible(False)
        self.cast.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.cast.setTabKeyNavigation(False)
        v.addWidget(self.cast, 1)
        add = QHBoxLayout()
        self.character_name = QLineEdit()
        self.character_name.setPlaceholderText("Character name")
        self.character_name.returnPressed.connect(self._add_character)
        self.character_voice = QComboBox()
        self.add_character_button = QPushButton("Add character")
        self.add_character_button.clicked.connect(self._add_character)
        self.remove_character_button = QPushButton("Remove")
        self.remove_character_button.clicked.connect(self._remove_character)
        for w in (self.character_name, self.character_voice, self.add_character_button, self.remove_character_button):
            add.addWidget(w)
        v.addLayout(add)
        self.speakers = QTableWidget(0, 2)
        self.speakers.setHorizontalHeaderLabels(["Speaker tag", "Spoken by"])
        self.speakers.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.speakers.setColumnWidth(0, 160)
        self.speakers.verticalHeader().setVisible(False)
        self.speakers.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.speakers.setTabKeyNavigation(False)
        v.addWidget(self.speakers, 1)
        return page

    def _build_dictionary(self) -> QWidget:
        page = QWidget()
        v = QVBoxLayout(page)
        v.addWidget(QLabel("How to say a word or phrase: applied to what the model reads, never to the text shown. "
                           "Whole words only; case is ignored unless ticked."))
        self.dictionary = QTableWidget(0, 3)
        self.dictionary.setHorizontalHeaderLabels(["Word or phrase", "Say it as", "Match case"])
        self.dictionary.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.dictionary.verticalHeader().setVisible(False)
        self.dictionary.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.dictionary.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.dictionary.setTabKeyNavigation(False)
        v.addWidget(self.dictionary, 1)
        add = QHBoxLayout()
        self.phrase = QLineEdit()
        self.phrase.setPlaceholderText("Word or phrase (e.g. Nguyen)")
        self.say = QLineEdit()
        self.say.setPlaceholderText("Say it as (e.g. Win)")
        self.say.returnPressed.connect(self._add_pronunciation)
        self.match_case = QCheckBox("Match case")
        self.add_phrase_button = QPushButton("Add")
        self.add_phrase_button.clicked.connect(self._add_pronunciation)
        self.remove_phrase_button = QPushButton("Remove")
        self.remove_phrase_button.clicked.connect(self._remove_pronunciation)
        for w in (self.phrase, self.say, self.match_case, self.add_phrase_button, self.remove_phrase_button):
            add.addWidget(w)
        v.addLayout(add)
        return page

    def _build_sampling(self) -> QWidget:
        page = QWidget()
        v = QVBoxLayout(page)
        note = QLabel("The book's own sampling settings, saved with the book (the studio's settings do not change "
                      "them). Every sentence's audio depends on them: changing them renders the whole book again.")
        note.setWordWrap(True)
        v.addWidget(note)
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        low, high = bc.SAMPLING_RANGES["temperature"]
        self.temperature = QDoubleSpinBox(decimals=2, minimum=low, maximum=high, singleStep=0.05)
        self.temperature.setToolTip(f"{low:g} to {high:g}; 0 = always the likeliest sound")
        low, high = bc.SAMPLING_RANGES["top_p"]
        self.top_p = QDoubleSpinBox(decimals=2, minimum=low, maximum=high, singleStep=0.05)
        self.top_p.setToolTip(f"{low:g} to {high:g}; 1 = no cut")
        low, high = bc.SAMPLING_RANGES["top_k"]
        self.top_k = QSpinBox(minimum=low, maximum=high)
        self.top_k.setToolTip(f"{low} to {high}; 0 = no cut")
        low, high = bc.SAMPLING_RANGES["max_new_tokens"]
        self.max_frames = QSpinBox(minimum=low, maximum=high)
        self.max_frames.setSuffix(" frames")
        self.max_frames.setToolTip(f"{low} to {high}; 21.5 frames = 1 s of audio. A sentence that reaches it is cut "
                                   "off there")
        self._sampling_boxes = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                                "max_new_tokens": self.max_frames}
        for name, box in self._sampling_boxes.items():
            box.setMinimumWidth(140)
            form.addRow(bc.SAMPLING_LABELS[name] + ":", box)
        v.addLayout(form)
        row = QHBoxLayout()
        self.apply_sampling_button = QPushButton("Apply…")
        self.apply_sampling_button.setToolTip("Save these settings with the book; every sentence renders again")
        self.apply_sampling_button.clicked.connect(self.apply_sampling)
        self.revert_sampling_button = QPushButton("Revert")
        self.revert_sampling_button.setToolTip("Show the book's saved settings again")
        self.revert_sampling_button.clicked.connect(self._fill_sampling)
        row.addWidget(self.apply_sampling_button)
        row.addWidget(self.revert_sampling_button)
        row.addStretch(1)
        v.addLayout(row)
        self.sampling_note = QLabel("")
        self.sampling_note.setWordWrap(True)
        v.addWidget(self.sampling_note)
        v.addStretch(1)
        self._sampling_shown = None  # the book's settings the boxes were filled from
        return page

    # ---- voices --------------------------------------------------------------------------------
    def _voice_choices(self) -> list[tuple[str, str | None]]:
        """(name, id) of every usable saved voice, the model's own first. Read from the voice
        folder once per ``reload_voices`` (the window calls it when the library changes and when
        the Book view is shown), not per call: the sentence table names a voice per row, and a
        refresh every 400 ms during a render would otherwise list the folder once per row."""
        if self._choices is None:
            out: list[tuple[str, str | None]] = [(MODEL_VOICE, None)]
            try:
                out += [(v.name or v.id, v.id) for v in self.library.list() if not getattr(v, "problem", None)]
            except OSError:
                pass
            self._choices = out
        return self._choices

    def _voice_name(self, voice_id: str | None) -> str:
        for name, vid in self._voice_choices():
            if vid == voice_id:
                return name
        return f"{voice_id} (not in the voice library)" if voice_id else MODEL_VOICE

    def reload_voices(self) -> None:
        self._choices = None  # list the folder again
        self._fill_chapter_voice()
        for combo in (self.narrator, self.character_voice):
            current = combo.currentData()
            combo.clear()
            for name, vid in self._voice_choices():
                combo.addItem(name, vid)
            index = combo.findData(current)
            combo.setCurrentIndex(max(index, 0))
        self.schedule_refresh()

    # ---- reacting --------------------------------------------------------------------------------
    def _on_opened(self, project) -> None:
        self._chapter = -1
        self._sampling_shown = None
        self.error_banner.hide()
        self.refresh()
        first = next((i for i, c in enumerate(project.manuscript.chapters) if c.included), 0)
        if self.chapters.rowCount():
            self.chapters.selectRow(first)

    def schedule_refresh(self) -> None:
        if not self._refresh.isActive():
            self._refresh.start()

    def refresh(self) -> None:
        """Everything from the project (titles, statuses, cast, dictionary)."""
        project = self.controller.project
        self._enable()
        if project is None:
            return
        m = project.manuscript
        title = m.title + (f" — {m.author}" if m.author else "")
        self.title.setText(title)
        self.title.setToolTip(f"{title}\n{project.folder}")
        index = self.narrator.findData(m.voice)
        if index < 0 and m.voice:
            self.narrator.addItem(self._voice_name(m.voice), m.voice)
            index = self.narrator.count() - 1
        self.narrator.setCurrentIndex(max(index, 0))
        self._fill_chapters()
        self._fill_sentences()
        self._fill_cast()
        self._fill_dictionary()
        if m.generation != self._sampling_shown:  # not while a render refreshes: the user may be typing
            self._fill_sampling()

    def _fill_chapters(self) -> None:
        m = self.controller.project.manuscript
        self._filling = True
        try:
            self.chapters.setRowCount(len(m.chapters))
            done_all = total_all = 0
            for i, chapter in enumerate(m.chapters):
                done, total = self.controller.chapter_progress(i)
                if chapter.included:
                    done_all, total_all = done_all + done, total_all + total
                name = QTableWidgetItem(f"{i + 1}. {chapter.title}")
                name.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsUserCheckable)
                name.setCheckState(Qt.CheckState.Checked if chapter.included else Qt.CheckState.Unchecked)
                name.setToolTip(chapter.title + (f"\nLeft out: {chapter.skip_reason}" if chapter.skip_reason else ""))
                self.chapters.setItem(i, 0, name)
                self.chapters.setItem(i, 1, QTableWidgetItem(f"{done}/{total}"))
                status = ("left out" if not chapter.included else "done" if done == total
                          else "not started" if done == 0 else f"{100 * done // max(total, 1)} %")
                self.chapters.setItem(i, 2, QTableWidgetItem(status))
            self.progress.setRange(0, max(total_all, 1))
            self.progress.setValue(done_all)
            self.progress.setFormat(f"{done_all}/{total_all} sentences (%p%)")
        finally:
            self._filling = False

    def _fill_sentences(self) -> None:
        project = self.controller.project
        m = project.manuscript
        c = self._chapter
        if not 0 <= c < len(m.chapters):
            self.sentences.setRowCount(0)
            self._refs = []
            self._fill_chapter_voice()
            return
        selected = self.selected_ref()
        refs = [SentenceRef(c, p, s) for p, s, _ in m.chapters[c].sentences()]
        self._filling = True
        try:
            self.sentences.setRowCount(len(refs))
            for row, ref in enumerate(refs):
                sentence = m.sentence(ref)
                text = QTableWidgetItem(sentence.text)
                text.setToolTip(f"Paragraph {ref.paragraph + 1}, sentence {ref.sentence + 1}"
                                + (f"\nThe model reads: {m.dictionary.apply(sentence.text)}"
                                   if m.dictionary.apply(sentence.text) != sentence.text else ""))
                self.sentences.setItem(row, 0, text)
                who = self._voice_name(m.voice_for(ref))
                paragraph = m.chapters[c].paragraphs[ref.paragraph]
                if sentence.speaker is not None and sentence.speaker in m.cast.speakers:
                    who = f"{m.cast.speakers[sentence.speaker]} ({who})"
                elif paragraph.character:
                    who = f"{paragraph.character} ({who})"
                voice = QTableWidgetItem(who)
                voice.setFlags(voice.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.sentences.setItem(row, 1, voice)
                state = self.controller.status_of(ref)
                status = QTableWidgetItem(STATUS_TEXT[state])
                status.setFlags(status.flags() & ~Qt.ItemFlag.ItemIsEditable)
                if state == "failed":
                    status.setToolTip(self.controller.failure_of(ref) or "")
                self.sentences.setItem(row, 2, status)
            self._refs = refs
            if selected in refs:
                self.sentences.selectRow(refs.index(selected))
        finally:
            self._filling = False
        self._fill_paragraph_characters()
        self._fill_chapter_voice()
        self._enable()

    def _fill_chapter_voice(self) -> None:
        """The shown chapter's own voice: the narrator's (None) or a saved voice."""
        project = self.controller.project
        narrator = self._voice_name(project.manuscript.voice) if project is not None else MODEL_VOICE
        items = [(f"{NARRATOR_VOICE} ({narrator})", None)]
        items += [(name, vid) for name, vid in self._voice_choices() if vid is not None]
        chapters = project.manuscript.chapters if project is not None else []
        voice = chapters[self._chapter].voice if 0 <= self._chapter < len(chapters) else None
        if voice and voice not in [vid for _name, vid in items]:
            items.append((self._voice_name(voice), voice))
        combo = self.chapter_voice
        shown = [(combo.itemText(i), combo.itemData(i)) for i in range(combo.count())]
        if items != shown:  # refilled only when it changed: a render's refreshes leave an open list alone
            self.chapter_voice.clear()
            for name, vid in items:
                self.chapter_voice.addItem(name, vid)
        self.chapter_voice.setCurrentIndex(max(self.chapter_voice.findData(voice), 0))
        self.chapter_voice.setEnabled(0 <= self._chapter < len(chapters))

    def _fill_sampling(self) -> None:
        project = self.controller.project
        if project is None:
            return
        g = project.manuscript.generation
        for name, box in self._sampling_boxes.items():
            value = getattr(g, name)
            low, high = bc.SAMPLING_RANGES[name]
            # A value set beyond the studio's range (by `s2studio render`) is shown as it is.
            box.setRange(min(low, value), max(high, value))
            box.setValue(value)
        self._sampling_shown = g
        self.sampling_note.setText(f"The book's seed (each sentence's own seed comes from it): {g.seed}"
                                   if g.seed is not None else "")

    def _fill_cast(self) -> None:
        m = self.controller.project.manuscript
        cast = m.cast
        self.cast.setRowCount(len(cast.characters))
        for row, (name, voice) in enumerate(sorted(cast.characters.items())):
            self.cast.setItem(row, 0, QTableWidgetItem(name))
            combo = QComboBox()
            for text, vid in self._voice_choices():
                combo.addItem(text, vid)
            if combo.findData(voice) < 0:
                combo.addItem(self._voice_name(voice), voice)
            combo.setCurrentIndex(combo.findData(voice))
            combo.activated.connect(lambda _i, n=name, c=combo: self.controller.set_character(n, c.currentData()))
            self.cast.setCellWidget(row, 1, combo)
        speakers = sorted({s.speaker for ch in m.chapters for p in ch.paragraphs for s in p.sentences
                           if s.speaker is not None} | set(cast.speakers))
        self.speakers.setRowCount(len(speakers))
        for row, speaker in enumerate(speakers):
            self.speakers.setItem(row, 0, QTableWidgetItem(f"<|speaker:{speaker}|>"))
            combo = QComboBox()
            combo.addItem("The narrator", None)
            for name in sorted(cast.characters):
                combo.addItem(name, name)
            combo.setCurrentIndex(max(combo.findData(cast.speakers.get(speaker)), 0))
            combo.activated.connect(lambda _i, s=speaker, c=combo: self.controller.assign_speaker(s, c.currentData()))
            self.speakers.setCellWidget(row, 1, combo)

    def _fill_dictionary(self) -> None:
        entries = self.controller.project.manuscript.dictionary.entries
        self.dictionary.setRowCount(len(entries))
        for row, e in enumerate(entries):
            self.dictionary.setItem(row, 0, QTableWidgetItem(e.phrase))
            self.dictionary.setItem(row, 1, QTableWidgetItem(e.say))
            self.dictionary.setItem(row, 2, QTableWidgetItem("yes" if e.match_case else ""))

    def _fill_paragraph_characters(self) -> None:
        project = self.controller.project
        self.paragraph_character.clear()
        self.paragraph_character.addItem("The narrator", None)
        if project is None:
            return
        for name in sorted(project.manuscript.cast.characters):
            self.paragraph_character.addItem(name, name)
        ref = self.selected_ref()
        if ref is not None:
            character = project.manuscript.chapters[ref.chapter].paragraphs[ref.paragraph].character
            self.paragraph_character.setCurrentIndex(max(self.paragraph_character.findData(character), 0))

    def _enable(self) -> None:
        has_book = self.controller.project is not None
        has_sentence = self.selected_ref() is not None
        state = self.controller.state
        for w in (self.narrator, self.parallel, self.chapters, self.tabs, self.export_button, self.render_button):
            w.setEnabled(has_book)
        self.parallel.setEnabled(has_book and not self.controller.rendering)
        self.export_button.setEnabled(has_book and not self.controller.exporting)
        for w in (self.play_button, self.regenerate_button, self.paragraph_character):
            w.setEnabled(has_sentence)
        self.apply_sampling_button.setEnabled(has_book and not self.controller.rendering)
        self.apply_sampling_button.setToolTip("Save these settings with the book; every sentence renders again"
                                              if not self.controller.rendering else
                                              "Pause the render to change the book's sampling settings")
        if not self.audio.status.can_play:
            self.play_button.setEnabled(False)
            self.play_button.setToolTip(f"Playback is off: {self.audio.status.reason}")
        rendering_now = state in (bc.RENDERING, bc.WAITING)
        self.render_button.setText("Pause" if rendering_now else "Resume" if state == bc.PAUSED else "Render")
        if state == bc.PAUSING:
            self.render_button.setEnabled(False)

    # ---- user actions --------------------------------------------------------------------------
    def selected_ref(self) -> SentenceRef | None:
        rows = self.sentences.selectionModel().selectedRows() if self.sentences.selectionModel() else []
        if not rows or rows[0].row() >= len(self._refs):
            return None
        return self._refs[rows[0].row()]

    def select_chapter(self, chapter: int) -> None:
        self.chapters.selectRow(chapter)

    def _chapter_selected(self) -> None:
        rows = self.chapters.selectionModel().selectedRows()
        chapter = rows[0].row() if rows else -1
        if chapter != self._chapter:
            self._chapter = chapter
            self._fill_sentences()

    def _chapter_ticked(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != 0:
            return
        self.controller.set_included(item.row(), item.checkState() == Qt.CheckState.Checked)

    def _sentence_edited(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != 0 or item.row() >= len(self._refs):
            return
        ref = self._refs[item.row()]
        if item.text().strip() == self.controller.project.manuscript.sentence(ref).text:
            return
        if not self.controller.edit_sentence(ref, item.text()):
            self.schedule_refresh()  # the old text comes back

    def _render_or_pause(self) -> None:
        if self.controller.state in (bc.RENDERING, bc.WAITING):
            self.controller.pause()
        else:
            self.error_banner.hide()
            self.controller.render(priority=self._chapter if self._chapter >= 0 else None)
        self._enable()

    def play_from_selected(self) -> bool:
        """Listen from the selected sentence to the end of what is rendered of its chapter; that
        chapter's missing sentences are rendered first from now on."""
        ref = self.selected_ref()
        if ref is None:
            return False
        self.controller.prioritise(ref.chapter)
        try:
            found = self.controller.audio_from(ref)
        except Exception as exc:  # noqa: BLE001 - a damaged sentence file: a banner, never a traceback
            self.error_banner.show_message(str(exc))
            return False
        if found is None:
            self.notice_banner.show_message("This sentence is not rendered yet; its chapter is rendered next.")
            return False
        samples, rate, _starts = found
        if not self.audio.status.can_play:
            self.notice_banner.show_message(f"Playback is off: {self.audio.status.reason}")
            return False
        return self.audio.play_clip("book", samples, rate)

    def regenerate_selected(self) -> None:
        ref = self.selected_ref()
        if ref is not None:
            self.controller.regenerate(ref)

    def _paragraph_character_chosen(self, _index: int) -> None:
        ref = self.selected_ref()
        if ref is not None:
            self.controller.set_paragraph_character(ref, self.paragraph_character.currentData())

    def _chapter_voice_chosen(self, _index: int) -> None:
        if 0 <= self._chapter:
            self.controller.set_chapter_voice(self._chapter, self.chapter_voice.currentData())

    def sampling_changes(self) -> dict:
        """The settings in the boxes that differ from the book's (to the boxes' precision)."""
        g = self.controller.project.manuscript.generation
        out = {}
        for name, box in self._sampling_boxes.items():
            value, current = box.value(), getattr(g, name)
            if isinstance(box, QDoubleSpinBox):
                if abs(value - current) > 0.5 * 10 ** -box.decimals():
                    out[name] = round(value, box.decimals())
            elif value != current:
                out[name] = value
        return out

    def ask_confirmation(self, title: str, text: str) -> bool:
        """A separate method so a test can answer it without a modal dialog."""
        buttons = QMessageBox.StandardButton
        answer = QMessageBox.question(self, title, text, buttons.Yes | buttons.Cancel, buttons.Cancel)
        return answer == QMessageBox.StandardButton.Yes

    def apply_sampling(self) -> bool:
        """The boxes' settings saved with the book, after a confirmation when rendered sentences
        would have to be rendered again."""
        if self.controller.project is None:
            return False
        changes = self.sampling_changes()
        if not changes:
            self.notice_banner.show_message("The book's sampling settings are unchanged.")
            return False
        rendered = self.controller.rendered_count()
        if rendered:
            what = ", ".join(f"{bc.SAMPLING_LABELS[k].lower()} {v:g}" for k, v in changes.items())
            if not self.ask_confirmation(
                    "Render the whole book again?",
                    f"With {what}, every sentence of the book would sound different, so all of them render again: "
                    f"the {rendered} sentence(s) rendered so far are set aside (their audio stays in the book "
                    "folder; setting the old values back finds it again).\n\nApply the new settings?"):
                return False
        if not self.controller.set_sampling(**changes):
            return False
        self.notice_banner.show_message("The book's sampling settings are saved; every sentence renders with them"
                                        + (" (Render to start)." if rendered else "."))
        return True

    def _add_character(self) -> None:
        name = self.character_name.text().strip()
        if name and self.controller.set_character(name, self.character_voice.currentData()):
            self.character_name.clear()

    def _remove_character(self) -> None:
        row = self.cast.currentRow()
        item = self.cast.item(row, 0) if row >= 0 else None
        if item is not None:
            self.controller.remove_character(item.text())

    def _add_pronunciation(self) -> None:
        if self.controller.add_pronunciation(self.phrase.text(), self.say.text(), self.match_case.isChecked()):
            self.phrase.clear()
            self.say.clear()

    def _remove_pronunciation(self) -> None:
        row = self.dictionary.currentRow()
        if row >= 0:
            e = self.controller.project.manuscript.dictionary.entries[row]
            self.controller.remove_pronunciation(e.phrase, e.match_case)

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a book project folder")
        if folder:
            self.controller.open_folder(folder)

    def ask_export_folder(self) -> str | None:
        """A separate method so a test can answer it without a modal dialog."""
        return QFileDialog.getExistingDirectory(self, "Export the audiobook to a folder") or None

    def _choose_export_folder(self) -> None:
        folder = self.ask_export_folder()
        if folder:
            self.export_to(folder)

    def export_to(self, folder: str) -> bool:
        fmt = self.book_format.currentData()
        started = self.controller.export(folder, self.chapter_format.currentData(), self.loudness.currentData(),
                                         None if fmt == "none" else fmt)
        if started:
            self.state_label.setText("Exporting…")
        self._enable()
        return started

    def _on_exported(self, outputs) -> None:
        written = [o for o in outputs if o.path]
        missing = [o for o in outputs if not o.path]
        failing = [o for o in written if o.report and not o.report.acx_pass]
        text = f"Exported {len(written)} chapter file(s)"
        if missing:
            text += f"; {len(missing)} chapter(s) not fully rendered were left out (and the book file with them)"
        if failing and self.loudness.currentData() == "acx":
            text += f"; {len(failing)} chapter(s) fail an ACX check (see report.txt)"
        self.notice_banner.show_message(text + ".")
        self.state_label.setText(STATE_TEXT[self.controller.state])
        self._enable()

    def _on_state(self, state: str) -> None:
        self.state_label.setText(STATE_TEXT.get(state, state))
        self._enable()

    def _on_progress(self, p) -> None:
        self.state_label.setText(f"Chapter {p.chapter + 1}: sentence {p.chapter_done}/{p.chapter_total} · "
                                 f"{p.done}/{p.total} this run · elapsed {_clock(p.elapsed_s)} · left {_clock(p.eta_s)}")
        self.schedule_refresh()
