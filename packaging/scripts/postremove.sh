#!/bin/sh
# coordrun package: after removal (deb postrm, rpm %postun).
#   deb: $1 = remove, purge, upgrade, ...
#   rpm: $1 = 0 on erase, 1 on upgrade
set -e

# Forget the removed unit files, only where systemd is the running init.
# A unit that ended failed would stay listed (not-found, failed) until
# reset.
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
  systemctl reset-failed 'coordrun-server.service' 'coordrun-server@*.service' 'coordrun-cron@*.service' >/dev/null 2>&1 || true
fi

# Purging removes /etc/coordrun with what the admin put there (the jobs
# files under cron/), as packaging/README.md says; dpkg itself removes only
# the files it shipped and leaves a directory that is not empty.
if [ "$1" = purge ]; then
  rm -rf /etc/coordrun
fi

# Purging keeps the coordrun user and /var/lib/coordrun: the data dir holds
# this member's share of the ensemble's data, and deleting it is a decision
# to make by hand (rm -rf /var/lib/coordrun; userdel coordrun).
exit 0
