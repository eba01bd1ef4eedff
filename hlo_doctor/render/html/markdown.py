"""A page as Markdown with its charts as image files (SVG or PNG, drawn by vl-convert without a
browser): for a pull request, a repository or any place that cannot run a page.

The renderer returns the text and the images (name -> bytes); the command writes both, the images in
a folder beside the Markdown that the links name relatively.
"""

from __future__ import annotations

from hlo_doctor.core.escape.markdown import md_cell
from hlo_doctor.render.html import vega
from hlo_doctor.render.html.model import Cell, Chart, Note, Page, Table

__all__ = ["IMAGE_FORMATS", "to_markdown"]

IMAGE_FORMATS = ("svg", "png")


def _md(text: str) -> str:
    # Titles, labels and cells hold names from the capture: no markup, raw HTML or line break from them.
    return md_cell(text)


def _table(t: Table) -> str:
    head = "| " + " | ".join(_md(c.label) for c in t.columns) + " |"
    rule = "|" + "|".join("---:" if c.numeric else "---" for c in t.columns) + "|"

    def cell(c: Cell) -> str:
        return _md(c.text)

    rows = ["| " + " | ".join(cell(c) for c in row) + " |" for row in t.rows]
    note = f"\n\n_{_md(t.note)}_" if t.note else ""
    return f"**{_md(t.caption)}**\n\n" + "\n".join([head, rule, *rows]) + note


def _image(c: Chart, fmt: str) -> bytes:
    return vega.to_svg(c.spec).encode() if fmt == "svg" else vega.to_png(c.spec)


def to_markdown(page: Page, *, image_dir: str, image_format: str = "svg",
                charts: bool | None = None) -> tuple[str, dict[str, bytes]]:
    """(Markdown, {file name: image bytes}); links point at ``image_dir/<chart id>.<format>``.

    ``charts`` False (or vl-convert missing) writes no images: each chart's place says what to install,
    and its table stays.
    """
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"unknown image format {image_format!r}; known: {', '.join(IMAGE_FORMATS)}")
    draw = vega.available() if charts is None else charts
    images: dict[str, bytes] = {}
    out = [f"# {_md(page.title)}", ""]
    if page.verdict:
        out += [f"**{_md(page.verdict)}**", ""]
    out += [f"- {_md(k)}: {_md(v)}" for k, v in page.facts] + [""]
    for section in page.sections:
        out += [f"## {_md(section.title)}", ""]
        if section.missing:
            out += ["Charts this input cannot feed:", ""] + [f"- {_md(m)}" for m in section.missing] + [""]
        for item in section.items:
            if isinstance(item, Chart):
                out += [f"### {_md(item.title)}", ""]
                if draw:
                    name = f"{item.id}.{image_format}"
                    images[name] = _image(item, image_format)
                    out += [f"![{_md(item.alt)}]({image_dir}/{name})", ""]
                else:
                    out += [f"_chart not drawn: {_md(vega.unavailable_reason())}_", ""]
                out += [_md(item.alt), "", _table(item.table), ""]
            elif isinstance(item, Table):
                out += [_table(item), ""]
            elif isinstance(item, Note):
                out += [f"**{_md(item.text)}**" if item.tone == "fail" else _md(item.text), ""]
    return "\n".join(out).rstrip() + "\n", images
