"""The S2 Pro model files: the catalogue of published variants (``catalog``), their download
with resume and checksum (``download``), and the models on this computer with the default the
app and the CLI share (``store``). Qt-free and torch-free: used by the app's first-run page and
by ``s2studio models`` and every CLI command that loads the model."""
