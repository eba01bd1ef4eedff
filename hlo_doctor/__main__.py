"""``python -m hlo_doctor``: the same command line as ``hlo-doctor`` (an MCP client's config can name the
interpreter instead of the script)."""

from hlo_doctor.cli import main

if __name__ == "__main__":
    main(prog_name="hlo-doctor")
