"""Every renderer, one module (or package) per subject: ``render.<subject>.to_<format>(result)``.

- :mod:`~hlo_doctor.render.diagnosis`: a diagnosis as terminal, JSON, Markdown, SARIF.
- :mod:`~hlo_doctor.render.gate`: a gate result as JSON, Markdown, JUnit XML, text.

Renderers return text (or a rich renderable); only :mod:`hlo_doctor.cli` prints. Shared formatters
live in :mod:`hlo_doctor.core.format`.
"""
