"""A :class:`~hlo_doctor.render.html.model.Page` as one self-contained HTML file.

Everything the page needs is inside it: the style, the script, the Vega runtime and each chart's
compiled spec (as JSON in a ``<script type="application/json">``); a Content-Security-Policy forbids
loading anything, so the page works the same from ``file://``, an artifact store or offline. Every
chart is followed by the table of its numbers; each number cell keeps the unrounded value in
``data-value`` (sorting, and checks against the JSON the page was built from).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from hlo_doctor import __version__
from hlo_doctor.core.escape.html import html_text
from hlo_doctor.render.html import assets, vega
from hlo_doctor.render.html.model import Cell, Chart, Note, Page, Section, Table

__all__ = ["to_html"]


def _e(text: object) -> str:
    # Names from a capture: escaped, and their control and bidi characters shown.
    return html_text(text)


def _script_json(value: Any) -> str:
    """JSON safe inside ``<script>``: no ``</script>`` or ``<!--`` can end or bend the element."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


def _cell(c: Cell, numeric: bool) -> str:
    if not numeric:
        return f"<td>{_e(c.text)}</td>"
    value = "" if c.value is None else _e(json.dumps(c.value) if not isinstance(c.value, str) else c.value)
    return f'<td class="num" data-value="{value}">{_e(c.text)}</td>'


def _table(t: Table) -> str:
    heads = "".join(
        f'<th scope="col" aria-sort="none" data-numeric="{int(c.numeric)}"'
        + (f' data-key="{_e(c.key)}"' if c.key else "") + f'><button type="button">{_e(c.label)}</button></th>'
        for c in t.columns)
    body = "\n".join("<tr>" + "".join(_cell(c, col.numeric) for c, col in zip(row, t.columns, strict=True)) + "</tr>"
                     for row in t.rows)
    note = f'<p class="table-note">{_e(t.note)}</p>' if t.note else ""
    return (f'<div class="table-wrap"><table class="sortable" id="{_e(t.id)}"><caption>{_e(t.caption)}</caption>'
            f"<thead><tr>{heads}</tr></thead>\n<tbody>\n{body}\n</tbody></table>{note}</div>")


def _chart(c: Chart, draw: bool) -> str:
    spec = ""
    if draw:
        spec = (f'<script type="application/json" id="spec-{_e(c.id)}">{_script_json(vega.to_vega(c.spec))}'
                "</script>")
    attrs = f' data-spec="spec-{_e(c.id)}"' if draw else ""
    placeholder = "" if draw else f'<p class="note tone-warn">chart not drawn: {_e(vega.unavailable_reason())}</p>'
    return (f'<figure class="chart-figure" id="figure-{_e(c.id)}"><figcaption><h3>{_e(c.title)}</h3></figcaption>'
            f'<div class="chart" id="{_e(c.id)}" role="img" aria-label="{_e(c.alt)}"{attrs}></div>{placeholder}'
            f'<p class="alt">{_e(c.alt)}</p>{_table(c.table)}</figure>{spec}')


def _note(n: Note) -> str:
    tone = f" tone-{_e(n.tone)}" if n.tone else ""
    return f'<p class="note{tone}">{_e(n.text)}</p>'


def _section(s: Section, draw: bool) -> str:
    parts = [f'<section id="{_e(s.id)}"><h2>{_e(s.title)}</h2>']
    if s.missing:
        parts.append('<p class="note tone-warn">Charts this input cannot feed:</p><ul class="missing">'
                     + "".join(f"<li>{_e(m)}</li>" for m in s.missing) + "</ul>")
    for item in s.items:
        if isinstance(item, Chart):
            parts.append(_chart(item, draw))
        elif isinstance(item, Table):
            parts.append(_table(item))
        else:
            parts.append(_note(item))
    parts.append("</section>")
    return "\n".join(parts)


def _facts(facts: Iterable[tuple[str, str]]) -> str:
    rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
    return f'<dl class="facts">{rows}</dl>' if rows else ""


def to_html(page: Page, *, charts: bool | None = None) -> str:
    """The page as one HTML document. ``charts``: draw the charts (needs vl-convert; default: when
    installed); without, each chart's place says what to install and its table stays."""
    draw = vega.available() if charts is None else charts
    toc = "".join(f'<a href="#{_e(s.id)}">{_e(s.title)}</a>' for s in page.sections)
    verdict = (f'<p class="verdict tone-{_e(page.tone)}">{_e(page.verdict)}</p>' if page.verdict else "")
    scripts = [vega.bundle(), assets.SCRIPT] if draw and page.charts else [assets.SCRIPT]
    runtime = f"<script>{scripts[0]}</script>" if len(scripts) == 2 else ""
    drawn_by = f"; charts drawn by {vega.versions()}, inlined" if draw and page.charts else ""
    body = "\n".join(_section(s, draw) for s in page.sections)
    return f"""<!doctype html>
<html lang="en" data-kind="{_e(page.kind)}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta http-equiv="Content-Security-Policy" content="{_e(assets.csp(scripts))}">
<meta name="generator" content="hlo-doctor {_e(__version__)}">
<title>{_e(page.title)}</title>
<style>{assets.STYLE}</style>
</head>
<body>
<header><h1>{_e(page.title)}</h1>{verdict}{_facts(page.facts)}<nav class="toc">{toc}</nav></header>
<main>
{body}
</main>
<footer>Written by hlo-doctor {_e(__version__)}{_e(drawn_by)}. One file: no script, style or font is fetched;
it works offline and from file://. Every charted figure is also in the table below its chart.</footer>
{runtime}
<script>{assets.SCRIPT}</script>
</body>
</html>
"""
