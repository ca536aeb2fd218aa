#!/bin/bash
# The static-backend variant (torchrun's default backend): fixed node count, explicit
# node ranks, node rank 0 hosts the rendezvous store at MASTER_ADDR:MASTER_PORT.
#   NODE_RANK=0 MASTER_ADDR=10.0.0.1 ./static_node.sh      # on the first machine
#   NODE_RANK=1 MASTER_ADDR=10.0.0.1 ./static_node.sh      # on the second, and so on
# NNODES (default 4) and NPROC (default 1) may differ per node for NPROC: global ranks
# follow node ranks with each node's own --nproc_per_node.
set -euo pipefail
: "${NODE_RANK:?set NODE_RANK (0 on the machine at MASTER_ADDR)}"
: "${MASTER_ADDR:?set MASTER_ADDR to the address of node rank 0}"
HERE=$(cd "$(dirname "$0")" && pwd)
ddprun \
  --nnodes="${NNODES:-4}" \
  --nproc_per_node="${NPROC:-1}" \
  --node_rank="$NODE_RANK" \
  --master_addr="$MASTER_ADDR" \
  --master_port="${MASTER_PORT:-29500}" \
  "${TRAIN_SCRIPT:-$HERE/../ddp_train.py}" "$@"
