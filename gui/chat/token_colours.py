"""Colours and words for token sources, shared by the chat view, its legend and the
drafting chart; and the contrast rules that keep every colour readable."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette, QTextFormat

from .message import Segment

# Background colours for highlighted tokens, always with DARK_TEXT on them (WCAG contrast
# > 10:1), so they read the same in a light and a dark palette; other text takes the palette's.
DARK_TEXT = "#111827"
SOURCE_COLOURS = {
    "accepted": QColor("#b9ebc3"),  # green: a draft token the target kept
    "correction": QColor("#ffc8a0"),  # orange: the target replaced a rejected draft token
    "forced": QColor(
        "#c7d2fe"
    ),  # indigo: a grammar forced it (a schema's key, a call's name), the target kept it
}
SOURCE_LABELS = {
    "accepted": "accepted draft token",
    "forced": "forced by the grammar (drafted free, kept by the target)",
    "correction": "target correction (draft rejected)",
    "bonus": "target bonus token (all drafts accepted)",
    "target": "target token (no draft this round)",
}
SOURCE_PROPERTY = QTextFormat.UserProperty + 1  # char format property holding the source


def tooltip_for(segment: Segment) -> str:
    """Source, plus target / draft probabilities when sampling (as percentages)."""
    tip = SOURCE_LABELS.get(segment.source, segment.source)
    probs = []
    if segment.p_target is not None:
        probs.append(f"p target {100 * segment.p_target:.1f} %")
    if segment.p_draft is not None:
        probs.append(f"p draft {100 * segment.p_draft:.1f} %")
    return tip + (" — " + ", ".join(probs) if probs else "")


def luminance(c: QColor) -> float:
    """WCAG 2 relative luminance (0 black to 1 white)."""
    channels = [x / 255 for x in (c.red(), c.green(), c.blue())]
    lin = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast_ratio(foreground: QColor, background: QColor) -> float:
    """WCAG 2 contrast ratio of two colours (1 to 21)."""
    hi, lo = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def readable(colour: QColor, background: QColor, minimum: float = 4.5) -> QColor:
    """``colour``, darkened on a light background (lightened on a dark one) until its
    contrast with ``background`` reaches ``minimum``; its hue is kept."""
    c = QColor(colour)
    darken = luminance(background) > 0.18
    for _ in range(24):
        if contrast_ratio(c, background) >= minimum:
            return c
        h, s, lightness, a = c.getHslF()
        c = QColor.fromHslF(
            max(h, 0.0), s, max(0.0, lightness - 0.05) if darken else min(1.0, lightness + 0.05), a
        )
    return QColor(DARK_TEXT) if darken else QColor("#ffffff")


def is_dark(palette: QPalette) -> bool:
    """Whether the palette draws text on a dark base (a dark theme)."""
    return palette.color(QPalette.Base).lightness() < 128


def legend_html() -> str:
    """The legend's rich text: a coloured swatch per highlighted source."""
    items = [
        f'<span style="background:{SOURCE_COLOURS["accepted"].name()}; '
        f'color:{DARK_TEXT}">&nbsp;accepted draft&nbsp;</span>',
        f'<span style="background:{SOURCE_COLOURS["correction"].name()}; '
        f'color:{DARK_TEXT}">&nbsp;target correction&nbsp;</span>',
        f'<span style="background:{SOURCE_COLOURS["forced"].name()}; '
        f'color:{DARK_TEXT}">&nbsp;forced by a grammar&nbsp;</span>',
        "<span>&nbsp;plain: target only&nbsp;</span>",
    ]
    return "&nbsp;&nbsp;".join(items)
