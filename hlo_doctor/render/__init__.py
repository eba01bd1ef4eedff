"""Every renderer, one module (or package) per subject: ``render.<subject>.to_<format>(result)``; the
commands pick one from :mod:`~hlo_doctor.render.registry` by (subject, format).

- :mod:`~hlo_doctor.render.diagnosis`: a diagnosis as terminal, JSON, Markdown, SARIF, concise lines, GitHub annotations.
- :mod:`~hlo_doctor.render.gate`: a gate result as JSON, Markdown, JUnit XML, text, GitHub annotations.
- :mod:`~hlo_doctor.render.verify`, :mod:`~hlo_doctor.render.verify_target` and :mod:`~hlo_doctor.render.doctor`:
  a verify report of two engine trees, of ``verify --target``, and the doctor's report.
- :mod:`~hlo_doctor.render.locations` and :mod:`~hlo_doctor.render.github`: source paths relative to a
  checkout, and GitHub workflow commands, for both.

Renderers return text (or a rich renderable); only :mod:`hlo_doctor.cli` prints. Shared formatters
live in :mod:`hlo_doctor.core.format`.
"""
