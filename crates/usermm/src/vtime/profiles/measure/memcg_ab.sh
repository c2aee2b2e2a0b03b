#!/bin/bash
# What this host's memory cgroup adds to a 4 KiB anonymous write fault, and that it adds
# nothing to a zero-page read fault or a munmap: single_ops.c and munmap_per_page.c run in
# pairs, once in this shell's memory cgroup and once in the root one (the root memcg's charge
# is skipped by try_charge, in v4.x as in 6.x), ROUNDS times, alternating. Needs root (it moves
# its child into the root memcg: cgroup v1's memory hierarchy or the v2 root). Quiet host only.
#   bash memcg_ab.sh [ROUNDS]   (default 3); prints each round's medians (write fault, zero-page
#   read fault, in ns; munmap in ns a page), then the paired differences of the write fault
#   (this cgroup less the root's).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3}
ops=$(mktemp)
unmap=$(mktemp)
trap 'rm -f "$ops" "$unmap"' EXIT
cc -O2 -o "$ops" "$here/single_ops.c"
cc -O2 -o "$unmap" "$here/munmap_per_page.c"
if [ -f /sys/fs/cgroup/memory/cgroup.procs ]; then
    root_procs=/sys/fs/cgroup/memory/cgroup.procs
else
    root_procs=/sys/fs/cgroup/cgroup.procs
fi
in_root() { sh -c 'echo $$ > "$1"; shift; exec "$@"' sh "$root_procs" "$@"; }
# One side's figures: "write read munmap".
side() {
    local o m
    o=$("$@" "$ops")
    m=$("$@" "$unmap")
    echo "$(awk '/^anon_write_fault_ns/ {print $3}' <<<"$o") \
$(awk '/^zero_read_fault_ns/ {print $3}' <<<"$o") $(awk '/^munmap/ {print $2}' <<<"$m")"
}
echo "this cgroup: $(grep -E '(^0::|memory)' /proc/self/cgroup | head -1); $(uptime)"
diffs=()
for r in $(seq "$rounds"); do
    read -r cw cr cm <<<"$(side env)"
    read -r rw rr rm <<<"$(side in_root)"
    echo "round $r: this cgroup write $cw read $cr munmap $cm; root write $rw read $rr munmap $rm"
    diffs+=("$(echo "$cw - $rw" | bc -l)")
done
printf 'paired differences of the write fault (ns): %s\n' "${diffs[*]}"
