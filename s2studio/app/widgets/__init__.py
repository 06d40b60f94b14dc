"""Custom widgets of the studio window (each one file, each testable on its own)."""
