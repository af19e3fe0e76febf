#!/bin/sh
# Brings up display :1 (Xvfb + fluxbox) and the screen gateway, then marks the computer ready. If X
# never answers it exits non-zero with the tail of the X log, so a broken image fails loudly.
set -u
mkdir -p /tmp/botdesk-logs
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
# /tmp is a fresh tmpfs on every start, so this marker always belongs to this boot.
touch /tmp/.botdesk-ready
echo "botdesk: computer ready (display :1, gateway :7900)"
exec sleep infinity
