#!/usr/bin/env bash
# The chart ships copies of two files that have one source each elsewhere in the repository:
#   crds/elasticjob.yaml          -> charts/elasticjob-operator/crds/elasticjob.yaml
#   dashboards/elasticjob.json    -> charts/elasticjob-operator/dashboards/elasticjob.json
# (Helm can read only files inside the chart.) Run this after editing a source; with --check it
# changes nothing and exits 1 if a copy differs, as tests/unit/chart does.
set -euo pipefail
cd "$(dirname "$0")/.."

pairs=(
  "crds/elasticjob.yaml:charts/elasticjob-operator/crds/elasticjob.yaml"
  "dashboards/elasticjob.json:charts/elasticjob-operator/dashboards/elasticjob.json"
)
check=0
[[ "${1:-}" == "--check" ]] && check=1
stale=0
for pair in "${pairs[@]}"; do
  src="${pair%%:*}" dst="${pair#*:}"
  [[ -f "$src" ]] || { echo "sync-chart: source $src is missing" >&2; exit 1; }
  if cmp -s "$src" "$dst"; then
    continue
  fi
  if ((check)); then
    echo "sync-chart: $dst differs from $src; run scripts/sync-chart.sh" >&2
    stale=1
  else
    mkdir -p "$(dirname "$dst")"
    cp "$src" "$dst"
    echo "sync-chart: copied $src to $dst" >&2
  fi
done
exit "$stale"
