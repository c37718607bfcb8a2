#!/bin/sh
# coordrun package: before removal (deb prerm, rpm %preun).
#   deb: $1 = remove (or upgrade, deconfigure, failed-upgrade)
#   rpm: $1 = 0 on erase, 1 on upgrade
set -e

case "$1" in
  remove | 0) ;;
  *) exit 0 ;; # an upgrade keeps whatever is running
esac

# Stop and disable the members and every cron instance before their binary
# goes away, only where systemd is the running init; none is an error if
# they never ran. Enabled instances are found by their links: a template's
# instances that are enabled but not loaded are listed nowhere else, and
# their links would be left dangling.
# The cron instances go first: they are clients of the members, and one
# that lost its ensemble while stopping would end failed.

# instances TEMPLATE: the loaded and the enabled instances of TEMPLATE@.
instances() {
  {
    systemctl list-units --all --plain --no-legend "$1@*.service" 2>/dev/null | awk '{print $1}'
    for link in /etc/systemd/system/*.wants/"$1"@*.service; do
      [ -L "$link" ] && basename "$link"
    done
  } | sort -u
}

if [ -d /run/systemd/system ]; then
  cron=$(instances coordrun-cron)
  if [ -n "$cron" ]; then
    # shellcheck disable=SC2086 # one unit name per word
    systemctl --no-reload disable --now $cron >/dev/null 2>&1 || true
  fi
  members=$(instances coordrun-server)
  # shellcheck disable=SC2086 # one unit name per word
  systemctl --no-reload disable --now coordrun-server.service $members >/dev/null 2>&1 || true
fi
exit 0
