"""Digests of the saved voices a book uses: a voice saved again under the same id (re-recorded,
re-encoded) is another voice to the sentence keys, so its sentences render again
(docs/book.md, "The manuscript").

A digest is the first 64 bits of SHA-256 over what the model is given of a saved voice: its
codes (shape and int32 values) and its transcript. Display name, notes and the reference clip do
not change a take, so they are not in it. The digests live in the manuscript
(``Manuscript.voice_digests``, saved in book.json) so that everything that computes keys without
a library at hand (the project's status, mastering, the CLI's counts) gets the same keys as the
render that made the audio; ``BookProject.refresh_voice_digests`` sets them (the renderer before
each plan, the app when the book opens, a voice is given to it, or the voice library changes).

Which library: the engine's (``engine.voices``): the local ``Pipeline`` reads its voices from it;
``RemoteEngine`` uploads the voices it has and sends any other id as the server's own voice. A
voice the library does not have (a server's own, a missing one) gets no digest, and its
sentences keep the key they had before digests existed: re-recording a voice that lives only on
a server is not noticed (render with ``--restart``, or regenerate its sentences).
"""

from __future__ import annotations

import hashlib

import numpy as np

from s2studio.errors import S2Error


def voice_digest(codes, transcript: str) -> str:
    codes = np.ascontiguousarray(codes, dtype=np.int32)
    h = hashlib.sha256()
    h.update(repr(tuple(codes.shape)).encode())
    h.update(codes.tobytes())
    h.update(b"\0")
    h.update(str(transcript).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:16]


def library_digests(library, voice_ids) -> dict[str, str]:
    """``id -> digest`` for each id the library holds (looked up as the engine does: ids are
    case-insensitive there). A voice that cannot be read gets none: rendering its sentences
    fails with the library's own message, and a fixed file gets a digest then."""
    out: dict[str, str] = {}
    if library is None:
        return out
    for voice_id in sorted(voice_ids):
        try:
            if not library.exists(voice_id):
                continue
            voice = library.get(voice_id)
        except (S2Error, OSError):
            continue
        out[voice_id] = voice_digest(voice.codes, voice.transcript)
    return out
