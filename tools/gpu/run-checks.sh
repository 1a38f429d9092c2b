#!/usr/bin/env bash
# GPU checks in one call of the GPU machine.
#
#   tools/gpu/run-checks.sh pack        (here, no GPU needed) builds test_cuda, the checker and the
#                                       GPU benchmarks, and gathers them with the shared libraries they
#                                       need (ldd) into .gpu-bundle/ (ignored by git; carried to the GPU
#                                       machine with the working tree, whose tests/fixtures they read).
#   tools/gpu/run-checks.sh run [what]  (on the GPU machine) runs every `gpu` test, then
#                                       flashtier-check --backend cuda on every model fixture, then the
#                                       benchmarks; logs go to $OUT (or .gpu-bundle/out); a table ends it.
#                                       what: all (default), or a comma list of probe, tests,
#                                       check, stack, bench; initcheck, panel, tierdiag and bits only when named
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUNDLE=$ROOT/.gpu-bundle

pack() {
  set -e
  # Its own build tree with kernels for sm_90 only (the H200): half the bytes to carry. The
  # product builds sm_86 and sm_90 (CMakeLists.txt).
  local build=${BUILD_DIR:-$ROOT/build-gpu}
  cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
  # PACK="a b c" packs only those targets (the working tree and the bundle travel within 64 MiB).
  local targets=(test_cuda)
  local wanted=${PACK:-flashtier-check flashtier-bench-linear flashtier-bench-exl3 flashtier-bench-kda flashtier-bench-mla
                  flashtier-bench-engine flashtier-bench-tiers flashtier-local flashtier-gpu-worker flashtier-gateway flashtier-cpu-expert-worker}
  local known
  known=$(ninja -C "$build" -t targets all 2>/dev/null)
  for t in $wanted; do
    if grep -q "^$t:" <<<"$known"; then targets+=("$t"); fi
  done
  cmake --build "$build" --target "${targets[@]}" -j"$(nproc)"
  rm -rf "$BUNDLE/stage"
  mkdir -p "$BUNDLE/stage/bin" "$BUNDLE/stage/lib"
  for t in "${targets[@]}"; do
    strip -o "$BUNDLE/stage/bin/$t" "$build/bin/$t"
    # Shared libraries outside glibc/libstdc++/libgcc travel along (the GPU machine has neither
    # gRPC nor GoogleTest).
    ldd "$build/bin/$t" | awk '/=> \// {print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
        libcuda.so*|libcublas*) ;;  # the driver's and the toolkit's own
        *) cp -n "$lib" "$BUNDLE/stage/lib/" ;;
      esac
    done
  done
  tar -C "$BUNDLE/stage" -cJf "$BUNDLE/bundle.tar.xz" bin lib
  rm -rf "$BUNDLE/stage"
  ls -la "$BUNDLE/bundle.tar.xz"
}

probe() {
  echo "== probe"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
  ldd --version 2>&1 | head -1
  grep -m1 'model name' /proc/cpuinfo; nproc; free -g | head -2
  ls /usr/local/cuda/lib64/ 2>/dev/null | grep -E 'cublas|cudart' | head
  find / -xdev -name 'libcublasLt.so*' 2>/dev/null | head -3
  command -v cuobjdump ncu compute-sanitizer nvcc
  strings /lib/x86_64-linux-gnu/libstdc++.so.6 2>/dev/null | grep -c GLIBCXX_3.4.3
}

run() {
  local what=${1:-all}
  has() { [ "$what" = all ] || [[ ",$what," == *",$1,"* ]]; }
  named() { [[ ",$what," == *",$1,"* ]]; }  # sections "all" leaves out (long: name them)
  local out=${OUT:-$BUNDLE/out}
  mkdir -p "$out" "$BUNDLE/x"
  tar -C "$BUNDLE/x" -xJf "$BUNDLE/bundle.tar.xz"
  export LD_LIBRARY_PATH="$BUNDLE/x/lib:${LD_LIBRARY_PATH:-}"
  export FLASHTIER_SOURCE_DIR=$ROOT
  if [ -z "${FLASHTIER_CUBLASLT:-}" ]; then
    FLASHTIER_CUBLASLT=$(find / -xdev -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
    export FLASHTIER_CUBLASLT
  fi
  local bin=$BUNDLE/x/bin
  local table=()
  if has probe; then probe 2>&1 | tee "$out/probe.txt"; fi
  if has tests; then
    echo "== gpu tests"
    timeout "${TEST_TIMEOUT:-420}" "$bin/test_cuda" --gtest_brief=1 ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} \
      >"$out/test_cuda.txt" 2>&1
    local rc=$?
    grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/test_cuda.txt" | tail -40
    tail -3 "$out/test_cuda.txt"
    table+=("| gpu tests (test_cuda) | rc=$rc | $(grep -E '^\[  PASSED' "$out/test_cuda.txt" | head -1) $(grep -E '^\[  FAILED  \] [0-9]+ test' "$out/test_cuda.txt" | head -1) |")
  fi
  if has check && [ -x "$bin/flashtier-check" ]; then
    echo "== flashtier-check --backend cuda"
    for ref in "$ROOT"/tests/fixtures/glm5-*/reference.safetensors "$ROOT"/tests/fixtures/glm5-variants/*/reference.safetensors; do
      [ -f "$ref" ] || continue
      local dir name
      dir=$(dirname "$ref"); name=${dir#"$ROOT"/tests/fixtures/}
      echo "## $name" >>"$out/check.txt"
      timeout 120 "$bin/flashtier-check" --backend cuda --model "$dir/model" --reference "$ref" >"$out/check1.txt" 2>&1
      local rc=$?
      cat "$out/check1.txt" >>"$out/check.txt"
      table+=("| check $name | rc=$rc | $(tail -1 "$out/check1.txt") |")
    done
  fi
  if has stack && [ -x "$bin/flashtier-local" ]; then
    echo "== whole stack (flashtier-local --backend cuda)"
    timeout 300 python3 "$ROOT/tools/gpu/stack_check.py" "$bin" "$ROOT/tests/fixtures/glm5-tiny-chat" --backend cuda \
      >"$out/stack.txt" 2>&1
    local rc=$?
    cat "$out/stack.txt" | head -40
    table+=("| whole stack tiny-chat | rc=$rc | $(grep -c '^ok' "$out/stack.txt") ok, $(grep -c '^FAIL' "$out/stack.txt") failed |")
    # One gpu-worker per listed GPU (issue 14's launcher path, N = 1 on a one-GPU machine).
    timeout 300 python3 "$ROOT/tools/gpu/stack_check.py" "$bin" "$ROOT/tests/fixtures/glm5-tiny-chat" --backend cuda \
      -- --gpus 0 >"$out/stack-gpus0.txt" 2>&1
    rc=$?
    head -40 "$out/stack-gpus0.txt"
    table+=("| whole stack tiny-chat --gpus 0 | rc=$rc | $(grep -c '^ok' "$out/stack-gpus0.txt") ok, $(grep -c '^FAIL' "$out/stack-gpus0.txt") failed |")
  fi
  if has bench; then
    # BENCHES="a b": only those; <NAME>_ARGS (e.g. TIERS_ARGS for flashtier-bench-tiers): its flags;
    # BENCH_ENVS="A=x A=y": each benchmark once per assignment (A/B of a policy in one call);
    # "A=x,B=y" sets both in one run.
    for b in ${BENCHES:-flashtier-bench-linear flashtier-bench-exl3 flashtier-bench-kda flashtier-bench-mla flashtier-bench-engine flashtier-bench-tiers}; do
      [ -x "$bin/$b" ] || continue
      local key=${b#flashtier-bench-}
      local args_var="${key^^}_ARGS"
      local assign
      for assign in ${BENCH_ENVS:-NONE=}; do
        echo "== $b ${!args_var:-} ($assign)"
        echo "## $b ${!args_var:-} ($assign)" >>"$out/bench.txt"
        # shellcheck disable=SC2086
        # shellcheck disable=SC2086  # A=x,B=y: both assignments in one run
        timeout "${BENCH_TIMEOUT:-240}" env ${assign//,/ } "$bin/$b" ${!args_var:-} >"$out/bench1.txt" 2>&1
        local rc=$?
        cat "$out/bench1.txt" >>"$out/bench.txt"
        table+=("| $b ($assign) | rc=$rc | see bench.txt |")
        tail -30 "$out/bench1.txt"
      done
    done
  fi
  if named initcheck && command -v compute-sanitizer >/dev/null; then
    # Reads of device memory nothing wrote, in the engines on fresh memory (the poison tests'
    # first engines): INITCHECK_FILTER picks the tests.
    echo "== compute-sanitizer --tool initcheck"
    timeout "${INITCHECK_TIMEOUT:-150}" compute-sanitizer --tool initcheck --print-limit 20 "$bin/test_cuda" \
      --gtest_filter="${INITCHECK_FILTER:-*PoisonedMemory*:*OneWorkspace*}" >"$out/initcheck.txt" 2>&1
    local rc=$?
    grep -E "Uninitialized|^=========     at|ERROR SUMMARY" "$out/initcheck.txt" | head -40
    table+=("| initcheck | rc=$rc | $(grep -E 'ERROR SUMMARY' "$out/initcheck.txt" | tail -1) |")
  fi
  if named panel && [ -x "$bin/flashtier-bench-tiers" ]; then
    # The real-width tier agreement panel (issue 10): exact, fast, and a second exact engine.
    echo "== tier agreement panel"
    timeout "${PANEL_TIMEOUT:-420}" "$bin/flashtier-bench-tiers" --vram-budget-gb 24 --modes "" --agreement 1000 \
      --agreement-exact-again ${PANEL_ARGS:-} >"$out/panel.txt" 2>&1
    local rc=$?
    grep -E "KL|^\| (fast|exact)|panel pass" "$out/panel.txt"
    table+=("| panel | rc=$rc | $(grep -E 'mean KL' "$out/panel.txt" | head -1 | grep -oE 'mean KL [^;]*' ) |")
  fi
  if named tierdiag && [ -x "$bin/flashtier-bench-tiers" ]; then
    # Does an expert's result depend on where it is read from at the real widths? (docs/perf.md,
    # session 10: an engine with a VRAM cache gave other logits than one without.) The slot and
    # location tests, then a short panel with a cache-less exact engine, under lazy and eager
    # module loading.
    echo "== tier diagnosis"
    timeout 200 "$bin/test_cuda" --gtest_brief=1 \
      --gtest_filter='ExpertTierScale.*:Exl3GpuMoe.RealWidths*:ExpertTierTest.*' >"$out/tierdiag-tests.txt" 2>&1
    local rc=$?
    grep -E '^\[  (PASSED|FAILED) |Failure|differ|moved|Expected|Which is' "$out/tierdiag-tests.txt" | head -30
    table+=("| tier diagnosis tests | rc=$rc | $(grep -E '^\[  PASSED' "$out/tierdiag-tests.txt" | head -1) $(grep -E '^\[  FAILED  \] [0-9]+ test' "$out/tierdiag-tests.txt" | head -1) |")
    for mode in lazy eager; do
      local env=()
      [ "$mode" = eager ] && env=(env CUDA_MODULE_LOADING=EAGER)
      timeout 170 "${env[@]}" "$bin/flashtier-bench-tiers" --vram-budget-gb 24 --modes "" --agreement 80 --pool-gb 16 \
        --agreement-passes exact-nocache,exact >"$out/tierdiag-$mode.txt" 2>&1
      rc=$?
      grep -E "panel pass|^\| (fast|exact)" "$out/tierdiag-$mode.txt"
      table+=("| panel 80 positions, $mode loading | rc=$rc | $(grep -E '^\| exact-nocache' "$out/tierdiag-$mode.txt" | cut -d'|' -f2-4) |")
    done
    # A write past an allocation's end that lands in the cache slots would depend on the
    # address layout (hence on module loading): memcheck with padding after every allocation,
    # on a 5-layer model (2 MoE layers) with a cache.
    if command -v compute-sanitizer >/dev/null; then
      timeout 240 compute-sanitizer --tool memcheck --padding 65536 --print-limit 20 "$bin/flashtier-bench-tiers" \
        --vram-budget-gb 24 --layers 5 --modes "" --agreement 16 --pool-gb 8 --agreement-passes exact-nocache \
        >"$out/tierdiag-memcheck.txt" 2>&1
      rc=$?
      grep -E "Invalid|ERROR SUMMARY|^=========     at|panel pass|^\| (fast|exact)" "$out/tierdiag-memcheck.txt" | head -30
      table+=("| memcheck --padding, 5 layers | rc=$rc | $(grep -E 'ERROR SUMMARY' "$out/tierdiag-memcheck.txt" | tail -1) |")
    fi
  fi
  if named bits; then
    # Do an EXL3 engine's bits depend on the run? (session 12, H100 host: the exact-mode tier
    # tests and the fp16 poison test gave other bits than their references.) The same tests
    # twice over with programmatic launch as configured, off, with every launch blocking, and
    # under initcheck; each run's first differing rows go to the table.
    echo "== bit stability"
    local f=${BITS_FILTER:-ExpertTierTest.*:*PoisonedMemoryGivesTheFreshEngineBits*}
    local variant
    for variant in ${BITS_VARIANTS:-default pdl-off pdl-auto blocking}; do
      local env=(env)
      [ "$variant" = pdl-off ] && env+=(FLASHTIER_EXL3_PDL=off)
      [ "$variant" = pdl-auto ] && env+=(FLASHTIER_EXL3_PDL=auto)
      [ "$variant" = blocking ] && env+=(CUDA_LAUNCH_BLOCKING=1)
      timeout 200 "${env[@]}" "$bin/test_cuda" --gtest_brief=1 --gtest_repeat="${BITS_REPEAT:-2}" --gtest_filter="$f" \
        >"$out/bits-$variant.txt" 2>&1
      local rc=$?
      grep -E '^\[  FAILED  \] [A-Z]|first differing' "$out/bits-$variant.txt" | sort | uniq -c | head -20
      table+=("| bits $variant | rc=$rc | $(grep -cE '^\[  FAILED  \] [A-Z]' "$out/bits-$variant.txt") failures in ${BITS_REPEAT:-2} repeats |")
    done
    if [ "${BITS_INITCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
      timeout 240 compute-sanitizer --tool initcheck --print-limit 20 "$bin/test_cuda" \
        --gtest_filter="${BITS_INITCHECK_FILTER:-ExpertTierTest.Poisoned*:*PoisonedMemoryGivesTheFreshEngineBits/fp16}" \
        >"$out/bits-initcheck.txt" 2>&1
      local rc=$?
      grep -E "Uninitialized|^=========     at|ERROR SUMMARY|FAILED  \] [A-Z]" "$out/bits-initcheck.txt" | head -30
      table+=("| bits initcheck | rc=$rc | $(grep -E 'ERROR SUMMARY' "$out/bits-initcheck.txt" | tail -1) |")
    fi
  fi
  rm -f "$out/check1.txt" "$out/bench1.txt"
  echo
  echo "| what | status | result |"
  echo "|---|---|---|"
  printf '%s\n' "${table[@]}"
}

case "${1:-}" in
  pack) pack ;;
  run) shift; run "$@" ;;
  *) sed -n 2,14p "$0"; exit 2 ;;
esac
