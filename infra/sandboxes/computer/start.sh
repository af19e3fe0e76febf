#!/bin/sh
# Brings up display :1 (Xvfb + fluxbox), then marks the computer ready. If X never answers it exits
# non-zero with the tail of the X log, so a broken image fails loudly instead of hanging.
set -u
logs=/tmp/botdesk-logs
mkdir -p "$logs"

Xvfb :1 -screen 0 1280x800x24 -nolisten tcp -ac >"$logs/xvfb-1.log" 2>&1 &
xpid=$!
i=0
until xdpyinfo -display :1 >/dev/null 2>&1; do
  i=$((i + 1))
  if [ "$i" -gt 200 ] || ! kill -0 "$xpid" 2>/dev/null; then
    echo "botdesk: X display :1 did not answer within 10 s; last lines of its log:" >&2
    tail -n 20 "$logs/xvfb-1.log" >&2
    exit 1
  fi
  sleep 0.05
done

DISPLAY=:1 fluxbox >"$logs/fluxbox-1.log" 2>&1 &

# /tmp is a fresh tmpfs on every start, so this marker always belongs to this boot.
touch /tmp/.botdesk-ready
echo "botdesk: computer ready (display :1)"
exec sleep infinity
