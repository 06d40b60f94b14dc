"""s2studio: a desktop voice-cloning studio for Fish Audio S2 Pro, on a torch port of s2.cpp."""

__version__ = "0.1.0"
