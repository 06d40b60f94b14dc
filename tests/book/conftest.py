"""The tiny model's pipeline, shared by a module's render tests."""

from __future__ import annotations

import pytest

from tests.book.books import TINY_MODEL


@pytest.fixture(scope="module")
def tiny_pipeline():
    from s2studio.engine.pipeline import EngineSettings, Pipeline

    pipeline = Pipeline(EngineSettings(str(TINY_MODEL), codec_mode="cpu"))
    yield pipeline
    pipeline.unload()
