#!/bin/bash
# opbench's CUDA checks on a lent GPU machine (docs/gpu.md), prepared so that one call does them:
# the CUDA tests, then the CUDA model ports measured one (model, port) at a time.
#
#   bash scripts/gpu_check.sh wheels   # here: the pinned packages the GPU image lacks, into .whl/
#   bash scripts/gpu_check.sh run      # there, with .whl carried; what it writes lands in $OUT
#
# The GPU image has its own torch, numpy and onnxruntime; it lacks asv (the tests' fixtures import
# it) and has transformers 5, whose models differ from the pinned 4.57's: both travel as wheels.
set -u
WHEELS="asv==0.6.6 asv_runner==0.3.2 json5==0.17.3 Pympler==1.1 importlib_metadata==8.7.0 \
transformers==4.57.6 huggingface_hub==0.36.2 tokenizers==0.22.2"
case "${1:-}" in
wheels)
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >>.git/info/exclude
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .whl $WHEELS
    ;;
run)
    export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
    timeout 150 python3 -m pytest -q -p no:cacheprovider -n 4 -rs tests/workflows/test_backends.py \
        tests/cli/test_cli.py tests/cli/test_model.py tests/cli/test_model_as_users_bring_them.py \
        -k "cuda or tf32 or gpu" >"$OUT/pytest.log" 2>&1
    tail -n 6 "$OUT/pytest.log"
    # resnet18's cuda-tf32 port flagged 1 of 75 units, at a relu's kink (docs/gpu.md): 0 since the floor
    python3 -c "import numpy as np; from accuracy.workflows.model.zoo import example_inputs as e; np.savez('/tmp/r18.npz', **e('resnet18'))"
    timeout 170 python3 -c "import sys; from accuracy.cli.main import main; sys.exit(main())" model \
        accuracy.workflows.model.zoo:resnet18 --inputs /tmp/r18.npz --port cuda-tf32 --json >"$OUT/resnet18_tf32.json"
    echo "resnet18 cuda-tf32 exit $? (0: every unit within rounding)"; uptime
    # one process at a time: six at once (load 28 on 16 cores) ran BERT-base past its limit; alone,
    # on a fresh machine (every reference computed afresh), its cuda port ran past 360 s
    for model in ${MODELS:-bert_base}; do
        timeout "${MODEL_LIMIT:-400}" python3 scripts/measure_models.py --models $model --ports ${PORTS:-cuda} | tee -a "$OUT/models.md"
        uptime
    done
    ;;
*) echo "usage: bash scripts/gpu_check.sh wheels|run" >&2; exit 2 ;;
esac
