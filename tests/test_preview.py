"""A job body shown to a person (haqueue/preview.py): text as text, binary as hex, bounded."""

from __future__ import annotations

from haqueue.preview import Preview, preview, terminal_safe


def test_utf8_text_is_shown_as_itself_up_to_the_limit():
    assert preview("<b>héllo</b>\n\tok".encode()) == Preview("text", "<b>héllo</b>\n\tok", False, 17)
    assert preview(b"x" * 10, limit=4) == Preview("text", "xxxx", True, 10)


def test_bodies_with_control_bytes_or_invalid_utf8_are_binary_and_shown_as_hex():
    assert preview(b"\x1b[2Jgone") == Preview("binary", "1b 5b 32 4a 67 6f 6e 65", False, 8)
    assert preview(b"\xff\xfe", limit=4) == Preview("binary", "ff", True, 2)


def test_terminal_safe_escapes_what_a_terminal_would_act_on():
    assert terminal_safe("a\x1b[31mred\rb\n\tc\x07") == "a\\x1b[31mred\\rb\n\tc\\x07"
