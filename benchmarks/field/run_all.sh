#!/usr/bin/env bash
# Rerun the whole field set into OUTROOT: captures (trace + HLO dump + op stats + diagnosis), the
# what-if measurements, the compile counts and OUTROOT/README.md.
#   benchmarks/field/run_all.sh OUTROOT
# Environment: VENV (default .venv-field), HLO_DOCTOR (see capture.sh), ONLY=name,name
# (a subset of loops.txt), SKIP_CAPTURE=1, SKIP_WHATIF=1, ROUNDS (default 12). Every what-if run
# also times the baseline against itself (variant a/a): the noise floor of its savings.
set -euo pipefail
root=$(realpath -m "$1")
here=$(cd "$(dirname "$0")" && pwd)
venv=${VENV:-.venv-field}
mkdir -p "$root/whatif" "$root/logs"
cd "$here/../.."
grep -v '^#' "$here/loops.txt" | while read -r name loop rest; do
  [ -z "$name" ] && continue
  settings=""; variants=""
  for word in $rest; do
    case $word in variants=*) variants=${word#variants=};; *) settings="$settings $word";; esac
  done
  if [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
  # shellcheck disable=SC2086
  if [ -z "${SKIP_CAPTURE:-}" ]; then
    "$here/capture.sh" "$name" "benchmarks/field/$loop:step" "$root" $settings < /dev/null
  fi
  if [ -z "${SKIP_WHATIF:-}" ] && [ "$variants" != none ]; then
    env $settings "$venv/bin/python" "$here/whatif.py" "benchmarks/field/$loop" \
      --rounds "${ROUNDS:-12}" --variants "$variants" --json "$root/whatif/$name.json" --aa \
      > "$root/logs/whatif-$name.log" 2>&1 < /dev/null
    grep -v -i warn "$root/logs/whatif-$name.log" | tail -n +2
  fi
done
"$venv/bin/python" "$here/compiles.py" "$root"/runs/* > "$root/compiles.txt"
"$venv/bin/python" "$here/index.py" "$root" > "$root/README.md"
