#!/usr/bin/env bash
# write.sh — the job of examples/fenced-store: append one line to a store
# that refuses writes from stale lock holders.
#
#   STORE=/srv/store coordrun run --name nightly -- ./write.sh "some record"
#
# coordrun run sets COORDRUN_FENCING_TOKEN and COORDRUN_LOCK; to try it by
# hand, set them yourself (see README.md). Exit codes: 0 written, 77 stale
# token (a newer holder has written; nothing appended), 64 bad setup.
set -euo pipefail

: "${STORE:?set STORE to the store directory}"
record=${1:-"from $(hostname) pid $$"}

# Check and append must be one step: a job frozen between them would write
# after a newer holder. Every writer goes through this script, so a lock on
# the data file (never replaced, unlike the .fence state file) makes them
# take turns; the append below goes through the same descriptor.
exec 9>>"$STORE/data.log"
flock 9

coordrun fence check --state "$STORE/.fence" || exit $?
printf '%s token=%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$COORDRUN_FENCING_TOKEN" "$record" >&9
