"""The Settings dialog: edits a copy of ``AppSettings``; OK returns it, Cancel drops it."""

from __future__ import annotations

import os
import threading

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSlider,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from s2studio.app.settings import AppSettings
from s2studio.app.theme import THEMES
from s2studio.audio import devices
from s2studio.engine.modes import CodecMode, TokenizerMode

S2_PRO_SLOW_LAYERS = 36  # the GPU-layers slider's range (S2 Pro's Slow-AR depth)
CODEC_MODE_LABELS = {CodecMode.AUTO.value: "Auto (benchmark CPU vs GPU once)", CodecMode.CPU.value: "Always the CPU",
                     CodecMode.FOLLOW.value: "Follow the engine's device"}
TOKENIZER_MODE_LABELS = {TokenizerMode.HF.value: "As trained (hf, recommended)",
                         TokenizerMode.S2CPP.value: "s2.cpp's exact token ids (s2cpp)"}


def _path_row(edit: QLineEdit, on_browse) -> QWidget:
    w = QWidget()
    row = QHBoxLayout(w)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(edit, 1)
    button = QPushButton("Browse…")
    button.clicked.connect(on_browse)
    row.addWidget(button)
    return w



def logical_cores() -> int:
    """Cores this process may run on, as engine/threads.py counts them (that module imports
    torch, which the window must not): more threads than these only slow generation down."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 4

class ServerProbe(QObject):
    """Asks a server for its ``/health`` (and whether the key opens ``/voices``) off the UI
    thread; ``answered(text, ok)`` arrives on the UI thread."""

    answered = Signal(str, bool)

    def probe(self, url: str, api_key: str) -> None:
        threading.Thread(target=self._run, args=(url, api_key), name="s2studio-server-probe", daemon=True).start()

    def _run(self, urls: str, api_key: str) -> None:
        from s2studio.app.server_engine import describe_health
        from s2studio.errors import S2Error
        from s2studio.remote import RemoteEngine, RemoteSettings

        lines, ok = [], True
        engine = RemoteEngine(RemoteSettings(urls, api_key=api_key or None, connect_timeout_s=5))
        for address in engine.addresses:
            try:
                line = describe_health(address.url, engine.health(address))
                engine.list_voices(address)  # the one question /health cannot answer: does the key work?
                lines.append(line)
            except S2Error as exc:
                lines.append(f"Not connected: {exc}")
                ok = False
        try:
            self.answered.emit("\n".join(lines), ok)
        except RuntimeError:  # the dialog was closed before the server answered
            pass


class SettingsDialog(QDialog):
    def __init__(self, settings: AppSettings, *, engine_devices: list[tuple[str, str]] | None = None,
                 codec_verdict: str = "", parent=None, api_keys=None):
        """``api_keys``: the app's ``ApiKeyStore``; the server's key is read from it and stored
        in it on OK (never in the settings file)."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.resize(560, 460)
        self._original = settings
        s = settings
        tabs = QTabWidget()

        # -- model ----------------------------------------------------------------------------
        model = QWidget()
        form = QFormLayout(model)
        self.model_path = QLineEdit(s.model_path)
        form.addRow("Model file (.gguf):", _path_row(self.model_path, self._browse_model))
        self.tokenizer_path = QLineEdit(s.tokenizer_path)
        self.tokenizer_path.setPlaceholderText("beside the model file")
        form.addRow("Tokenizer (tokenizer.json):", _path_row(self.tokenizer_path, self._browse_tokenizer))
        self.tokenizer_mode = QComboBox()
        for mode, label in TOKENIZER_MODE_LABELS.items():
            self.tokenizer_mode.addItem(label, mode)
        self.tokenizer_mode.setCurrentIndex(max(0, self.tokenizer_mode.findData(s.tokenizer_mode)))
        form.addRow("Tokenizer mode:", self.tokenizer_mode)
        self.device = QComboBox()
        known = list(engine_devices or [("cpu", "CPU")])
        if s.device not in [d for d, _ in known]:
            known.append((s.device, f"{s.device} (not detected)"))
        for dev, desc in known:
            self.device.addItem(desc if desc.lower() == dev else f"{dev} — {desc}", dev)
        self.device.setCurrentIndex(max(0, self.device.findData(s.device)))
        self.device.currentIndexChanged.connect(self._update_layers_label)
        form.addRow("Device:", self.device)
        if engine_devices is None:
            form.addRow("", QLabel("GPUs are listed once the engine has looked for them (shortly after start)."))
        layers = QWidget()
        lrow = QHBoxLayout(layers)
        lrow.setContentsMargins(0, 0, 0, 0)
        self.gpu_layers = QSlider(Qt.Orientation.Horizontal)
        self.gpu_layers.setRange(0, S2_PRO_SLOW_LAYERS)
        self.gpu_layers.setValue(S2_PRO_SLOW_LAYERS if s.gpu_layers < 0 else min(s.gpu_layers, S2_PRO_SLOW_LAYERS))
        self.gpu_layers_all = QCheckBox("all")  # the number beside the slider is hidden then: one "all"
        self.gpu_layers_all.setChecked(s.gpu_layers < 0)
        self.gpu_layers_label = QLabel()
        self.gpu_layers.valueChanged.connect(self._update_layers_label)
        self.gpu_layers_all.toggled.connect(self._update_layers_label)
        lrow.addWidget(self.gpu_layers, 1)
        lrow.addWidget(self.gpu_layers_label)
        lrow.addWidget(self.gpu_layers_all)
        form.addRow("GPU layers:", layers)
        self.threads = QSpinBox()
        cores = logical_cores()
        self.threads.setRange(0, cores)  # more than the cores is clamped by the engine anyway
        self.threads.setSpecialValueText("all cores")
        self.threads.setToolTip(f"This computer has {cores} logical core(s); 0 uses them all.")
        self.threads.setValue(s.threads)
        form.addRow("CPU threads:", self.threads)
        self.codec_mode = QComboBox()
        for mode, label in CODEC_MODE_LABELS.items():
            self.codec_mode.addItem(label, mode)
        self.codec_mode.setCurrentIndex(max(0, self.codec_mode.findData(s.codec_mode)))
        form.addRow("Audio codec runs on:", self.codec_mode)
        self.codec_verdict = QLabel(codec_verdict or "The verdict is shown after the model has loaded.")
        self.codec_verdict.setWordWrap(True)
        form.addRow("", self.codec_verdict)
        tabs.addTab(model, "Model")

        # -- sampling -------------------------------------------------------------------------
        sampling = QWidget()
        form = QFormLayout(sampling)
        self.temperature = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=2.0, singleStep=0.05)
        self.temperature.setValue(s.temperature)
        form.addRow("Temperature:", self.temperature)
        self.top_p = QDoubleSpinBox(decimals=2, minimum=0.0, maximum=1.0, singleStep=0.05)
        self.top_p.setValue(s.top_p)
        form.addRow("Top-p:", self.top_p)
        self.top_k = QSpinBox(minimum=0, maximum=4096)
        self.top_k.setValue(s.top_k)
        form.addRow("Top-k:", self.top_k)
        self.max_new_tokens = QSpinBox(minimum=1, maximum=8192)
        self.max_new_tokens.setValue(s.max_new_tokens)
        self.max_new_tokens.setSuffix(" frames")
        self.max_new_tokens.setToolTip("21.5 frames = 1 s of audio")
        form.addRow("Max tokens:", self.max_new_tokens)
        seed_row = QWidget()
        srow = QHBoxLayout(seed_row)
        srow.setContentsMargins(0, 0, 0, 0)
        self.seed = QSpinBox(minimum=0, maximum=2**31 - 1)
        self.seed.setValue(min(s.seed, 2**31 - 1))
        self.seed_locked = QCheckBox("Lock (reuse this seed for every take)")
        self.seed_locked.setChecked(s.seed_locked)
        srow.addWidget(self.seed, 1)
        srow.addWidget(self.seed_locked)
        form.addRow("Seed:", seed_row)
        tabs.addTab(sampling, "Sampling")

        # -- long text and finishing ----------------------------------------------------------
        finishing = QWidget()
        form = QFormLayout(finishing)
        self.segmentation = QCheckBox("Split long text into sentences (playback starts sooner)")
        self.segmentation.setChecked(s.segmentation_enabled)
        form.addRow(self.segmentation)
        self.segment_max_chars = QSpinBox(minimum=0, maximum=5000)
        self.segment_max_chars.setSpecialValueText("no limit")
        self.segment_max_chars.setValue(s.segment_max_chars)
        form.addRow("Longest segment (characters):", self.segment_max_chars)
        self.pause_ms = QSpinBox(minimum=0, maximum=5000, suffix=" ms")
        self.pause_ms.setValue(s.pause_ms)
        form.addRow("Pause between segments:", self.pause_ms)
        self.trim_silence = QCheckBox("Trim trailing silence")
        self.trim_silence.setChecked(s.trim_silence)
        self.normalize = QCheckBox("Peak-normalize to 0.95")
        self.normalize.setChecked(s.normalize)
        self.dynamic_normalize = QCheckBox("Even out loudness (dynamic normalize)")
        self.dynamic_normalize.setChecked(s.dynamic_normalize)
        for box in (self.trim_silence, self.normalize, self.dynamic_normalize):
            form.addRow(box)
        tabs.addTab(finishing, "Long text && finishing")

        # -- audio devices --------------------------------------------------------------------
        audio = QWidget()
        form = QFormLayout(audio)
        self.input_device = QComboBox()
        self.output_device = QComboBox()
        try:
            inputs, outputs = devices.list_devices()
            problem = ""
        except devices.AudioDeviceError as err:
            inputs, outputs, problem = [], [], str(err)
        for combo, found, current in ((self.input_device, inputs, s.input_device),
                                      (self.output_device, outputs, s.output_device)):
            combo.addItem("System default", "")
            for d in found:
                combo.addItem(d.name, d.name)
            if current and combo.findData(current) < 0:
                combo.addItem(f"{current} (not connected)", current)
            combo.setCurrentIndex(max(0, combo.findData(current)))
            combo.setEnabled(not problem)
        form.addRow("Microphone:", self.input_device)
        form.addRow("Speakers:", self.output_device)
        if problem:
            note = QLabel(problem)
            note.setWordWrap(True)
            form.addRow(note)
        tabs.addTab(audio, "Audio")

        look = QWidget()
        form = QFormLayout(look)
        self.theme = QComboBox()
        for word, shown in THEMES.items():
            self.theme.addItem(shown, word)
        self.theme.setCurrentIndex(max(0, self.theme.findData(s.theme)))
        self.theme.setToolTip("System follows the operating system's light or dark setting where it reports "
                              "one (otherwise light)")
        form.addRow("Theme:", self.theme)
        tabs.addTab(look, "Appearance")

        tabs.addTab(self._build_engine_tab(s, api_keys), "Engine")  # last: accept() shows it on a bad address
        self.tabs = tabs

        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.reset_button = buttons.addButton("Reset to defaults…", QDialogButtonBox.ButtonRole.ResetRole)
        self.reset_button.setToolTip("Sampling, long text, finishing, devices and threads back to their defaults; "
                                     "the model files and the server address are kept")
        self.reset_button.clicked.connect(self.reset_to_defaults)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self._update_layers_label()

    # ---- engine: this computer or a server --------------------------------------------------------
    def _build_engine_tab(self, s: AppSettings, api_keys) -> QWidget:
        self._api_keys = api_keys
        page = QWidget()
        form = QFormLayout(page)
        self.engine_kind = QComboBox()
        self.engine_kind.addItem("This computer", "local")
        self.engine_kind.addItem("A server (s2studio serve on another machine)", "server")
        self.engine_kind.setCurrentIndex(max(0, self.engine_kind.findData(s.engine)))
        form.addRow("Run the model on:", self.engine_kind)
        self.server_url = QLineEdit(s.server_url)
        self.server_url.setPlaceholderText("http://gpu-box:3030  (several: comma-separated)")
        self.server_url.setToolTip("With several servers each sentence goes to the least busy one, and a server "
                                   "that fails mid-take is replaced by another.")
        form.addRow("Server address:", self.server_url)
        self.server_key = QLineEdit(api_keys.get(s.server_url) if api_keys is not None else "")
        self.server_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.server_key.setPlaceholderText("only if the server was started with --api-key")
        form.addRow("API key:", self.server_key)
        key_note = QLabel(api_keys.note if api_keys is not None else "")
        key_note.setWordWrap(True)
        form.addRow("", key_note)
        self.connect_button = QPushButton("Connect")
        self.connect_button.clicked.connect(self.probe_server)
        form.addRow("", self.connect_button)
        self.server_status = QLabel("")
        self.server_status.setWordWrap(True)
        self.server_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", self.server_status)
        self.server_warning = QLabel("")
        self.server_warning.setWordWrap(True)
        form.addRow("", self.server_warning)
        self._probe = ServerProbe(self)
        self._probe.answered.connect(self._on_probe_answer)
        self.engine_kind.currentIndexChanged.connect(self._update_engine_fields)
        self.server_url.textChanged.connect(self._update_engine_fields)
        self._update_engine_fields()
        return page

    def _server_addresses(self) -> str | None:
        """The address list in one spelling (``http://host:port``, comma-separated), or None
        with the problem shown."""
        from s2studio.errors import InputError
        from s2studio.remote import parse_server_list

        try:
            return ",".join(a.url for a in parse_server_list(self.server_url.text()))
        except InputError as exc:
            self.server_status.setText(str(exc))
            return None

    def _update_engine_fields(self, *_):
        remote = self.engine_kind.currentData() == "server"
        for widget in (self.server_url, self.server_key, self.connect_button):
            widget.setEnabled(remote)
        warning = ""
        if remote and self.server_url.text().strip():
            from s2studio.errors import InputError
            from s2studio.remote import parse_server_list

            try:
                warning = "\n".join(a.insecure_warning for a in parse_server_list(self.server_url.text())
                                    if a.insecure_warning)
            except InputError:
                warning = ""
        self.server_warning.setText(warning)

    def probe_server(self) -> None:
        urls = self._server_addresses()
        if urls is None:
            return
        self.connect_button.setEnabled(False)
        self.server_status.setText(f"Connecting to {urls.replace(',', ', ')}…")
        self._probe.probe(urls, self.server_key.text().strip())

    def _on_probe_answer(self, text: str, ok: bool) -> None:
        self.connect_button.setEnabled(self.engine_kind.currentData() == "server")
        self.server_status.setText(text)

    def accept(self) -> None:
        if self.engine_kind.currentData() == "server":
            urls = self._server_addresses()
            if urls is None:
                self.tabs.setCurrentIndex(self.tabs.count() - 1)
                return
            if self._api_keys is not None:
                problem = self._api_keys.set(urls, self.server_key.text())
                if problem:
                    self.server_status.setText(problem)
        super().accept()

    def _update_layers_label(self, *_):
        """GPU layers mean something only on a GPU; "all" is said once, by the check box."""
        on_gpu = self.device.currentData() != "cpu"
        every = self.gpu_layers_all.isChecked()
        self.gpu_layers_all.setEnabled(on_gpu)
        self.gpu_layers.setEnabled(on_gpu and not every)
        self.gpu_layers_label.setEnabled(on_gpu)
        self.gpu_layers_label.setText("" if every else str(self.gpu_layers.value()))
        self.gpu_layers_label.setVisible(not every)
        tip = "" if on_gpu else "Only used when the device is a GPU."
        for w in (self.gpu_layers, self.gpu_layers_all, self.gpu_layers_label):
            w.setToolTip(tip)

    def _browse_model(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose the S2 Pro model", self.model_path.text(),
                                              "GGUF model (*.gguf)")
        if path:
            self.model_path.setText(path)

    def _browse_tokenizer(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose tokenizer.json", self.tokenizer_path.text(),
                                              "Tokenizer (tokenizer.json *.json)")
        if path:
            self.tokenizer_path.setText(path)

    def confirm_reset(self) -> bool:
        """A separate method so tests can answer it without a modal dialog."""
        return QMessageBox.question(self, "Reset to defaults",
                                    "Put every setting back to its default (the model files and the server "
                                    "address are kept)? Nothing changes until you press OK.") == \
            QMessageBox.StandardButton.Yes

    def reset_to_defaults(self) -> bool:
        """The fields show the defaults (OK applies them, Cancel keeps the old settings). Where
        the model is (files, server) stays: resetting it would send the user back to the welcome page."""
        if not self.confirm_reset():
            return False
        d = AppSettings()
        for combo, value in ((self.tokenizer_mode, d.tokenizer_mode), (self.codec_mode, d.codec_mode),
                             (self.theme, d.theme), (self.input_device, d.input_device), (self.output_device, d.output_device)):
            combo.setCurrentIndex(max(0, combo.findData(value)))
        self.device.setCurrentIndex(max(0, self.device.findData(d.device)))
        self.gpu_layers_all.setChecked(d.gpu_layers < 0)
        self.gpu_layers.setValue(S2_PRO_SLOW_LAYERS)
        for box, value in ((self.threads, d.threads), (self.top_k, d.top_k), (self.max_new_tokens, d.max_new_tokens),
                           (self.seed, d.seed), (self.segment_max_chars, d.segment_max_chars),
                           (self.pause_ms, d.pause_ms), (self.temperature, d.temperature), (self.top_p, d.top_p)):
            box.setValue(value)
        for check, value in ((self.seed_locked, d.seed_locked), (self.segmentation, d.segmentation_enabled),
                             (self.trim_silence, d.trim_silence), (self.normalize, d.normalize),
                             (self.dynamic_normalize, d.dynamic_normalize)):
            check.setChecked(value)
        self._update_layers_label()
        return True

    def result_settings(self) -> AppSettings:
        s = self._original.copy()
        s.model_path = self.model_path.text().strip()
        s.tokenizer_path = self.tokenizer_path.text().strip()
        s.tokenizer_mode = self.tokenizer_mode.currentData()
        s.device = self.device.currentData()
        s.gpu_layers = -1 if self.gpu_layers_all.isChecked() else self.gpu_layers.value()
        s.threads = self.threads.value()
        s.codec_mode = self.codec_mode.currentData()
        s.temperature = self.temperature.value()
        s.top_p = self.top_p.value()
        s.top_k = self.top_k.value()
        s.max_new_tokens = self.max_new_tokens.value()
        s.seed = self.seed.value()
        s.seed_locked = self.seed_locked.isChecked()
        s.segmentation_enabled = self.segmentation.isChecked()
        s.segment_max_chars = self.segment_max_chars.value()
        s.pause_ms = self.pause_ms.value()
        s.trim_silence = self.trim_silence.isChecked()
        s.normalize = self.normalize.isChecked()
        s.dynamic_normalize = self.dynamic_normalize.isChecked()
        s.input_device = self.input_device.currentData()
        s.output_device = self.output_device.currentData()
        s.theme = self.theme.currentData()
        s.engine = self.engine_kind.currentData()
        url = self.server_url.text().strip()
        if url:
            from s2studio.errors import InputError
            from s2studio.remote import parse_server_list

            try:
                url = ",".join(a.url for a in parse_server_list(url))  # one spelling, so the key is found again
            except InputError:
                pass  # kept as typed; OK refuses it while "A server" is chosen
        s.server_url = url
        return s
