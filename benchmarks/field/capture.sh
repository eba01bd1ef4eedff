#!/usr/bin/env bash
# Capture one field loop: trace + optimized-HLO dump, op-stats table, and the "before" diagnosis.
#   benchmarks/field/capture.sh NAME TARGET OUTROOT [VAR=VALUE ...]
# e.g. benchmarks/field/capture.sh kh-gemma-v256k benchmarks/field/kerashub_gemma.py:step runs/field FIELD_VOCAB=256000
# Writes OUTROOT/runs/NAME (run dir), OUTROOT/hlo/NAME (--xla_dump_to), OUTROOT/stats/NAME.{txt,csv},
# OUTROOT/diagnose-before/NAME.{txt,md,json}. VENV (default .venv-field) holds the libraries;
# HLO_DOCTOR (default VENV/bin/hlo-doctor) is the hlo-doctor command, e.g. a pinned checkout:
#   HLO_DOCTOR="env PYTHONPATH=/path/to/checkout VENV/bin/python -m hlo_doctor.cli"
set -euo pipefail
name=$1; target=$2; root=$3; shift 3
# STEPS=N and WARMUP=N among the settings are capture.sh's own (the rest go to the target).
for a in "$@"; do case $a in STEPS=*) STEPS=${a#*=};; WARMUP=*) WARMUP=${a#*=};; esac; done
venv=${VENV:-.venv-field}
read -r -a hd <<< "${HLO_DOCTOR:-$venv/bin/hlo-doctor}"
mkdir -p "$root"/runs "$root"/hlo "$root"/stats "$root"/diagnose-before
rm -rf "$root/hlo/$name"
echo "$target $*" > "$root/stats/$name.env"
env "$@" XLA_FLAGS="--xla_dump_to=$root/hlo/$name --xla_dump_hlo_as_text ${XLA_FLAGS:-}" \
  "${hd[@]}" profile "$target" --steps "${STEPS:-3}" --warmup "${WARMUP:-1}" \
  --out "$root/runs/$name" --top 5 > "$root/stats/$name.profile.log" 2>&1
# keep the HLO text only (XLA:CPU also writes LLVM IR and object files there)
find "$root/hlo/$name" -type f ! -name '*.txt' -delete
env COLUMNS=240 "${hd[@]}" stats "$root/runs/$name" --top 30 > "$root/stats/$name.txt" 2>&1
"${hd[@]}" stats "$root/runs/$name" --format csv > "$root/stats/$name.csv" 2>/dev/null
d="$root/diagnose-before/$name"
"${hd[@]}" diagnose "$root/runs/$name" --format table > "$d.txt" 2>&1 || true
"${hd[@]}" diagnose "$root/runs/$name" --format md > "$d.md" 2>/dev/null || true
"${hd[@]}" diagnose "$root/runs/$name" --format json > "$d.json" 2>/dev/null || true
echo "$name: $(tail -1 "$d.txt")"
