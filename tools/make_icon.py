"""Draws the app icon with QPainter: resources/s2studio.png (+ .ico, .icns, .svg).

A rounded square in a blue gradient with a white waveform. Run: python tools/make_icon.py
(offscreen; no display needed). Qt writes PNG and ICO itself; the .icns is assembled from
PNGs by hand (its format is a simple list of typed, length-prefixed PNG chunks).
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt  # noqa: E402
from PySide6.QtGui import QColor, QGuiApplication, QImage, QLinearGradient, QPainter, QPainterPath, QPen  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "resources"
BARS = [0.25, 0.45, 0.7, 0.95, 0.6, 0.8, 0.4, 0.65, 0.3]


def draw(size: int) -> QImage:
    img = QImage(size, size, QImage.Format.Format_ARGB32)
    img.fill(Qt.GlobalColor.transparent)
    p = QPainter(img)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    margin = size * 0.06
    rect = QRectF(margin, margin, size - 2 * margin, size - 2 * margin)
    grad = QLinearGradient(rect.topLeft(), rect.bottomRight())
    grad.setColorAt(0, QColor("#3a7bd5"))
    grad.setColorAt(1, QColor("#6a3fb5"))
    path = QPainterPath()
    path.addRoundedRect(rect, size * 0.2, size * 0.2)
    p.fillPath(path, grad)
    n = len(BARS)
    step = rect.width() * 0.72 / n
    x0 = rect.left() + rect.width() * 0.14 + step / 2
    mid = rect.center().y()
    pen = QPen(QColor("white"), max(1.0, step * 0.55), Qt.PenStyle.SolidLine, Qt.PenCapStyle.RoundCap)
    p.setPen(pen)
    for i, h in enumerate(BARS):
        half = rect.height() * 0.32 * h
        x = x0 + i * step
        p.drawLine(QPointF(x, mid - half), QPointF(x, mid + half))
    p.end()
    return img


def png_bytes(img: QImage) -> bytes:
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    img.save(buf, "PNG")
    return bytes(data)


def write_icns(path: Path) -> None:
    # ic07..ic10: 128, 256, 512, 1024 px PNGs
    chunks = b"".join(t + struct.pack(">I", len(png) + 8) + png
                      for t, png in ((b"ic07", png_bytes(draw(128))), (b"ic08", png_bytes(draw(256))),
                                     (b"ic09", png_bytes(draw(512))), (b"ic10", png_bytes(draw(1024)))))
    path.write_bytes(b"icns" + struct.pack(">I", len(chunks) + 8) + chunks)


def write_svg(path: Path) -> None:
    bars = []
    step = 0.72 * 88 / len(BARS)
    for i, h in enumerate(BARS):
        x = 6 + 88 * 0.14 + step / 2 + i * step
        half = 88 * 0.32 * h
        bars.append(f'<line x1="{x:.2f}" y1="{50 - half:.2f}" x2="{x:.2f}" y2="{50 + half:.2f}"/>')
    path.write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">\n'
        '<defs><linearGradient id="g" x1="0" y1="0" x2="1" y2="1">'
        '<stop offset="0" stop-color="#3a7bd5"/><stop offset="1" stop-color="#6a3fb5"/></linearGradient></defs>\n'
        '<rect x="6" y="6" width="88" height="88" rx="20" fill="url(#g)"/>\n'
        f'<g stroke="white" stroke-width="{step * 0.55:.2f}" stroke-linecap="round">{"".join(bars)}</g>\n</svg>\n',
        encoding="utf-8")


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv)  # noqa: F841 - QPainter needs one
    OUT.mkdir(exist_ok=True)
    draw(512).save(str(OUT / "s2studio.png"))
    if not draw(256).save(str(OUT / "s2studio.ico")):
        print("this Qt build cannot write .ico; skipped", file=sys.stderr)
    write_icns(OUT / "s2studio.icns")
    write_svg(OUT / "s2studio.svg")
    print("wrote", ", ".join(sorted(p.name for p in OUT.glob("s2studio.*"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
