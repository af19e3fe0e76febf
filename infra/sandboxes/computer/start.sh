#!/bin/sh
# Runs as botdesk-screen (uid 990), never as a bot. Makes the screen services' folders (theirs
# alone, before any bot can run), brings up display :1 (Xvfb + fluxbox) and the screen gateway,
# then marks the computer ready. If X never answers it exits non-zero with the tail of the X log,
# so a broken image fails loudly.
set -u
umask 077
export HOME=/var/lib/botdesk-screen
# /tmp and /dev/shm are fresh on every start. The X socket folder is the services' and not
# world-writable, so no bot can put a socket of its own where a display's belongs.
mkdir -m 0700 /tmp/botdesk-logs /tmp/botdesk-gw /tmp/botdesk-vnc /dev/shm/botdesk-fb || exit 1
mkdir -m 0755 /tmp/.X11-unix || exit 1
botdesk-display up 1 || exit 1
setsid botdesk-gateway >/tmp/botdesk-logs/gateway.log 2>&1 < /dev/null &
i=0
until [ -e /tmp/botdesk-gw/listening ]; do
  i=$((i + 1))
  if [ "$i" -gt 200 ]; then
    echo "botdesk: the screen gateway did not start; last lines of its log:" >&2
    tail -n 20 /tmp/botdesk-logs/gateway.log >&2
    exit 1
  fi
  sleep 0.05
done
# Readable by all: the engine waits for it as the bots' user.
umask 022
touch /tmp/.botdesk-ready
echo "botdesk: computer ready (display :1, gateway :7900)"
exec sleep infinity
