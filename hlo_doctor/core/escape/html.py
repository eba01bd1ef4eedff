"""HTML text and attribute values: the page's own escaping, control and bidi characters shown."""

from __future__ import annotations

import html as _html

from hlo_doctor.core.escape.text import visible

__all__ = ["html_text"]


def html_text(text: object) -> str:
    """``text`` safe as element content and as a quoted attribute value."""
    return _html.escape(visible(str(text)), quote=True)
