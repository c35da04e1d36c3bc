#!/bin/bash
# usage: [AX=path/to/ax] poolcost.sh MODE(pools|shared) POOLS TYPES_PER_POOL
# The idle cost of worker pools (docs/decisions/pools-cost.md): starts
# `ax server` with monitoring, provisions it (--pools for MODE pools), runs POOLS
# workers (pools: each serving its own TYPES_PER_POOL probe types; shared: each
# serving all of them), waits until they joined, then prints the CPU of the server
# and of worker 0 over 30 s (/proc/<pid>/stat), the server RSS and /jsz consumers.
set -u
AX=${AX:-ax}
MODE=$1; NP=$2; NT=$3
D=$(mktemp -d); PORT=$((20000 + RANDOM % 20000)); MON=$((PORT+1))
URL=nats://127.0.0.1:$PORT
$AX server --name cost --listen 127.0.0.1:$PORT --monitor 127.0.0.1:$MON --data $D/data > $D/server.log 2>&1 &
SRV=$!
for i in $(seq 50); do grep -q serving $D/server.log && break; sleep 0.2; done
if [ $MODE = pools ]; then $AX provision --server $URL --pools >/dev/null 2>&1; else $AX provision --server $URL >/dev/null 2>&1; fi
ALL=""
for p in $(seq 0 $((NP-1))); do for t in $(seq 0 $((NT-1))); do ALL="$ALL,p${p}t${t}"; done; done
ALL=${ALL#,}
WPIDS=()
for p in $(seq 0 $((NP-1))); do
  TYPES=""
  for t in $(seq 0 $((NT-1))); do TYPES="$TYPES,p${p}t${t}"; done
  TYPES=${TYPES#,}
  [ $MODE = shared ] && TYPES=$ALL
  $AX worker --server $URL --id w$p --probe-journal $D/j$p --probe-types $ALL --types $TYPES > $D/w$p.log 2>&1 &
  WPIDS+=($!)
done
for i in $(seq 600); do
  n=$(grep -l worker_started $D/w*.log 2>/dev/null | wc -l)
  [ "$n" = "$NP" ] && break; sleep 1
done
echo "joined after ${i}s" >&2
sleep 10
ticks() { awk '{print $14+$15}' /proc/$1/stat; }
S0=$(ticks $SRV); W0=$(ticks ${WPIDS[0]}); T0=$(date +%s.%N)
sleep 30
S1=$(ticks $SRV); W1=$(ticks ${WPIDS[0]}); T1=$(date +%s.%N)
CONS=$(curl -s "http://127.0.0.1:$MON/jsz" | python3 -c 'import json,sys; print(json.load(sys.stdin)["consumers"])')
RSS=$(awk '/VmRSS/{print $2}' /proc/$SRV/status)
echo "mode=$MODE pools=$NP types_per_pool=$NT workers=${#WPIDS[@]} consumers=$CONS server_cpu_ms_per_10s=$(python3 -c "print(round(($S1-$S0)*10*1000/100/($T1-$T0)))") worker0_cpu_ms_per_10s=$(python3 -c "print(round(($W1-$W0)*10*1000/100/($T1-$T0)))") server_rss_kib=$RSS"
for p in "${WPIDS[@]}"; do kill -INT $p; done
wait "${WPIDS[@]}" 2>/dev/null
kill -INT $SRV; wait $SRV 2>/dev/null
rm -rf $D
