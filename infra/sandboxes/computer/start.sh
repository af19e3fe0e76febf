#!/bin/sh
# The computer's own process. It starts as root only to fence the network, then becomes
# botdesk-screen (uid 990), never a bot: makes the screen services' folders (theirs alone, before
# any bot can run), brings up the screen gateway and display :1 (Xvfb + fluxbox), then marks the
# computer ready. If anything fails it exits non-zero with the reason, so a broken image fails loudly.
set -u
if [ "$(id -u)" = 0 ]; then
  # The fence: every process but root's finds no route to private, shared, link-local,
  # benchmarking, multicast and reserved addresses (other computers and containers, the LAN, a
  # cloud's metadata service), nor to the host: this computer's gateway and the host's own
  # addresses (BOTDESK_FENCE, from the engine), where any service the person runs would answer;
  # only the screen services reach the gateway, to answer the host.
  # Docker's own isolation between networks lapses for a moment whenever any network is made;
  # this does not. Root is exempt because Docker's DNS forwarder works in this namespace as root
  # (the host's resolver may be a private address); no process of a bot can become root
  # (no-new-privileges, and the capabilities to change routes are dropped below before any
  # service starts). IPv6 is off in the computer (Docker sets its sysctls).
  set -- $(ip -4 route show default)
  [ "${1:-}" = default ] && [ "${2:-}" = via ] && [ "${4:-}" = dev ] || { echo "botdesk: no default route to fence" >&2; exit 1; }
  # The screen services answer the host's connections to the gateway port, which come from the
  # gateway address: their uid alone may reach it (table 101, looked up first).
  ip rule add uidrange "$(id -u botdesk-screen)-$(id -u botdesk-screen)" lookup 101 priority 99 || { echo "botdesk: cannot fence the network (the computer needs NET_ADMIN)" >&2; exit 1; }
  ip route add "$3" dev "$5" table 101 || exit 1
  # Every uid but root's, up to the highest this namespace maps (all 32 bits, or 65536 of them
  # under Docker's userns-remap, where a rule naming an unmapped uid is refused).
  top=$(awk '{ t = $1 + $3 - 1; if (t > m) m = t } END { if (m > 4294967294) m = 4294967294; printf "%.0f", m }' /proc/self/uid_map)
  ip rule add uidrange "1-$top" lookup 100 priority 100 || exit 1
  for net in 0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 169.254.0.0/16 172.16.0.0/12 192.168.0.0/16 198.18.0.0/15 224.0.0.0/4 240.0.0.0/4 "$3/32" ${BOTDESK_FENCE:-}; do
    ip route add prohibit "$net" table 100 2>/dev/null || ip route replace prohibit "$net" table 100 || { echo "botdesk: cannot fence $net" >&2; exit 1; }
  done
  # Every TCP connection a bot (uid 1000 and up) opens to an address not this computer's goes to
  # the network policy in the screen gateway (botdesk_net.py, port 3129), which joins it to where
  # it was going or refuses it, by the bot's policy; its routes (97) then reach every address, and
  # the policy decides. The gateway's uid reaches every address (98) for the same reason. A bot's
  # other traffic (UDP, ICMP) keeps the fence above and, unless its policy is `open`, is refused
  # in the chain BOTDESK_NET (`botdesk-helper net-policy` writes it; the policies go in
  # /tmp/botdesk-policy, root's). The iptables rules are root's: no bot holds NET_ADMIN.
  bots="1000-$top"
  mkdir -m 0755 /tmp/botdesk-policy /tmp/botdesk-net || exit 1
  chown botdesk-screen:botdesk-screen /tmp/botdesk-net || exit 1
  echo "$3/32 ${BOTDESK_FENCE:-}" > /tmp/botdesk-policy/fence || exit 1
  { iptables -t nat -A OUTPUT -p tcp -m owner --uid-owner "$bots" -m addrtype ! --dst-type LOCAL -j REDIRECT --to-ports 3129 \
    && iptables -N BOTDESK_NET && iptables -A OUTPUT -m owner --uid-owner "$bots" -j BOTDESK_NET; } \
    || { echo "botdesk: cannot set the network policy's rules (iptables)" >&2; exit 1; }
  ip rule add uidrange "$bots" ipproto tcp lookup main priority 97 || exit 1
  ip rule add uidrange "$(id -u botdesk-screen)-$(id -u botdesk-screen)" lookup main priority 98 || exit 1
  # The local table comes after rule 50, where `botdesk-helper fence-devtools` refuses each
  # display's Chromium DevTools port (on loopback) to every bot but that display's own.
  ip rule add priority 60 lookup local && ip rule del priority 0 lookup local || { echo "botdesk: cannot order the local table" >&2; exit 1; }
  unset BOTDESK_FENCE
  exec setpriv --reuid=botdesk-screen --regid=botdesk-screen --init-groups --inh-caps=-all --bounding-set=-all -- "$0"
fi
[ "$(id -un)" = botdesk-screen ] || { echo "botdesk: start.sh must start as root (to fence the network)" >&2; exit 1; }
umask 077
export HOME=/var/lib/botdesk-screen
# /tmp and /dev/shm are fresh on every start. The X socket folder is the services' and not
# world-writable, so no bot can put a socket of its own where a display's belongs.
mkdir -m 0700 /tmp/botdesk-logs /tmp/botdesk-gw /tmp/botdesk-vnc /dev/shm/botdesk-fb || exit 1
mkdir -m 0755 /tmp/.X11-unix || exit 1
# The gateway needs no display: it starts beside Xvfb, and takes its port (marking it listening)
# before its Python has loaded; a connection made meanwhile waits in the port's backlog.
setsid botdesk-gateway >/tmp/botdesk-logs/gateway.log 2>&1 < /dev/null &
botdesk-display up 1 </dev/null || exit 1
i=0
until [ -e /tmp/botdesk-gw/listening ]; do
  i=$((i + 1))
  if [ "$i" -gt 1000 ]; then
    echo "botdesk: the screen gateway did not start; last lines of its log:" >&2
    tail -n 20 /tmp/botdesk-logs/gateway.log >&2
    exit 1
  fi
  sleep 0.01
done
# Readable by all: the engine waits for it as the bots' user.
umask 022
touch /tmp/.botdesk-ready
echo "botdesk: computer ready (display :1, gateway :7900)"
exec sleep infinity
