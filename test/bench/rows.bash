# Sourced by the bench scripts (from the repository root). Each script
# collects its figures with row and, at its end, writes them with
# rows_write NAME to test/bench/results/rows/NAME.tsv, one tab-separated
# line a figure:
#
#   benchmark  metric  corpus  peer  peer_figure  ratio  unit  better
#
# ratio is corpus/peer; better is "higher" or "lower"; a figure with no
# peer measured in the same run has "-" for peer, peer_figure and ratio.
# test/bench/summary renders every rows file as one table.

bench_rows=()

# row BENCHMARK METRIC FIGURE UNIT BETTER [PEER PEER_FIGURE]
row() {
  local value=${3:--} peer=${6:--} pv=${7:--} ratio=-
  [[ -n $value ]] || value=-
  [[ -n $pv ]] || pv=-
  if [[ $peer != - && $pv != - && $value != - ]]; then
    ratio=$(awk -v a="$value" -v b="$pv" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }')
  fi
  bench_rows+=("$(printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$1" "$2" "$value" "$peer" "$pv" "$ratio" "$4" "$5")")
}

# rows_write NAME: write the rows collected to test/bench/results/rows/NAME.tsv,
# replacing those of an earlier run of the same script.
rows_write() {
  local dir=${BENCH_ROWS_DIR:-test/bench/results/rows}
  mkdir -p "$dir"
  {
    printf '# %s %s\n' "$1" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '%s\n' "${bench_rows[@]}"
  } > "$dir/.$1.tsv.tmp"
  mv "$dir/.$1.tsv.tmp" "$dir/$1.tsv"
}

# dur_ms GO_DURATION: a Go duration string (1.5s, 812ms, 1m2s, 950µs) in
# milliseconds.
dur_ms() {
  awk -v d="$1" 'BEGIN {
    ms = 0
    while (match(d, /^[0-9.]+(h|ms|us|µs|ns|m|s)/)) {
      tok = substr(d, 1, RLENGTH); d = substr(d, RLENGTH + 1)
      n = tok + 0; u = tok; sub(/^[0-9.]+/, "", u)
      if (u == "h") ms += n * 3600000; else if (u == "m") ms += n * 60000
      else if (u == "s") ms += n * 1000; else if (u == "ms") ms += n
      else if (u == "us" || u == "µs") ms += n / 1000; else ms += n / 1000000
    }
    printf "%.0f", ms
  }'
}

# stop_proxy AGENT_STATE_DIR: end the proxy process an agent started
# there (it outlives the agent by design), by the PID it wrote.
stop_proxy() {
  local dir=$1/proxy pid
  pid=$(cat "$dir/proxy.pid" 2>/dev/null) || return 0
  [[ $pid =~ ^[0-9]+$ ]] || return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "proxy --dir $dir " || return 0
  kill -9 "$pid" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.02; done
}
