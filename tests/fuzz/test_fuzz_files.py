"""Property-based fuzzing of every file a user may get from someone else (issue 24): a project
(.s2project), a voice (.s2voice), a model's GGUF header, an audio file. The property, for any
input: a clear error of the file's error class naming the file, or a valid object; never
another exception (bounded time and memory: every size is checked before it is allocated)."""

from __future__ import annotations

import io
import json
import pathlib
import zipfile

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from s2studio.app.project_file import ProjectFileError, load_project_file
from s2studio.app.project import Project
from s2studio.audio import decode_audio_bytes, wav_bytes
from s2studio.engine.model.gguf_file import scan_header
from s2studio.engine.voices import VoiceFileError, VoiceProfile, decode_s2voice, encode_s2voice
from s2studio.errors import AudioInputError, ModelFileError

pytestmark = pytest.mark.fuzz
ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "data" / "golden" / "clone_f32_qknorm" / "model.gguf"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)


def mutate(data: bytes, edits, cut) -> bytes:
    """``data`` with bytes overwritten at (relative position, value) and cut at ``cut`` (0..1)."""
    out = bytearray(data)
    for where, value in edits:
        if out:
            out[int(where * (len(out) - 1))] = value
    return bytes(out[: max(0, int(len(out) * cut))]) if cut < 1 else bytes(out)


edits = st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=8)
cuts = st.one_of(st.just(1.0), st.floats(0, 1))


# ---- .s2project ------------------------------------------------------------------------------
RATE = 8000
MEMBER = wav_bytes(np.full(800, 0.1, np.float32), RATE)


def _valid_manifest() -> dict:
    return {"format": "s2studio-project", "version": 1, "script": "One.", "voice_id": "hope", "current_take": "t1",
            "speaker_voices": {"1": "hope"},
            "takes": [{"id": "t1", "text": "One.", "base_seed": 3, "settings": {
                "sampling": {"temperature": 0.7, "max_new_tokens": 100}, "segmentation": {"enabled": True},
                "postprocess": {"normalize": True}, "voice_kind": "voice", "speaker_voices": [[1, "hope"]]},
                "sentences": [{"text": "One.", "pause_after_ms": 100, "chosen": 0, "versions": [
                    {"id": "v1", "seed": 1, "sample_rate": RATE, "samples": 800, "file": "audio/v1.wav"}]}]}]}


def _paths(value, prefix=()):
    """Every (path, value) in a JSON value, so a property can replace any one of them."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


VALID_PATHS = [p for p, _ in _paths(_valid_manifest()) if p]


def _replaced(manifest, path, value):
    node = manifest
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return manifest


def _zip(manifest_text: str, members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("project.json", manifest_text)
        for name, data in members.items():
            z.writestr(name, data)
    return buffer.getvalue()


def _open_project(tmp_path_factory, data: bytes):
    path = tmp_path_factory.mktemp("fuzz") / "fuzzed.s2project"
    path.write_bytes(data)
    try:
        project = load_project_file(path)
    except ProjectFileError as err:
        assert str(path) in str(err)
        return None
    assert isinstance(project, Project)
    for take in project.takes:  # a valid project is usable: its takes assemble
        take.assemble()
        take.spans()
    return project


@given(path=st.sampled_from(VALID_PATHS), value=json_values)
@example(path=("takes", 0, "sentences", 0, "versions", 0, "sample_rate"), value=2_000_000_000)
@example(path=("takes", 0, "sentences", 0, "versions", 0, "id"), value="../../escaped")
@example(path=("takes", 0, "settings", "postprocess"), value=[1])
@example(path=("takes", 0, "sentences", 0, "pause_after_ms"), value=[1])
def test_a_project_with_any_one_field_replaced_opens_or_is_one_clear_error(tmp_path_factory, path, value):
    manifest = _replaced(_valid_manifest(), path, value)
    _open_project(tmp_path_factory, _zip(json.dumps(manifest), {"audio/v1.wav": MEMBER}))


@given(text=st.text(max_size=300), member=st.binary(max_size=300))
@example(text='{"format": "s2studio-project", "version": 1, "takes": [], "x": ' + "[" * 5000 + "]" * 5000 + "}",
         member=b"")
def test_any_manifest_text_and_member_bytes_open_or_are_one_clear_error(tmp_path_factory, text, member):
    _open_project(tmp_path_factory, _zip(text, {"audio/v1.wav": member}))


@given(edits=edits, cut=cuts)
def test_a_damaged_project_zip_opens_or_is_one_clear_error(tmp_path_factory, edits, cut):
    _open_project(tmp_path_factory, mutate(_zip(json.dumps(_valid_manifest()), {"audio/v1.wav": MEMBER}), edits, cut))


# ---- .s2voice --------------------------------------------------------------------------------
VOICE = encode_s2voice(VoiceProfile(codes=np.arange(10 * 30, dtype=np.int32).reshape(10, 30) % 4096,
                                    transcript="A short sample."))


@given(edits=edits, cut=cuts)
def test_a_damaged_voice_file_decodes_or_is_one_clear_error(edits, cut):
    try:
        profile = decode_s2voice(mutate(VOICE, edits, cut), path="fuzzed.s2voice")
    except VoiceFileError as err:
        assert "fuzzed.s2voice" in str(err)
        return
    assert profile.codes.ndim == 2 and profile.codes.dtype == np.int32
    assert profile.codes.size == 0 or (0 <= profile.codes.min() and profile.codes.max() < profile.codebook_size)


@given(data=st.binary(max_size=200))
def test_any_bytes_as_a_voice_file_decode_or_are_one_clear_error(data):
    try:
        decode_s2voice(data, path="fuzzed.s2voice")
    except VoiceFileError:
        pass


# ---- GGUF header and metadata ----------------------------------------------------------------
with open(MODEL, "rb") as _f:
    GGUF_HEAD = _f.read(1 << 16)  # the header and metadata of the tiny golden model, and then some


@given(edits=edits, cut=cuts)
def test_a_damaged_gguf_header_is_one_clear_error_or_a_header(edits, cut):
    try:
        meta, tensors = scan_header("fuzzed.gguf", mutate(GGUF_HEAD, edits, cut))
    except ModelFileError as err:
        assert "fuzzed.gguf" in str(err)
        return
    assert isinstance(meta, dict) and isinstance(tensors, dict)


# ---- audio input -----------------------------------------------------------------------------
CLIP = wav_bytes((0.3 * np.sin(np.arange(4410) * 0.1)).astype(np.float32), 44100, subtype="PCM_16")


@given(edits=edits, cut=cuts, target=st.sampled_from([16000, 22050, 44100]))
def test_a_damaged_reference_clip_is_one_clear_error_or_audio(edits, cut, target):
    try:
        audio = decode_audio_bytes(mutate(CLIP, edits, cut), target, name="fuzzed.wav")
    except AudioInputError as err:
        assert "fuzzed.wav" in str(err)
        return
    assert audio.dtype == np.float32 and audio.ndim == 1 and np.all(np.isfinite(audio))


# ---- a voice's sidecar (.json beside the .s2voice) -------------------------------------------
@given(meta=st.dictionaries(st.sampled_from(["name", "language", "notes", "created", "reference_bytes",
                                             "s2voice_sha256", "other"]), json_values, max_size=6))
@example(meta={"name": {"a": [[[[1]]]]}, "reference_bytes": True})
def test_any_sidecar_lists_the_voice_with_text_fields(tmp_path_factory, meta):
    from s2studio.engine.voices import VoiceLibrary

    folder = tmp_path_factory.mktemp("voices")
    (folder / "v.s2voice").write_bytes(VOICE)
    (folder / "v.json").write_text(json.dumps(meta))
    (info,) = VoiceLibrary(folder).list()
    assert isinstance(info.name, str) and len(info.name) <= 200 and isinstance(info.notes, str)


def test_a_sidecar_nested_too_deeply_costs_only_the_display_metadata(tmp_path):
    from s2studio.engine.voices import VoiceLibrary

    (tmp_path / "v.s2voice").write_bytes(VOICE)
    (tmp_path / "v.json").write_text("[" * 100_000 + "]" * 100_000)  # RecursionError escaped before
    (info,) = VoiceLibrary(tmp_path).list()
    assert info.name == "v" and info.problem is None
