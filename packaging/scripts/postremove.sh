#!/bin/sh
# coordrun package: after removal (deb postrm, rpm %postun).
#   deb: $1 = remove, purge, upgrade, ...
#   rpm: $1 = 0 on erase, 1 on upgrade
set -e

# Forget the removed unit files, only where systemd is the running init.
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi

# Purging keeps the coordrun user and /var/lib/coordrun: the data dir holds
# this member's share of the ensemble's data, and deleting it is a decision
# to make by hand (rm -rf /var/lib/coordrun; userdel coordrun).
exit 0
