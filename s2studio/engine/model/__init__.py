"""The S2 transformer: its GGUF file, config and weights, and the Dual-AR maths."""
