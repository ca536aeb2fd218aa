#!/bin/bash
# Tries node1.sh..node4.sh on ONE machine: four agents on the loopback addresses
# 127.0.0.1-127.0.0.4 (--local-addr makes each advertise its own), c10d endpoint on
# 127.0.0.1. Workers use PYTHON_EXEC (default /usr/bin/python3, which has PyTorch on
# Debian 12).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHON_EXEC=${PYTHON_EXEC:-/usr/bin/python3}
export MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29400}
pids=()
for i in 1 2 3 4; do
  PET_LOCAL_ADDR=127.0.0.$i "$HERE/node$i.sh" --epochs 1 "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
