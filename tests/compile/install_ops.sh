#!/bin/sh
# install_ops.sh BUILD_DIR PROMTOOL -- installs the build into a temporary
# prefix and checks what operations need from it: the dlock program with
# its exporter, contrib/ under share/dlock (the alert rules, which the
# installed promtool accepts, the Grafana dashboard, which is JSON), and
# the systemd unit, whose ExecStart names the installed program and which
# systemd-analyze accepts.
set -eu
build=$1 promtool=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-ops.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/p" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
fail=0
share="$tmp/p/share/dlock"
"$tmp/p/bin/dlock" exporter --help | grep -q '^Usage: dlock exporter' \
    || { echo "FAIL: the installed dlock has no exporter"; fail=1; }
for f in prometheus/dlock.rules.yml prometheus/dlock.rules.test.yml grafana/dlock.json systemd/dlock-exporter.service; do
    [ -f "$share/$f" ] || { echo "FAIL: share/dlock/$f not installed"; fail=1; }
done
"$promtool" check rules "$share/prometheus/dlock.rules.yml" || { echo "FAIL: promtool rejects the rules"; fail=1; }
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$share/grafana/dlock.json" \
    || { echo "FAIL: the dashboard is not JSON"; fail=1; }
grep -qx "ExecStart=$tmp/p/bin/dlock exporter \$DLOCK_EXPORTER_ARGS" "$share/systemd/dlock-exporter.service" \
    || { echo "FAIL: the unit's ExecStart is not the installed program:"; grep ExecStart "$share/systemd/dlock-exporter.service"; fail=1; }
# The unit as systemd reads it (its man: reference is not looked up).
systemd-analyze verify --man=no "$share/systemd/dlock-exporter.service" \
    || { echo "FAIL: systemd-analyze rejects the unit"; fail=1; }
[ $fail = 0 ] && echo "install_ops: all present"
exit $fail
