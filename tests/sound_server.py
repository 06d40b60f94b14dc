"""The tests' sound server (the ``sound_server`` fixture, session scope: started once,
stopped at the end; tests that need it skip with the reason where it cannot run). Loaded by
tests/conftest.py, so tests/audio and tests/app both use it.

A private PulseAudio server: a null sink (the "speakers", whose monitor the
tests record) and a virtual source fed by a second null sink (the "microphone", into which the
tests play a known signal).

The server runs as this user with its own runtime folder (``XDG_RUNTIME_DIR``), so it never
touches a desktop's sound server. PortAudio reaches it through ALSA's ``pulse`` plugin
(Debian: ``libasound2-plugins``), which reads ``PULSE_SERVER``. ``.ci/run`` installs
``pulseaudio pulseaudio-utils libasound2-plugins``; without them the tests skip, saying so.
"""

from __future__ import annotations

import pytest

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SINK = "s2test_speakers"
MIC_FEED = "s2test_mic_feed"
MIC = "s2test_mic"
RATE = 44100

CONFIG = f"""
load-module module-native-protocol-unix
load-module module-null-sink sink_name={SINK} rate={RATE} channels=1
set-default-sink {SINK}
load-module module-null-sink sink_name={MIC_FEED} rate={RATE} channels=1
load-module module-virtual-source source_name={MIC} master={MIC_FEED}.monitor
set-default-source {MIC}
"""


def missing_tools() -> str | None:
    """Why no server can be started here, or None."""
    for tool in ("pulseaudio", "pactl", "parec", "pacat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: apt-get install pulseaudio pulseaudio-utils libasound2-plugins)"
    if not any(Path(p).is_file() for p in ("/usr/lib/x86_64-linux-gnu/alsa-lib/libasound_module_pcm_pulse.so",
                                           "/usr/lib/aarch64-linux-gnu/alsa-lib/libasound_module_pcm_pulse.so",
                                           "/usr/lib64/alsa-lib/libasound_module_pcm_pulse.so")):
        return "ALSA's pulse plugin is not installed (Debian: libasound2-plugins)"
    return None


class SoundServer:
    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="s2test-pulse-"))
        (self.folder / "run").mkdir()
        (self.folder / "default.pa").write_text(CONFIG)
        self.env = dict(os.environ, XDG_RUNTIME_DIR=str(self.folder / "run"), HOME=str(self.folder),
                        PULSE_SERVER=f"unix:{self.folder / 'run' / 'pulse' / 'native'}")
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> None:
        self.process = subprocess.Popen(
            ["pulseaudio", "-n", "-F", str(self.folder / "default.pa"), "--exit-idle-time=-1",
             "--daemonize=no", "--log-target=file:" + str(self.folder / "pulse.log")],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pactl("info").returncode == 0:
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        log = (self.folder / "pulse.log").read_text(errors="replace")[-2000:] if (self.folder / "pulse.log").exists() else ""
        self.stop()
        raise RuntimeError(f"the sound server did not start: {log}")

    def pactl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["pactl", *args], env=self.env, capture_output=True, text=True, timeout=10)

    def record_monitor(self) -> "Capture":
        """Start recording what the speakers play (float32 mono at 44.1 kHz)."""
        return Capture(self, f"{SINK}.monitor")

    def play_into_microphone(self, samples: np.ndarray) -> subprocess.Popen:
        """Play ``samples`` (float32 mono, 44.1 kHz) into the virtual microphone."""
        proc = subprocess.Popen(["pacat", "--playback", f"--device={MIC_FEED}", "--format=float32le",
                                 f"--rate={RATE}", "--channels=1", "--latency-msec=200"],
                                env=self.env, stdin=subprocess.PIPE)
        proc.stdin.write(np.asarray(samples, "<f4").tobytes())
        proc.stdin.close()
        return proc

    def sink_latency_seconds(self) -> float:
        """What the speakers' sink holds ahead of "now" (the null sink renders well ahead: a
        monitor recording hears up to this much after a stream is flushed)."""
        for line in self.pactl("list", "sinks").stdout.split("Sink #")[1].splitlines():
            if line.strip().startswith("Latency:"):
                return int(line.split()[1]) / 1e6
        return 0.0

    def module_of(self, name: str) -> str | None:
        for line in self.pactl("list", "short", "modules").stdout.splitlines():
            words = line.split()
            if f"sink_name={name}" in words or f"source_name={name}" in words:  # whole words: s2test_mic_feed is not s2test_mic
                return line.split()[0]
        return None

    def unplug(self, name: str) -> None:
        module = self.module_of(name)
        if module is not None:
            self.pactl("unload-module", module)

    def unplug_all_speakers(self) -> None:
        """Remove every sink. One sink removed while another exists is not a lost device to the
        app: PulseAudio moves the stream to the other sink and the sound goes on; with no sink
        left the stream dies, as with a USB headset pulled on a machine without speakers."""
        for name in (MIC, MIC_FEED, SINK):
            self.unplug(name)

    def unplug_all_microphones(self) -> None:
        """Remove every source (the sinks' monitors are sources too, so the sinks go as well)."""
        self.unplug_all_speakers()

    def replug(self) -> None:
        """Put the sinks and the microphone back, as at the start (after an unplug test)."""
        for line in CONFIG.strip().splitlines()[1:]:
            words = line.split()
            if words[0] == "load-module":
                name = next(w.split("=", 1)[1] for w in words if w.startswith(("sink_name=", "source_name=")))
                if self.module_of(name) is None:
                    self.pactl(*words)
            else:
                self.pactl(*words)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)


class Capture:
    """``parec`` on a source, writing to a file (a pipe left unread would fill and stall it)
    until ``stop()``."""

    def __init__(self, server: SoundServer, source: str):
        self.path = server.folder / f"capture-{time.monotonic_ns()}.raw"
        self._file = open(self.path, "wb")
        self.proc = subprocess.Popen(["parec", f"--device={source}", "--format=float32le", f"--rate={RATE}",
                                      "--channels=1", "--latency-msec=50"],
                                     env=server.env, stdout=self._file)
        self._arrivals: list[tuple[float, int]] = []
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        deadline = time.monotonic() + 5  # recording for real (samples arriving) before anything plays
        while self.path.stat().st_size < 4 * RATE // 10 and time.monotonic() < deadline:
            time.sleep(0.02)

    def samples_so_far(self) -> int:
        """How many samples were recorded until now (to measure a latency against)."""
        return self.path.stat().st_size // 4

    def _watch(self) -> None:
        while not self._stopping.is_set():
            self._arrivals.append((time.monotonic(), self.path.stat().st_size // 4))
            time.sleep(0.005)

    def sample_at(self, moment: float) -> int:
        """Which recorded sample the sink played at ``moment`` (time.monotonic()). The file grows
        in the null sink's blocks (up to 16384 samples here), so its size at a moment says
        little; but a sample that has arrived was played no later than it arrived, so the
        sink's clock started no later than min(arrival - samples/rate) over all arrivals. Call
        after the recording went on past ``moment``."""
        start = min(t - n / RATE for t, n in self._arrivals if n > 0)
        return int(round((moment - start) * RATE))

    def stop(self) -> np.ndarray:
        self._stopping.set()
        self._watcher.join(2)
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(10)
        self._file.close()
        data = self.path.read_bytes()
        self.path.unlink()
        return np.frombuffer(data[: len(data) // 4 * 4], "<f4").astype(np.float32)


@dataclass
class Delivery:
    """How a reference signal came out of a recording, block by block (see :func:`follow`)."""

    start: int  # where the first block sits in the recording (samples)
    blocks: int  # blocks with sound in the reference
    matched: int  # of those, found sample for sample (SNR over MATCH_DB)
    worst_db: float  # the lowest SNR among the matched blocks
    in_order: bool  # every block after the one before it
    gap_seconds: float  # silence inserted or audio dropped between blocks in total (under-/overruns)
    missing: tuple = ()  # the blocks not found (their start in the reference, seconds)
    heard_until: int = 0  # the end of the last block found (a sample of the reference)
    gap_count: int = 0  # how many times the audio paused or jumped (more than 5 ms)

    def summary(self) -> str:
        return (f"start at {self.start / RATE * 1000:.0f} ms, {self.matched}/{self.blocks} blocks sample for sample "
                f"(worst {self.worst_db:.0f} dB, missing at {list(self.missing)} s), in order: {self.in_order}, {self.gap_count} gaps, {self.gap_seconds * 1000:.0f} ms in all")


MATCH_DB = 40.0  # float32 through the server's 16-bit sink: ~80 dB; a wrong or shifted block: ~0 dB


def _xcorr_peak(haystack: np.ndarray, needle: np.ndarray) -> int:
    size = 1 << (len(haystack) + len(needle) - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(haystack, size) * np.conj(np.fft.rfft(needle, size)), size)
    return int(np.argmax(corr[: max(1, len(haystack) - len(needle) + 1)]))


def _best(recorded, lo, window, ref, energy) -> tuple[int, float]:
    pos = lo + _xcorr_peak(window, ref)
    got = recorded[pos:pos + len(ref)]
    if len(got) < len(ref):
        return pos, -np.inf
    return pos, 10 * np.log10(energy / max(float(np.sum((got - ref) ** 2)), 1e-20))


def follow(recorded: np.ndarray, reference: np.ndarray, block_seconds: float = 0.05,
           search_seconds: float = 1.0) -> Delivery:
    """Find ``reference`` in ``recorded`` block by block. A raw correlation of the whole clip
    falls whenever an under-run inserts silence (everything after it shifts); following blocks
    separately tells a gap (the blocks after it are still exact, only later) from wrong audio
    (no block matches). Each block is searched from where the last one ended up to
    ``search_seconds`` later; blocks that are silent in the reference are skipped."""
    block = int(block_seconds * RATE)
    head = reference[: min(len(reference), RATE // 2)]
    start = _xcorr_peak(recorded, head)
    expected, last, blocks, matched, worst, in_order, gap = start, -1, 0, 0, np.inf, True, 0
    missing, heard_until, gaps = [], 0, 0
    for at in range(0, len(reference) - block + 1, block):
        ref = reference[at:at + block]
        energy = float(np.dot(ref, ref))
        if energy < block * 1e-6:  # silent here: nothing to find
            expected += block
            continue
        blocks += 1
        lo = max(last + 1, expected - int(search_seconds * RATE) // 4)  # samples lost (an overrun) come early
        window = recorded[lo:expected + int(search_seconds * RATE) + block]
        if len(window) < block:
            break
        pos, snr = _best(recorded, lo, window, ref, energy)
        if snr < MATCH_DB and len(recorded) - lo > len(window):  # a longer pause (a slow model): look further
            pos, snr = _best(recorded, lo, recorded[lo:], ref, energy)
        if snr >= MATCH_DB:
            matched += 1
            worst = min(worst, snr)
            in_order &= pos > last
            gap += abs(pos - expected)  # silence inserted, or samples dropped
            gaps += abs(pos - expected) > RATE // 200 and last >= 0
            last, expected, heard_until = pos, pos + block, at + block
        else:
            missing.append(round(at / RATE, 3))
            expected += block
    return Delivery(start, blocks, matched, float(worst), in_order, gap / RATE, tuple(missing), heard_until, int(gaps))


@pytest.fixture(scope="session")
def sound_server():
    reason = missing_tools()
    if reason:
        pytest.skip(f"no sound server: {reason}")
    server = SoundServer()
    try:
        server.start()
    except (RuntimeError, OSError) as err:
        pytest.skip(f"no sound server: {err}")
    yield server
    server.stop()


@pytest.fixture
def real_sounddevice(sound_server, monkeypatch):
    """sounddevice (PortAudio) talking to the test server: PULSE_SERVER is read by ALSA's pulse
    plugin when a stream opens; PortAudio is re-initialised so its device list is fresh."""
    for key in ("PULSE_SERVER", "XDG_RUNTIME_DIR"):
        monkeypatch.setenv(key, sound_server.env[key])
    try:
        import sounddevice as sd
    except OSError as err:
        pytest.skip(f"no PortAudio: {err}")
    sd._terminate()
    sd._initialize()
    from s2studio.audio import devices

    devices.forget_backend()
    names = [d["name"] for d in sd.query_devices()]
    if "pulse" not in names:
        pytest.skip(f"PortAudio does not list ALSA's pulse device (it lists {names})")
    yield sd
    devices.forget_backend()
