#!/usr/bin/env bash
# Every GPU check and benchmark, in order of importance, each stage bounded in time, for a lent GPU machine
# with minutes to spare:  bench/gpu_session.sh OUT_DIR [SECONDS]
#
# Stages: versions and the GPU; bench.gpu_check (every model, solver and metric on the GPU against float64 CPU
# references); bench_operators (training steps, the CKB on the full grid, the Triton scans alone); bench_trainer
# --device cuda (ours against neuraloperator's Trainer, ROUNDS rounds, default 1: two rounds ran past 120 s on an
# H200); the test suite on the GPU machine (the CLI runs' default device is cuda there); bench_models --device
# cuda --eager; each within what is left of SECONDS (default 480).
# Writes OUT_DIR/log.txt (everything), OUT_DIR/tests.txt, OUT_DIR/failures.txt (each failed test's traceback, as it
# fails) and the benchmarks' JSON (bench-gpu-*.json). CIRCUITOP_COMMIT, if set, must be the full commit.
# Run from the checkout's root, with the package's dependencies importable (PYTHONPATH). TESTS (default:
# tests) and MODELS (default: every registry model) narrow the last two stages.
set -u
out=${1:?usage: bench/gpu_session.sh OUT_DIR [SECONDS]}
budget=${2:-480}
# the results record this commit (the copy's .git may be stale): a short one would match no test's HEAD
if [[ -n ${CIRCUITOP_COMMIT:-} && ! $CIRCUITOP_COMMIT =~ ^[0-9a-f]{40}$ ]]; then
    echo "CIRCUITOP_COMMIT: expected the full 40-character commit, found '$CIRCUITOP_COMMIT'" >&2
    exit 2
fi
mkdir -p "$out"
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONWARNINGS=ignore
export TORCH_EXTENSIONS_DIR=$PWD/.torch_extensions TORCHINDUCTOR_CACHE_DIR=$PWD/.torchinductor
exec > >(tee -a "$out/log.txt") 2>&1

stage() {  # stage NAME LIMIT_S COMMAND...: run it under LIMIT_S (less if the budget is nearly spent)
    local name=$1 limit=$2 start=$SECONDS left
    shift 2
    left=$((budget - SECONDS))
    ((left < limit)) && limit=$left
    if ((limit < 15)); then echo "== $name: skipped, ${left} s of the budget left"; return; fi
    echo "== $name (at most ${limit} s, $(date +%T))"
    timeout -k 5 "$limit" "$@"
    echo "== $name: exit $? after $((SECONDS - start)) s"
}

echo "== versions"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, numpy, triton; print('torch', torch.__version__, 'numpy', numpy.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python3 -c "import neuralop, ncps, xarray, dask, h5py; print('neuralop', neuralop.__version__, 'xarray', xarray.__version__, 'dask', dask.__version__)"
c++ --version | head -n 1
python3 -c "import torch; print([l.strip() for l in torch.__config__.show().splitlines() if 'CXX_COMPILER' in l or 'GCC' in l][:2])"
# the native CPU kernels (the float64 references run through them) build while the GPU stages start
python3 -m operators.cli build > "$out/build.txt" 2>&1 &
build=$!

stage gpu_check 120 python3 -m bench.gpu_check --device cuda
stage operators 90 python3 -m bench --only bench_operators --json "$out/bench-gpu-operators.json"
stage trainer 180 python3 -m bench.bench_trainer --device cuda --rounds "${ROUNDS:-1}" --json "$out/bench-gpu-trainer.json"
wait "$build"  # (a bare wait would also wait for the tee above)
# one line per test as it ends (a stage stopped at its limit still says which failed), the summary at the end
# shellcheck disable=SC2086
# each failure's traceback goes to failures.txt as it happens: a stage cut at its limit prints no summary
export CIRCUITOP_FAILURES="$out/failures.txt"
stage tests 400 python3 -m pytest -v -n 14 -p no:cacheprovider \
    -p bench.pytest_failures --timeout 120 -rfE ${TESTS:-tests} -o addopts="" --junitxml="$out/tests.xml" \
    > "$out/tests.txt" 2>&1
grep -E "^== |FAILED|ERROR" "$out/tests.txt" | tail -n 60
tail -n 3 "$out/tests.txt"
# shellcheck disable=SC2086
stage models 100 python3 -m bench.bench_models --device cuda --eager ${MODELS:+--only $MODELS} \
    --json "$out/bench-gpu-models.json"
echo "== done after $SECONDS s"
