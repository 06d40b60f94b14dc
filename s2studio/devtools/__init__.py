"""Developer tools that must ship inside the app: the tiny random model used by ``--self-test``.

The bundle has no ``tools/`` folder and no test data, so the generators the self-test needs live
here. They use only numpy, gguf and tokenizers (never Qt or torch), so they run anywhere the
engine's file readers run. ``tools/make_tiny_s2.py`` and ``tools/make_tiny_tokenizer.py`` stay
the full-featured command-line versions (quantized types, every size knob).
"""
