#!/bin/sh
# bench/selftest.sh STORE LOADGEN: a seconds-long smoke test for ctest, so that CI covers
# ddprun-loadgen without running the benchmarks. Starts `STORE serve --port 0` on
# loopback, checks the loadgen's codec against it in both dialects (--self-test), then
# runs every op briefly and a 200-client barrier. Exits non-zero on the first failure.
set -eu
store=$1 loadgen=$2
out=$(mktemp)
"$store" serve --host 127.0.0.1 --port 0 >"$out" &
pid=$!
trap 'kill "$pid" 2>/dev/null; rm -f "$out"' EXIT
i=0
until grep -q "listening on" "$out"; do
  i=$((i + 1))
  if [ "$i" -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "selftest: $store did not start listening" >&2
    exit 1
  fi
  sleep 0.05
done
port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$out")
for proto in modern legacy; do
  "$loadgen" --self-test --addr "127.0.0.1:$port" --proto "$proto"
  for op in set get add; do
    "$loadgen" --addr "127.0.0.1:$port" --proto "$proto" --op "$op" --conns 8 --seconds 0.2 \
      --warmup 0
  done
  "$loadgen" --mode barrier --addr "127.0.0.1:$port" --proto "$proto" --conns 200 --timeout 30
done
