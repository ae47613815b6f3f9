#!/usr/bin/env bash
# The README's main command: on this machine, with the bundled tiny model and the CPU backend,
# measure the machine, plan, train the chosen plan for a few steps, set prediction beside
# measurement, and fold the measurement back into the profile for the next prediction. No
# download, no GPU. Output goes to ${STRATA_OUT:-out/demo}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target strata
strata=build/tools/strata/strata
out=${STRATA_OUT:-out/demo}
ranks=${STRATA_RANKS:-2}
steps=${STRATA_STEPS:-20}
mkdir -p "$out"

echo "== strata calibrate (quick): this machine's kernel, copy and collective rates"
$strata calibrate --backend cpu --quick --ranks "$ranks" --out "$out/profile.json"

echo "== strata plan: the tiny model on $ranks ranks of local-cpu"
$strata plan --model tiny --cluster local-cpu --train tiny --gpus "$ranks" --top 5 \
  --profile "$out/profile.json" --out "$out/plan.json"

echo "== strata run: the chosen plan for $steps steps, folded into the profile"
cp "$out/profile.json" "$out/profile.fed.json"
$strata run --plan "$out/plan.json" --model tiny --train tiny --cluster local-cpu \
  --steps "$steps" --profile "$out/profile.json" --update-profile "$out/profile.fed.json" \
  --out "$out/run"

echo "== strata compare: predicted beside measured"
$strata compare --predicted "$out/plan.json" --measured "$out/run/report.json"

echo "== the next prediction of the same plan, from the profile with the run folded in"
$strata predict --model tiny --train tiny --cluster local-cpu --plan "$out/plan.json" \
  --profile "$out/profile.fed.json" --json > "$out/predicted.fed.json"
$strata compare --predicted "$out/predicted.fed.json" --measured "$out/run/report.json" | sed -n 1,4p
