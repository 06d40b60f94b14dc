"""Light and dark palettes that follow the OS colour scheme (Qt ≥ 6.5 reports it)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette


def _palette(colors: dict, disabled_text: str) -> QPalette:
    """A palette from role -> colour, with ``disabled_text`` for disabled text of every kind."""
    p = QPalette()
    for role, color in colors.items():
        p.setColor(role, QColor(color))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(disabled_text))
    return p


def _dark_palette() -> QPalette:
    return _palette({
        QPalette.ColorRole.Window: "#202124", QPalette.ColorRole.WindowText: "#e8eaed",
        QPalette.ColorRole.Base: "#17181a", QPalette.ColorRole.AlternateBase: "#26272b",
        QPalette.ColorRole.Text: "#e8eaed", QPalette.ColorRole.Button: "#2d2e31",
        QPalette.ColorRole.ButtonText: "#e8eaed", QPalette.ColorRole.Highlight: "#4f9dde",
        QPalette.ColorRole.HighlightedText: "#0b0c0d", QPalette.ColorRole.ToolTipBase: "#2d2e31",
        QPalette.ColorRole.ToolTipText: "#e8eaed", QPalette.ColorRole.PlaceholderText: "#8a8d91",
        QPalette.ColorRole.Mid: "#3c3d40", QPalette.ColorRole.Link: "#8ab4f8",
    }, "#6b6e72")


def _light_palette() -> QPalette:
    return _palette({
        QPalette.ColorRole.Window: "#f3f4f6", QPalette.ColorRole.WindowText: "#1f2328",
        QPalette.ColorRole.Base: "#ffffff", QPalette.ColorRole.AlternateBase: "#f6f8fa",
        QPalette.ColorRole.Text: "#1f2328", QPalette.ColorRole.Button: "#e9ebef",
        QPalette.ColorRole.ButtonText: "#1f2328", QPalette.ColorRole.Highlight: "#2f6fb3",
        QPalette.ColorRole.HighlightedText: "#ffffff", QPalette.ColorRole.PlaceholderText: "#8c959f",
        QPalette.ColorRole.Mid: "#c9ced6", QPalette.ColorRole.Link: "#0969da",
    }, "#9aa1a9")


def is_dark(app: QGuiApplication) -> bool:
    return app.styleHints().colorScheme() == Qt.ColorScheme.Dark


def apply_palette(app: QGuiApplication) -> None:
    app.setPalette(_dark_palette() if is_dark(app) else _light_palette())


def follow_os_theme(app: QGuiApplication) -> None:
    """Apply now and again whenever the OS switches between light and dark."""
    apply_palette(app)
    app.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_palette(app))
