"""The tiny model's pipeline, shared by a module's render tests."""

from __future__ import annotations

import pytest

from tests.book.books import TINY_MODEL


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory):
    from s2studio.engine.pipeline import EngineSettings, Pipeline
    from s2studio.engine.voices import VoiceLibrary

    voices = VoiceLibrary(tmp_path_factory.mktemp("voices"))  # never the user's own folder
    pipeline = Pipeline(EngineSettings(str(TINY_MODEL), codec_mode="cpu"), voices=voices)
    yield pipeline
    pipeline.unload()
