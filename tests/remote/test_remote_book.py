"""A book rendered through the remote engine: N sentences in flight on a real server, the same
samples as the local engine renders one at a time."""

from __future__ import annotations

import numpy as np

from s2studio.book import BookProject, BookRenderer, ImportedBook, ImportedChapter, Manuscript
from s2studio.engine.params import GenerationParams
from s2studio.remote import RemoteEngine, RemoteSettings


def project_at(folder) -> BookProject:
    m = Manuscript.from_import(ImportedBook("Remote", chapters=[
        ImportedChapter("One", ["A first sentence. A second one.", "Said with hope."]),
        ImportedChapter("Two", ["The last of them."])]), seed=3)
    m.generation = GenerationParams(max_new_tokens=6, min_tokens_before_end=6, seed=3)
    m.chapters[0].paragraphs[1].sentences[0].voice = "hope"  # a saved voice, uploaded with its sentence
    return BookProject.create(folder, m)


def test_a_book_through_the_remote_engine_keeps_n_in_flight_with_the_local_samples(tmp_path, served,
                                                                                    local_pipeline, voices):
    local_pipeline._voices = voices  # both sides read the same library
    remote = RemoteEngine(RemoteSettings(served.url), voices=voices)
    here, there = project_at(tmp_path / "local"), project_at(tmp_path / "remote")
    in_flight = []
    renderer = BookRenderer(remote, there, parallel=4,
                            on_progress=lambda p: in_flight.append(served.health()["queue"]["running"]))
    summary = renderer.run()
    assert (summary.rendered, summary.failed) == (4, 0), summary.failures
    assert BookRenderer(local_pipeline, here, parallel=1).run().rendered == 4
    assert max(in_flight) >= 2  # the server was decoding several sentences at once
    # The uploaded voice's content is in the keys on both engines (its digest from the local library).
    assert set(there.manuscript.voice_digests) == {"hope"}
    assert there.manuscript.voice_digests == here.manuscript.voice_digests
    for job_here, job_there in zip(here.manuscript.jobs(None, here.fingerprint),
                                   there.manuscript.jobs(None, there.fingerprint)):
        np.testing.assert_array_equal(there.audio_of(job_there.key)[0], here.audio_of(job_here.key)[0])
