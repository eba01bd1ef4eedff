"""Bundled rules: loaded by path, one file per rule."""
