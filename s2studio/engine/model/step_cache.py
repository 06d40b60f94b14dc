"""What the owner of a model keeps between takes for its decode steps (no torch at import).

The static decode steps (``static_step.StaticDecoder``) hold a preallocated Slow-AR cache and,
on a GPU, the CUDA graphs recorded over it; a later take of the same size and mode reuses them
instead of recording again. They belong to whoever runs takes on the model (the ``Pipeline``, a
benchmark, a test), not to the model: that owner makes one ``StepCache``, passes it to
``generate_frames`` and clears it when the model or the ``cuda_graphs`` setting changes.
"""

from __future__ import annotations


class StepCache:
    """The static decoder kept for reuse (None until a take used the static steps)."""

    def __init__(self) -> None:
        self.decoder = None

    def clear(self) -> None:
        """Drop the decoder: its cache can be large, and its graphs belong to the old setting."""
        self.decoder = None
