#!/usr/bin/env bash
# Every accelerator check in one run: the whole loop at the defaults, the seed report's two hand
# fixes (both must FAIL), the seed's sampler at its own shape (batch 512), the fix verified in
# its upstream variant, with logprobs on, and at the serving level (--bench, the reference engine
# standing in for the benchmark); the seed sampler's capture diagnosed, its memory read, and
# `hlo-doctor memory` judged by the device allocator's own peak (memory_judge.py). Captures and
# reports land under OUTDIR/work (WORK: elsewhere); the archive
# OUTDIR/device-checks.tar.gz is rewritten after every step, so a run cut short still returns what
# it finished.
#   bash benchmarks/device/checks.sh OUTDIR [SECONDS_PER_STEP]
# SIZE_ARGS (e.g. "--vocab 4096 --batch 16 --rounds 2") shrinks the loop for a dry run on a CPU,
# BENCH_ARGS the reference engine's run in the --bench steps (default: its defaults, --max-tokens 64);
# ONLY (e.g. "device doctor verify-logprobs") runs a subset of the steps; BUDGETS the measuring budgets
# of budget-ab (default "10 60").
set -u
OUTDIR=${1:?usage: checks.sh OUTDIR [SECONDS_PER_STEP]}
LIMIT=${2:-150}
read -r -a SIZE <<< "${SIZE_ARGS:-}"
W=${WORK:-$OUTDIR/work}  # WORK: the captures elsewhere (where OUTDIR must hold only the archive)
mkdir -p "$W"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
PY=${PYTHON:-python3}
hd() { timeout "$LIMIT" "$PY" -c "import sys; from hlo_doctor.cli import main; sys.argv[0]='hlo-doctor'; main()" "$@"; }
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
archive() {
  find "$W" -name '__pycache__' -prune -exec rm -rf {} + 2>/dev/null
  tar -czf "$OUTDIR/device-checks.tar.gz.part" -C "$W" --exclude './tree-*' --exclude './jax-cache' --exclude './doctor/treatment-engine' . \
    && mv "$OUTDIR/device-checks.tar.gz.part" "$OUTDIR/device-checks.tar.gz"
}
step() {
  local name=$1; shift
  wanted "$name" || return 0
  local t0=$SECONDS
  echo "=== $name: hlo-doctor $*"
  hd "$@" > "$W/$name.txt" 2>&1
  local rc=$?
  tail -n 30 "$W/$name.txt"
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"
  archive
}
attempt_tree() {
  "$PY" -c "import sys; sys.path.insert(0, 'tests/verify'); from pathlib import Path; import hlo_doctor.engine as e; from seed_attempts import build_attempt; build_attempt('$1', Path(e.__file__).parent, Path('$W/tree-$1'))"
}

if wanted device; then
  { nvidia-smi -L 2>/dev/null; "$PY" -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, jax.devices())"; } | tee "$W/device.txt"
fi

step doctor doctor --out "$W/doctor" "${SIZE[@]}"
# The bundled captures diagnosed on the device: their fixes' promises replayed from their own HLO
# where the device is the capture's (a TPU v5e's, an H200's; elsewhere one line says why not), on a
# copy: diagnose keeps what it measures beside the capture.
for s in tpu_v5e_original tpu_v5e_seed_b512 gpu_h200_original gpu_h200_seed_b512; do
  wanted "replay-$s" && rm -rf "${W:?}/$s" && cp -r "sample_traces/$s" "$W/$s"
  step "replay-$s" diagnose "$W/$s" --format json
done
# Every program of the bundled captures of this device compiled again from its own HLO and run alone:
# what the replay can import, and each program's time beside the capture's device time for it.
if wanted replay-programs; then
  echo "=== replay-programs"
  backend=$("$PY" -c "import jax; print(jax.default_backend())" 2>/dev/null)
  caps=(); for s in tpu_v5e_original tpu_v5e_fixed tpu_v5e_seed_b512 tpu_v5e_seed_b512_fixed gpu_h200_original gpu_h200_seed_b512; do
    [ "${s%%_*}" = "$backend" ] && caps+=("sample_traces/$s")
  done
  timeout "$LIMIT" "$PY" benchmarks/device/replay_programs.py "${caps[@]}" --json "$W/replay-programs.json" > "$W/replay-programs.txt" 2>&1
  echo "=== replay-programs: exit $?"; cat "$W/replay-programs.txt"; archive
fi
# The doctor folder's fix timed by diagnose's own engine A/B (--remeasure: not verify's rounds, which
# it reuses otherwise) at the default measuring budget and at 60 s (HLO_DOCTOR_MEASURE_SECONDS): whether
# a longer budget decides on this device, and how its figure stands against verify's.
if wanted budget-ab; then
  for b in ${BUDGETS:-10 60}; do
    echo "=== budget-ab-$b: HLO_DOCTOR_MEASURE_SECONDS=$b hlo-doctor diagnose $W/doctor --remeasure"
    HLO_DOCTOR_MEASURE_SECONDS=$b hd diagnose "$W/doctor" --remeasure > "$W/budget-ab-$b.txt" 2>&1
    echo "=== budget-ab-$b: exit $?"
    HLO_DOCTOR_MEASURE_SECONDS=$b hd diagnose "$W/doctor" --format json -o "$W/budget-ab-$b.json" > /dev/null 2>&1
    grep -E "^(capture|fix |what-if)" "$W/budget-ab-$b.txt"; archive
  done
fi
wanted verify-runner-convert-removed && attempt_tree runner-convert-removed
step verify-runner-convert-removed verify --treatment "$W/tree-runner-convert-removed" --out "$W/verify-runner-convert-removed" "${SIZE[@]}"
step seed-b512 profile benchmarks/device/seed_sampler.py:step --steps 10 --warmup 2 --out "$W/seed-b512"
step seed-b512-fixed profile benchmarks/device/seed_sampler.py:step_fixed --steps 10 --warmup 2 --out "$W/seed-b512-fixed"
step diagnose-seed-b512 diagnose "$W/seed-b512" --format json
step memory-seed-b512 memory "$W/seed-b512" --format json
step memory-seed-b512-fixed memory "$W/seed-b512-fixed" --format json
# hlo-doctor memory against jax's memory_analysis() and the device allocator's own peak counter.
if wanted memory-judge; then
  echo "=== memory-judge"
  timeout "$LIMIT" "$PY" benchmarks/device/memory_judge.py "$W/memory-judge" > "$W/memory-judge.txt" 2>&1
  echo "=== memory-judge: exit $?"; cat "$W/memory-judge.txt"; archive
fi
step verify-upstream verify --fix bf16-greedy-sampler --variant upstream --out "$W/verify-upstream" "${SIZE[@]}"
step verify-logprobs verify --fix bf16-greedy-sampler --logprobs --out "$W/verify-logprobs" "${SIZE[@]}"
# The serving level with the reference engine standing in for the benchmark: one process per run.
BENCH="$PY -m hlo_doctor.cli engine run --format json --engine {tree} --output {out} ${BENCH_ARGS:---max-tokens 64}"
# One engine process per round warms up its whole menu (~36 s each on an H200 at the defaults): the
# full fix's runs share JAX's persistent compilation cache, so only the first two compile. The hand
# fix's runs do not (its off-menu compile is what they measure).
CACHE="env JAX_COMPILATION_CACHE_DIR=$W/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0"
step bench-full verify --fix bf16-greedy-sampler --bench "$CACHE $BENCH" --bench-rounds 5 --out "$W/bench-full" "${SIZE[@]}"
wanted bench-runner-convert-removed && attempt_tree runner-convert-removed
step bench-runner-convert-removed verify --treatment "$W/tree-runner-convert-removed" --bench "$BENCH" --rounds 2 \
  --out "$W/bench-runner-convert-removed" "${SIZE[@]}"
wanted verify-conditional-output-convert && attempt_tree conditional-output-convert
step verify-conditional-output-convert verify --treatment "$W/tree-conditional-output-convert" --out "$W/verify-conditional-output-convert" "${SIZE[@]}"
archive
ls -la "$OUTDIR"
