#!/bin/bash
# Worker of the kill -9 orphan benchmark (bench.py): writes its pid to $1/w.$LOCAL_RANK and
# sleeps; local rank 0 first starts a daemon in its own session (setsid), which writes its
# pid to $1/daemon. Each file appears whole (written, then renamed).
d=$1
if [ "$LOCAL_RANK" = 0 ]; then
  setsid /bin/bash -c 'echo $$ > "$0/daemon.tmp" && mv "$0/daemon.tmp" "$0/daemon"; exec sleep 60' "$d" &
fi
echo $$ > "$d/w.tmp.$LOCAL_RANK" && mv "$d/w.tmp.$LOCAL_RANK" "$d/w.$LOCAL_RANK"
exec sleep 60
