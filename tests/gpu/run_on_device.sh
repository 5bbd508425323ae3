#!/usr/bin/env bash
# The whole GPU check in one command, for a GPU machine (see GPU_TESTING.md):
#   1. environment: nvidia-smi, versions, cores;
#   2. produce a fresh dataset (COUNT pairs, all categories) with the producer;
#   3. gpu validation of it, timed, with the JSON report;
#   4. gpu validation of a dataset made on the CPU machine and carried over (CARRY, default
#      ./.gpu_carry, made there by `python tests/gpu/carry_dataset.py make`), after checking
#      it arrived intact: what a user who produces on a CPU box and validates on a GPU sees;
#   5. the GPU test suite (pytest tests/gpu -m gpu), if pytest is installed.
# Logs and the JSON report go to $OUT (default ./gpu_out); a summary table is printed last.
# Run from the repository root, with Warp and the checkout importable, e.g.
#   export PYTHONPATH=/root/stage:$PWD && bash tests/gpu/run_on_device.sh
# Knobs: COUNT (1000; 0 skips steps 2 and 3), JOBS (all cores), DATA (where the dataset goes, outside $OUT), CARRY,
# per-step time limits in seconds: T_PRODUCE (200), T_VALIDATE (160), T_PYTEST (150);
# DEVICE (cuda:0; "cpu" dry-runs the validation step on a machine without a GPU).
set -uo pipefail

OUT=${OUT:-$PWD/gpu_out}
DATA=${DATA:-${OUT_DIR:-/tmp/cudagen_gpu_dataset}}
COUNT=${COUNT:-1000}
JOBS=${JOBS:-$(nproc)}
DEVICE=${DEVICE:-cuda:0}
CARRY=${CARRY:-$PWD/.gpu_carry}
T_PRODUCE=${T_PRODUCE:-200}
T_VALIDATE=${T_VALIDATE:-160}
T_PYTEST=${T_PYTEST:-150}
mkdir -p "$OUT"
case ":${PYTHONPATH:-}:" in *":$PWD:"*) ;; *) export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" ;; esac

declare -a SUMMARY
step() {  # step NAME LIMIT LOG CMD...: run CMD with a time limit, tee its output to LOG, record the outcome
    local name=$1 limit=$2 log=$3; shift 3
    echo; echo "=== $name (limit ${limit}s) ==="
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    local took=$((SECONDS - t0))
    local status=ok
    [ "$rc" -eq 0 ] || status="rc=$rc"
    [ "$rc" -eq 124 ] && status="TIMEOUT"
    SUMMARY+=("$(printf '%-14s %-8s %6ss  %s' "$name" "$status" "$took" "$(tail -n 1 "$log" | cut -c1-110)")")
    return "$rc"
}

echo "=== environment ==="
{
    nvidia-smi || echo "nvidia-smi: not available"
    echo "cores: $(nproc); memory: $(free -g | awk '/Mem:/{print $2 " GiB"}')"
    python3 - <<'EOF'
import importlib, platform
print("python", platform.python_version())
for name in ("warp", "numpy", "pyarrow", "orjson", "xxhash", "tqdm", "pytest", "datasets", "huggingface_hub", "yaml"):
    try:
        mod = importlib.import_module(name)
        print(f"{name:16s}", getattr(mod, "__version__", getattr(getattr(mod, "config", None), "version", "?")))
    except Exception as exc:
        print(f"{name:16s} not importable ({type(exc).__name__})")
from cudagen_data import warp_boundary
wp = warp_boundary.warp()
print("warp CUDA devices:", wp.get_cuda_device_count(), [str(d) + " " + d.name + " sm_" + str(d.arch) for d in wp.get_cuda_devices()])
rt = wp._src.context.runtime
print("CUDA driver", rt.driver_version, "toolkit", rt.toolkit_version)
from cudagen_data.generators import categories
print("categories:", ", ".join(categories()))
EOF
} 2>&1 | tee "$OUT/environment.txt"

if [ "$COUNT" -gt 0 ]; then
    step produce "$T_PRODUCE" "$OUT/produce.log" \
        python3 tests/gpu/make_dataset.py --count "$COUNT" --workers "$JOBS" --output "$DATA"
    produced=$?
fi

if [ "$COUNT" -le 0 ]; then
    SUMMARY+=("$(printf '%-14s %-8s %6s   %s' produce skipped - "COUNT=0")")
elif [ "$produced" -eq 0 ]; then
    step gpu-validate "$T_VALIDATE" "$OUT/gpu_validate.log" \
        python3 -m cudagen_data.gpu "$DATA" --jobs "$JOBS" --report "$OUT/gpu_report.json" --device "$DEVICE" --no-progress
else
    SUMMARY+=("$(printf '%-14s %-8s %6s   %s' gpu-validate skipped - "no dataset (produce failed)")")
fi

if [ -f "$CARRY/dataset/manifest.json" ]; then
    step carried-check 60 "$OUT/carried_check.log" python3 tests/gpu/carry_dataset.py check --folder "$CARRY" \
        && step gpu-carried "$T_VALIDATE" "$OUT/gpu_validate_carried.log" \
            python3 -m cudagen_data.gpu "$CARRY/dataset" --jobs "$JOBS" --report "$OUT/gpu_report_carried.json" --device "$DEVICE" --no-progress
else
    SUMMARY+=("$(printf '%-14s %-8s %6s   %s' gpu-carried skipped - "no dataset carried from the CPU machine in $CARRY (see GPU_TESTING.md)")")
fi

if python3 -c "import pytest" 2>/dev/null; then
    step pytest-gpu "$T_PYTEST" "$OUT/pytest_gpu.log" \
        python3 -m pytest tests/gpu -m gpu -x -q -p no:cacheprovider
else
    SUMMARY+=("$(printf '%-14s %-8s %6s   %s' pytest-gpu skipped - "pytest is not installed here (stage it: see GPU_TESTING.md)")")
fi

for report in "$OUT/gpu_report.json" "$OUT/gpu_report_carried.json"; do
    [ -f "$report" ] || continue
    python3 - "$report" <<'EOF' | tee "${report%.json}_summary.txt"
import json, sys
d = json.load(open(sys.argv[1]))
env = d["environment"]
print()
print(f"=== gpu validation ({'carried from the CPU machine' if sys.argv[1].endswith('_carried.json') else 'made here'}): {env.get('device_name')} sm_{env.get('device_arch')}, Warp {env.get('warp')}, driver {env.get('cuda_driver')} ===")
print(f"{'category':14s} {'rows':>5s} {'passed':>6s} {'failed':>6s} {'drift':>5s}")
for cat, c in d["by_category"].items():
    print(f"{cat:14s} {c['rows']:5d} {c['passed']:6d} {c['failed']:6d} {c.get('drift', 0):5d}")
print(f"{'total':14s} {d['rows']:5d} {d['passed']:6d} {d['failed']:6d} {d['drift']:5d}   {d['seconds']} s, {d['rows_per_second']} rows/s, {d['jobs']} workers")
print("cuda text regenerated:", d["cuda_text"]["regenerated"], " compiled:", d["cuda_text"]["compiled"], " builds:", d["cuda_text"]["builds"])
print("tolerance:", d["tolerance"]["rows_by_kind"], " worst ratio:", d["worst"][0]["ratio"] if d["worst"] else None)
EOF
done

echo
echo "=== summary (logs and JSON report in $OUT) ==="
printf '%-14s %-8s %7s  %s\n' step status time "last line"
for line in "${SUMMARY[@]}"; do echo "$line"; done
