"""Self-contained HTML reports with charts, and the same charts as static images for Markdown.

- :mod:`~hlo_doctor.render.html.pages`: the kinds of page (capture, diagnosis, memory, verify, doctor, gate),
  each built from the JSON documents hlo-doctor writes;
- :mod:`~hlo_doctor.render.html.step`, :mod:`~.ops`, :mod:`~.memory`, :mod:`~.verify`, :mod:`~.gate`: their sections;
- :mod:`~hlo_doctor.render.html.charts`: the Vega-Lite specs; :mod:`~.vega`: vl-convert (compile,
  the inlined runtime, SVG/PNG export); :mod:`~.document`: the page as one HTML file;
  :mod:`~.markdown`: Markdown with the charts as image files.

Charts need the ``report`` extra (vl-convert-python); without it a page keeps every table and says
what to install where each chart would be.
"""

from __future__ import annotations

from hlo_doctor.render.html.document import to_html
from hlo_doctor.render.html.model import Page
from hlo_doctor.render.html.pages import (
           capture_page,
           diagnosis_page,
           doctor_page,
           gate_page,
           memory_page,
           verify_page,
)
from hlo_doctor.render.html.vega import INSTALL_HINT, available

__all__ = ["INSTALL_HINT", "Page", "available", "capture_page", "diagnosis_page", "doctor_page", "gate_page",
           "memory_page", "to_html", "verify_page"]
