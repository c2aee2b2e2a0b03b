#!/bin/bash
# What this host's memory cgroup adds to a 4 KiB anonymous write fault: single_ops.c run in
# pairs, once in this shell's memory cgroup and once in the root one (the root memcg's charge is
# skipped by try_charge, in v4.x as in 6.x), ROUNDS times, alternating. Needs root (it moves its
# child into the root memcg: cgroup v1's memory hierarchy or the v2 root). Quiet host only.
#   bash memcg_ab.sh [ROUNDS]   (default 3); prints each run's medians, then the paired
#   differences of anon_write_fault_ns (this cgroup less the root's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3}
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
cc -O2 -o "$bin" "$here/single_ops.c"
if [ -f /sys/fs/cgroup/memory/cgroup.procs ]; then
    root_procs=/sys/fs/cgroup/memory/cgroup.procs
else
    root_procs=/sys/fs/cgroup/cgroup.procs
fi
echo "this cgroup: $(grep -E '(^0::|memory)' /proc/self/cgroup | head -1); $(uptime)"
diffs=()
for r in $(seq "$rounds"); do
    child=$("$bin" | awk '/^anon_write_fault_ns/ {print $3}')
    root=$(sh -c 'echo $$ > "$1"; exec "$2"' sh "$root_procs" "$bin" | awk '/^anon_write_fault_ns/ {print $3}')
    echo "round $r: anon_write_fault_ns this cgroup $child, root $root"
    diffs+=("$(echo "$child - $root" | bc -l)")
done
printf 'paired differences (ns): %s\n' "${diffs[*]}"
