"""The README's screenshot, made by the same code as ``python -m gui.screenshot``,
from the real default pair."""

import pytest

pytest.importorskip("PySide6", reason="the GUI tests need PySide6 (pip install -e '.[test]')")


@pytest.mark.real_pair
def test_screenshot_shows_a_highlighted_answer(qapp, tmp_path, real_pair_paths):
    from PySide6.QtGui import QColor, QImage

    from gui.chat_view import SOURCE_COLOURS
    from gui.screenshot import SIZE, render

    out = render(tmp_path / "shot.png", max_tokens=48, compare=False)
    image = QImage(str(out))
    assert (image.width(), image.height()) == SIZE
    accepted = SOURCE_COLOURS["accepted"].rgb()
    hits = sum(
        1 for x in range(0, image.width(), 2) for y in range(0, image.height(), 2) if image.pixel(x, y) == accepted
    )
    assert hits > 200, f"only {hits} sampled pixels in the accepted-token colour"
    assert QColor(accepted).name() == "#b9ebc3"
