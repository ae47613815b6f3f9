#!/usr/bin/env bash
# Sets the NVMe tier's own I/O path (strata_nvme_bench: O_DIRECT + io_uring) beside fio at
# the same parameters (--direct=1 --ioengine=io_uring, sequential, one job) in one run, and
# prints both bandwidths and the ratio strata/fio (target >= 0.90). Runs alternate
# strata, fio, strata, fio... --repeat times and the median of each is reported, so a disk
# whose speed drifts affects both alike.
#
# usage: tools/nvme_vs_fio.sh [--dir D] [--size-mib N] [--bs-kib K] [--iodepth Q]
#                             [--repeat R] [--bench PATH] [--min-ratio X]
# --min-ratio: exit 1 when either ratio is below X (default: report only).
set -euo pipefail

dir=/tmp/strata-nvme
size_mib=1024
bs_kib=1024
iodepth=16
repeat=3
min_ratio=""
bench=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --size-mib) size_mib="$2"; shift 2 ;;
    --bs-kib) bs_kib="$2"; shift 2 ;;
    --iodepth) iodepth="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    --min-ratio) min_ratio="$2"; shift 2 ;;
    *) echo "nvme_vs_fio: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$bench" ]; then
  for candidate in "$root"/build*/tools/bench/strata_nvme_bench; do
    [ -x "$candidate" ] && bench="$candidate" && break
  done
fi
[ -n "$bench" ] && [ -x "$bench" ] || { echo "nvme_vs_fio: strata_nvme_bench not found; build it or pass --bench" >&2; exit 2; }
command -v fio >/dev/null || { echo "nvme_vs_fio: fio not installed (tools/install_deps.sh)" >&2; exit 2; }

mkdir -p "$dir"
fio_file="$dir/fio-$$.bin"
trap 'rm -f "$fio_file"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# fio terse v3: field 7 is read bandwidth, field 48 write bandwidth, both in KiB/s.
fio_bw() {  # rw field
  fio --name="strata-$1" --filename="$fio_file" --direct=1 --ioengine=io_uring --rw="$1" \
      --bs="${bs_kib}k" --iodepth="$iodepth" --size="${size_mib}m" --numjobs=1 \
      --output-format=terse --terse-version=3 | awk -F';' -v f="$2" '{printf "%.0f\n", $f * 1024}'
}

sw=(); sr=(); fw=(); fr=(); mode=""
for ((i = 0; i < repeat; ++i)); do
  out="$("$bench" --nvme-dir "$dir" --file-mib "$size_mib" --block-kib "$bs_kib" --queue-depth "$iodepth")"
  mode="$(sed -n 's/^mode=//p' <<<"$out")"
  sw+=("$(sed -n 's/^write_bytes_per_s=//p' <<<"$out")")
  sr+=("$(sed -n 's/^read_bytes_per_s=//p' <<<"$out")")
  fw+=("$(fio_bw write 48)")
  fr+=("$(fio_bw read 7)")
  rm -f "$fio_file"
done

s_w="$(printf '%s\n' "${sw[@]}" | median)"; s_r="$(printf '%s\n' "${sr[@]}" | median)"
f_w="$(printf '%s\n' "${fw[@]}" | median)"; f_r="$(printf '%s\n' "${fr[@]}" | median)"
echo "nvme_vs_fio: dir=$dir file=${size_mib} MiB block=${bs_kib} KiB iodepth=$iodepth repeat=$repeat strata_mode=$mode"
echo "  runs (MB/s)  strata write: $(printf '%s ' "${sw[@]}" | awk '{for(i=1;i<=NF;i++) printf "%.0f ", $i/1e6}')| fio write: $(printf '%s ' "${fw[@]}" | awk '{for(i=1;i<=NF;i++) printf "%.0f ", $i/1e6}')"
echo "               strata read:  $(printf '%s ' "${sr[@]}" | awk '{for(i=1;i<=NF;i++) printf "%.0f ", $i/1e6}')| fio read:  $(printf '%s ' "${fr[@]}" | awk '{for(i=1;i<=NF;i++) printf "%.0f ", $i/1e6}')"
awk -v sw="$s_w" -v sr="$s_r" -v fw="$f_w" -v fr="$f_r" -v min="$min_ratio" 'BEGIN {
  printf "  median        strata          fio      ratio\n"
  printf "  write   %9.1f MB/s %9.1f MB/s   %5.1f%%\n", sw/1e6, fw/1e6, 100*sw/fw
  printf "  read    %9.1f MB/s %9.1f MB/s   %5.1f%%\n", sr/1e6, fr/1e6, 100*sr/fr
  if (min != "" && (sw/fw < min || sr/fr < min)) { print "  below the target ratio " min; exit 1 }
}'
