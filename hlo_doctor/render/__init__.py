"""Renderers: strings from results (the CLI prints them)."""
