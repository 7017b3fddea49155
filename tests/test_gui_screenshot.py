"""The README's screenshot, made by the same code as ``python -m gui.screenshot``,
from the real default pair: highlighted tokens, and the drafter chart under the answer."""

import pytest

pytest.importorskip("PySide6", reason="the GUI tests need PySide6 (pip install -e '.[test]')")


def _count(image, rgb: int) -> int:
    """Pixels of colour ``rgb``, sampling every other row and column."""
    return sum(
        1
        for x in range(0, image.width(), 2)
        for y in range(0, image.height(), 2)
        if image.pixel(x, y) == rgb
    )


@pytest.mark.real_pair
def test_screenshot_shows_a_highlighted_answer_and_its_chart(qapp, tmp_path, real_pair_paths):
    from PySide6.QtGui import QColor, QImage

    from gui.chat.chat_view import SOURCE_COLOURS
    from gui.chat.draft_chart import ACCEPTED
    from gui.screenshot import SIZE, render

    out = render(tmp_path / "shot.png", max_tokens=48, compare=False)
    image = QImage(str(out))
    assert (image.width(), image.height()) == SIZE
    accepted = SOURCE_COLOURS["accepted"].rgb()
    hits = _count(image, accepted)
    assert hits > 200, f"only {hits} sampled pixels in the accepted-token colour"
    assert QColor(accepted).name() == "#b9ebc3"
    bars = _count(image, ACCEPTED.rgb())  # the chart's accepted parts, scrolled into view
    assert bars > 50, (
        f"only {bars} sampled pixels in the chart's green: the drafter chart is not in view"
    )
