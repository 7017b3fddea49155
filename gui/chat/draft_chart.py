"""How an answer was drafted, at a glance: a line and a small chart under its stats,
from ``GenerationStats.to_dict()``.  Left, one bar per drafter (draft model, suffix,
prompt lookup, prediction, grammar): its length the tokens it drafted, the green part the
tokens the target accepted; right, one column per draft position: the share of drafts
reaching that position that were accepted there."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPalette

from .token_colours import is_dark

DRAFTER_NAMES = {
    "draft-model": "draft model",
    "mtp": "MTP block",
    "suffix": "suffix",
    "prompt-lookup": "prompt lookup",
    "prediction": "prediction",
    "grammar": "grammar",
}
ACCEPTED = QColor(
    "#3fb767"
)  # green, as the accepted tokens' background but strong enough for a bar
REJECTED = {False: QColor("#d4d4d8"), True: QColor("#52525b")}  # by palette darkness
ROW, LABEL_W, BAR_W, COUNT_W, GAP, POS_H, TITLE = 14, 84, 110, 56, 18, 40, 14
MAX_POSITIONS = 16


@dataclass
class Bar:
    """One bar of the chart: its whole (drafted, grey) and its accepted part (green)."""

    label: str
    accepted: int
    drafted: int
    whole: QRectF
    part: QRectF


def drafter_mix(stats: dict | None) -> list[tuple[str, int, int]]:
    """(drafter label, accepted, drafted) per drafter that drafted, most drafted first."""
    drafted = (stats or {}).get("drafted_by_drafter") or {}
    accepted = (stats or {}).get("accepted_by_drafter") or {}
    rows = [
        (DRAFTER_NAMES.get(name, name), accepted.get(name, 0), n)
        for name, n in drafted.items()
        if n
    ]
    return sorted(rows, key=lambda row: (-row[2], row[0]))


def by_position(stats: dict | None) -> list[tuple[int, int]]:
    """(accepted, drafted) per draft position, from the first."""
    drafted = (stats or {}).get("drafted_per_position") or []
    accepted = (stats or {}).get("accepted_at_position") or []
    return [(accepted[i] if i < len(accepted) else 0, d) for i, d in enumerate(drafted)]


def mix_text(stats: dict | None) -> str:
    """The line above the chart, e.g. "Drafted by draft model 80/100 · suffix 12/15 ·
    accepted by position 92 % › 81 % › 60 %" ("" when nothing was drafted)."""
    rows = drafter_mix(stats)
    if not rows:
        return ""
    line = "Drafted by " + " · ".join(f"{label} {a}/{d}" for label, a, d in rows)
    shares = [f"{100 * a / d:.0f} %" for a, d in by_position(stats)[:MAX_POSITIONS] if d]
    return line + (" · accepted by position " + " › ".join(shares) if shares else "")


def chart_bars(stats: dict | None) -> tuple[list[Bar], list[Bar]]:
    """The drafter bars and the position columns, in the chart's logical pixels."""
    rows = drafter_mix(stats)
    most = max((d for _, _, d in rows), default=1)
    drafters = []
    for i, (label, a, d) in enumerate(rows):
        y = TITLE + i * ROW + 2
        whole = QRectF(LABEL_W, y, BAR_W * d / most, ROW - 4)
        drafters.append(Bar(label, a, d, whole, QRectF(LABEL_W, y, BAR_W * a / d, ROW - 4)))
    left = LABEL_W + BAR_W + COUNT_W + GAP
    height = max(POS_H, len(rows) * ROW - 4)
    positions = []
    for i, (a, d) in enumerate(by_position(stats)[:MAX_POSITIONS]):
        x = left + i * 14
        part_h = height * a / d if d else 0.0
        whole = QRectF(x, TITLE + 2, 10, height)
        positions.append(
            Bar(str(i + 1), a, d, whole, QRectF(x, TITLE + 2 + height - part_h, 10, part_h))
        )
    return drafters, positions


def chart_size(stats: dict | None) -> tuple[int, int]:
    """The chart's logical width and height in pixels."""
    drafters, positions = chart_bars(stats)
    left = LABEL_W + BAR_W + COUNT_W + GAP
    height = max(POS_H, len(drafters) * ROW - 4)
    return left + max(len(positions) * 14, 160), TITLE + height + 2 + ROW


def chart_image(
    stats: dict | None, palette: QPalette, font: QFont, ratio: float = 1.0
) -> QImage | None:
    """The chart drawn for ``palette`` (None when nothing was drafted); ``ratio``: the
    screen's device pixel ratio."""
    drafters, positions = chart_bars(stats)
    if not drafters:
        return None
    w, h = chart_size(stats)
    image = QImage(round(w * ratio), round(h * ratio), QImage.Format_ARGB32_Premultiplied)
    image.setDevicePixelRatio(ratio)
    image.fill(Qt.transparent)
    painter = QPainter(image)
    try:
        _draw(painter, drafters, positions, palette, font)
    finally:
        painter.end()
    return image


def _draw(
    painter: QPainter, drafters: list[Bar], positions: list[Bar], palette: QPalette, font: QFont
) -> None:
    small = QFont(font)
    small.setPointSizeF(max(6.5, font.pointSizeF() * 0.8))
    painter.setFont(small)
    text, grey = palette.color(QPalette.Text), REJECTED[is_dark(palette)]
    painter.setPen(text)
    painter.drawText(
        QRectF(0, 0, LABEL_W + BAR_W + COUNT_W, TITLE),
        Qt.AlignLeft,
        "accepted / drafted per drafter",
    )
    left = LABEL_W + BAR_W + COUNT_W + GAP
    painter.drawText(QRectF(left, 0, 200, TITLE), Qt.AlignLeft, "accepted by draft position")
    for bar in drafters:
        painter.setPen(text)
        label_box = QRectF(0, bar.whole.top() - 2, LABEL_W - 6, ROW)
        painter.drawText(label_box, Qt.AlignRight | Qt.AlignVCenter, bar.label)
        count_box = QRectF(LABEL_W + BAR_W + 4, bar.whole.top() - 2, COUNT_W, ROW)
        painter.drawText(count_box, Qt.AlignLeft | Qt.AlignVCenter, f"{bar.accepted}/{bar.drafted}")
        painter.fillRect(bar.whole, grey)
        painter.fillRect(bar.part, ACCEPTED)
    for bar in positions:
        painter.fillRect(bar.whole, grey)
        painter.fillRect(bar.part, ACCEPTED)
        painter.setPen(text)
        painter.drawText(
            QRectF(bar.whole.left() - 2, bar.whole.bottom() + 1, 14, ROW),
            Qt.AlignHCenter,
            bar.label,
        )
