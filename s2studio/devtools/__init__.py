"""The generators of random-weight S2 Pro models and their tokenizers: the one copy of this code.

It ships inside the app because ``--self-test`` synthesizes with a tiny model (the bundle has no
``tools/`` folder and no test data). The tests call it in-process; ``tools/`` holds only thin
command lines over it (``main`` of each module). Only numpy, gguf and tokenizers are used (never
Qt or torch), so it runs anywhere the engine's file readers run.

- ``tiny_model``: the tiny model (``make_tiny_model``: a folder with both files, for the
  self-test; ``write_tiny_gguf``: one GGUF with every knob of ``TinyModelOptions``), built from
  ``tiny_text`` (Dual-AR transformer), ``tiny_codec`` (RVQ codec) and ``random_init``;
- ``tiny_tokenizer``: its byte-level BPE ``tokenizer.json``;
- ``full_model`` / ``full_tokenizer``: the same layout at the real S2 Pro size, for benchmarks;
- ``requantize``: a copy of a model with its 2-D weights in another GGUF type;
- ``quant_blocks``: random quantized blocks for the kernel tests;
- ``options``: the generators' settings as dataclass fields, read as command-line flags.
"""
