"""Light and dark palettes: chosen in Settings (System / Light / Dark) and remembered.

"System" follows the OS colour scheme where Qt (≥ 6.5) can read it; where it cannot (no desktop
portal, a bare X server) it reports "unknown" and the light palette is used, which is why the
choice exists at all: following the OS alone left some desktops with no way to get dark.
"""

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


THEMES = {"system": "System", "light": "Light", "dark": "Dark"}  # settings word -> what the user sees


def os_is_dark(app: QGuiApplication) -> bool:
    return app.styleHints().colorScheme() == Qt.ColorScheme.Dark


def is_dark(app: QGuiApplication) -> bool:
    """Whether the theme in use is the dark one."""
    choice = app.property("s2studio_theme") or "system"
    return choice == "dark" or (choice == "system" and os_is_dark(app))


def apply_palette(app: QGuiApplication) -> None:
    app.setPalette(_dark_palette() if is_dark(app) else _light_palette())


def apply_theme(app: QGuiApplication, choice: str) -> None:
    """Use the theme ``choice`` ("system", "light" or "dark"; anything else is "system") now;
    with "system" the palette changes again whenever the OS switches between light and dark."""
    app.setProperty("s2studio_theme", choice if choice in THEMES else "system")
    if not app.property("s2studio_theme_hooked"):  # one connection, whatever the number of calls
        app.setProperty("s2studio_theme_hooked", True)
        app.styleHints().colorSchemeChanged.connect(lambda _scheme: apply_palette(app))
    apply_palette(app)


def follow_os_theme(app: QGuiApplication) -> None:
    """The "system" theme: the OS's light or dark scheme."""
    apply_theme(app, "system")
