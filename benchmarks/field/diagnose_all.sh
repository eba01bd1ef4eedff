#!/usr/bin/env bash
# Diagnose every capture under OUTROOT/runs into OUTROOT/DEST/NAME.{txt,json} (and .md with MD=1)
# (DEST default diagnose-before), with HLO_DOCTOR (see capture.sh), e.g. a pinned checkout:
#   HLO_DOCTOR="env PYTHONPATH=/path/to/old-checkout .venv-field/bin/python -m hlo_doctor.cli" \
#     benchmarks/field/diagnose_all.sh runs/field diagnose-before
set -uo pipefail
root=$(realpath "$1"); dest=$root/${2:-diagnose-before}
# Run from / so that `python -m` finds the checkout named in PYTHONPATH, not one in the cwd.
cd /
venv=${VENV:-.venv-field}
read -r -a hd <<< "${HLO_DOCTOR:-$venv/bin/hlo-doctor}"
mkdir -p "$dest"
for run in "$root"/runs/*/; do
  name=$(basename "$run")
  "${hd[@]}" diagnose "$run" --format table > "$dest/$name.txt" 2>&1
  [ -n "${MD:-}" ] && "${hd[@]}" diagnose "$run" --format md > "$dest/$name.md" 2>/dev/null
  "${hd[@]}" diagnose "$run" --format json > "$dest/$name.json" 2>/dev/null
  echo "$name: $(grep -c . "$dest/$name.txt") lines; $(grep -E '^[0-9]+ findings?|^no findings' "$dest/$name.txt" | head -1)"
done
