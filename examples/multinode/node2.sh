#!/bin/bash
# Node 2 of 4 (node rank 1): the seed's torchrun script with the word torchrun
# replaced by ddprun. Run node1.sh..node4.sh on four machines (any order; each waits for
# the others and says whom it is waiting for every few seconds).
#   MASTER_ADDR: the address of the machine running node1.sh, which hosts the c10d
#                rendezvous store (it matches the endpoint host, or set is_host=1 in
#                --rdzv-conf); MASTER_PORT: a free port there (29400 is c10d's default).
# Workers get RANK = node rank because every node gives --node_rank (ddprun honours it
# under c10d; torchrun ignores it there). See docs/multinode.md.
set -euo pipefail
export MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of node 1}
export MASTER_PORT=${MASTER_PORT:-29400}
HERE=$(cd "$(dirname "$0")" && pwd)
ddprun \
  --nnodes=4 \
  --nproc_per_node=1 \
  --node_rank=1 \
  --rdzv_id=bert_job_n1n3_01 \
  --rdzv_backend=c10d \
  --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" \
  "${TRAIN_SCRIPT:-$HERE/../ddp_train.py}" "$@"
