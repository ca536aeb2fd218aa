#!/bin/bash
# Worker for the failure-latency benchmark, started by ddprun or torchrun with K local
# ranks. Rank 0 waits until every peer has armed its TERM trap, stamps the time and exits 1;
# the peers stamp the time at which SIGTERM reaches them. $EPOCHREALTIME is a bash builtin,
# so no process start sits between the event and its timestamp.
# Usage: fail_worker.sh DIR K
dir=$1 k=$2
if [ "$LOCAL_RANK" = 0 ]; then
  for ((i = 1; i < k; i++)); do
    until [ -e "$dir/ready.$i" ]; do sleep 0.002; done
  done
  echo "$EPOCHREALTIME" > "$dir/exit"
  exit 1
fi
trap 'echo "$EPOCHREALTIME" > "$dir/sig.$LOCAL_RANK"; kill "$pid" 2>/dev/null; exit 143' TERM
sleep 60 &
pid=$!
touch "$dir/ready.$LOCAL_RANK"
wait "$pid"
