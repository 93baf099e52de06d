#!/usr/bin/env bash
# The device script: on a lent GPU machine (the device tool), in the repository root. Installs the
# wheels carried in .whl/ (fairseq and what it needs that the machine lacks: it reaches no
# registry), data-bin/ carried too, then runs benchmarks/device.py, results under $OUT. Run it as
#   FAIRSEQ_ALIBI_COMMIT=<the sent commit> bash benchmarks/device.sh   (the copy's .git may be stale)
#   echo /.whl/ >> .git/info/exclude; python3 -m pip download --no-deps --only-binary=:all: \
#     --python-version 3.12 ... -d .whl fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 bitarray cffi pycparser
#   (antlr4-python3-runtime 4.9.3 as a wheel built here: pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3)
set -euo pipefail
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
fi
export PYTHONPATH=${PYTHONPATH:-$PWD}
exec python3 benchmarks/device.py "$@"
