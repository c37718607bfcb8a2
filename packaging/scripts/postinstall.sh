#!/bin/sh
# coordrun package: after install or upgrade (deb postinst, rpm %post).
#   deb: $1 = configure (other actions: abort-upgrade, abort-remove, ...)
#   rpm: $1 = 1 on install, 2 on upgrade
set -e

case "$1" in
  configure | 1 | 2) ;;
  *) exit 0 ;;
esac

# The system user and group coordrun-server.service runs as (User=coordrun).
# Its home is the unit's StateDirectory, which systemd creates and chowns;
# the user is kept on removal so that a reinstall finds its data dir owned
# by the same uid.
if ! getent group coordrun >/dev/null 2>&1; then
  groupadd --system coordrun
fi
if ! getent passwd coordrun >/dev/null 2>&1; then
  nologin=/usr/sbin/nologin
  [ -x "$nologin" ] || nologin=/sbin/nologin
  useradd --system --gid coordrun --home-dir /var/lib/coordrun --no-create-home \
    --shell "$nologin" --comment "coordrun ensemble member" coordrun
fi

# Load the new or changed unit files, only where systemd is the running
# init (not in containers, chroots or image builds).
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
  # Running members and cron processes are not restarted here: restarting
  # every member of an ensemble at once (as a fleet-wide upgrade would)
  # loses quorum. Restart them one host at a time.
  if systemctl is-active --quiet coordrun-server.service 2>/dev/null; then
    echo "coordrun: restart coordrun-server.service to run the new version (one member at a time)"
  fi
fi
exit 0
