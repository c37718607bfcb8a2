#!/usr/bin/env bash
# nightly.sh — a stand-in for a nightly job. Run it on every host under
# coordrun and exactly one runs at a time:
#
#   coordrun run --name nightly -- ./examples/nightly.sh
#
# It works for NIGHTLY_SECONDS (default 5), then records its run in the
# fenced store (examples/fenced-store) when STORE is set.
set -euo pipefail
secs=${NIGHTLY_SECONDS:-5}
tag=${NIGHTLY_TAG:-$(hostname)}
echo "$(date +%T.%3N) [$tag] nightly: start, token ${COORDRUN_FENCING_TOKEN:-none} on lock ${COORDRUN_LOCK:-none} (pid $$)"
for ((i = 1; i <= secs; i++)); do
  sleep 1
  echo "[$tag] nightly: working ($i/$secs)"
done
if [ -n "${STORE:-}" ]; then
  "$(dirname "$0")/fenced-store/write.sh" "nightly run by $tag"
fi
echo "[$tag] nightly: done"
