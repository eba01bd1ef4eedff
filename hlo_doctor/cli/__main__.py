"""``python -m hlo_doctor.cli``: the CLI, for commands that run hlo-doctor under a given interpreter."""

from __future__ import annotations

from hlo_doctor.cli import main

if __name__ == "__main__":
    main(prog_name="hlo-doctor")
