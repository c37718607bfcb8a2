#!/bin/sh
# coordrun package: before removal (deb prerm, rpm %preun).
#   deb: $1 = remove (or upgrade, deconfigure, failed-upgrade)
#   rpm: $1 = 0 on erase, 1 on upgrade
set -e

case "$1" in
  remove | 0) ;;
  *) exit 0 ;; # an upgrade keeps whatever is running
esac

# Stop the member and every cron instance before their binary goes away,
# only where systemd is the running init. Stopping is not an error if they
# never ran.
if [ -d /run/systemd/system ]; then
  systemctl --no-reload disable --now coordrun-server.service >/dev/null 2>&1 || true
  systemctl stop 'coordrun-cron@*.service' >/dev/null 2>&1 || true
fi
exit 0
