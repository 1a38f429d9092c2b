#!/usr/bin/env bash
# Builds the libFuzzer targets in a clang tree (ASan + UBSan + libFuzzer) and runs each for a
# bounded time from its seed corpus in fuzz/corpus/<target>/ (read-only; new inputs go to a
# scratch copy). Prints one line per target; exit 1 on a crash, a leak, a timeout or an abort.
#   fuzz/run.sh [BUILD_DIR] [SECONDS_PER_TARGET]     (defaults: build-fuzz, 10)
# Exit 77 (ctest: skipped) when clang++ or libFuzzer (libfuzzer-14-dev) is missing.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$src/build-fuzz}"
seconds="${2:-10}"
targets=(fuzz_http_request fuzz_openai_request fuzz_chat_template fuzz_tokenizer fuzz_glm_parser fuzz_safetensors fuzz_config fuzz_exl3_metadata)
command -v clang++ >/dev/null || { echo "fuzz: SKIPPED: clang++ missing"; exit 77; }
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
  { echo "fuzz: SKIPPED: libFuzzer missing (apt-get install libfuzzer-14-dev)"; exit 77; }
t0=$(date +%s)
# Configured every time (quick once cached), so a tree made before a change of these options
# picks it up.
CC=clang CXX=clang++ cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFLASHTIER_FUZZ=ON -DFLASHTIER_CUDA=OFF \
  -DFLASHTIER_EXCLUDE="tests;tools;gpu-worker;cpu-expert-worker;gateway;deploy;exl3;ops;engine;ipc" \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined" >/dev/null
nice -n 10 cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -n 30 "$build/fuzz-build.log"; exit 1; }
echo "fuzz: built in $(( $(date +%s) - t0 )) s"
failed=0
for t in "${targets[@]}"; do
  work="$(mktemp -d /tmp/flashtier-fuzz.XXXXXX)"
  log="$work/log"
  # -rss_limit_mb: a target that balloons is a bug too; -timeout: one input over 5 s is a hang.
  if "$build/bin/$t" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$work/" "$work" "$src/fuzz/corpus/$t" >"$log" 2>&1; then
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')"
    echo "fuzz: $t: ok, $runs inputs in ${seconds} s (seeds $(ls "$src/fuzz/corpus/$t" | wc -l), corpus now $(ls "$work" | grep -vc '^log$'))"
  else
    failed=1
    echo "fuzz: $t: FAILED; the input that broke it is kept in $work:"
    grep -E "ERROR|SUMMARY|==[0-9]+==|Test unit written|uncaught|deadly signal" "$log" | head -n 12
    continue
  fi
  rm -rf "$work"
done
[ "$failed" = 0 ] && echo "fuzz: all ${#targets[@]} targets ran ${seconds} s each without a finding"
exit "$failed"
