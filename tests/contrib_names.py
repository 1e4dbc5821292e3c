#!/usr/bin/env python3
"""tests/contrib_names.py METRICS DASHBOARD RULES -- every metric that the
Grafana dashboard and the Prometheus rules name is one that `dlock
exporter` serves.  METRICS: a scrape of a live exporter (its "# TYPE"
lines name what it serves, a histogram its _bucket, _sum and _count); DASHBOARD: contrib/grafana/dlock.json; RULES:
contrib/prometheus/dlock.rules.yml.  Prints each unknown name and exits 1
if there is one (or if a panel queries nothing)."""
import json
import re
import sys

NAME = re.compile(r"\bdlock_[a-z_]+\b")


def served(path):
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"# TYPE (\S+) (\S+)", line)
            if m:
                names.add(m.group(1))
                if m.group(2) == "histogram":  # its series' names
                    names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    return names


def dashboard_exprs(path):
    """(where, expression) for every query of the dashboard."""
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    out = []
    for p in d["panels"]:
        targets = p.get("targets", [])
        if not any(t.get("expr") for t in targets):
            out.append(("panel %r" % p.get("title"), None))
        for t in targets:
            out.append(("panel %r" % p.get("title"), t.get("expr", "")))
    for v in d.get("templating", {}).get("list", []):
        out.append(("variable %r" % v["name"], v.get("definition", "")))
        q = v.get("query")
        out.append(("variable %r" % v["name"], q.get("query", "") if isinstance(q, dict) else q or ""))
    return out


def rules_exprs(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"\s*expr:\s*(.*)", line)
            if m:
                out.append(("%s:%d" % (path, n), m.group(1)))
    return out


def main():
    if len(sys.argv) != 4:
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    have = served(sys.argv[1])
    if not have:
        print("no metrics in %s" % sys.argv[1])
        return 1
    bad = checked = 0
    for where, expr in dashboard_exprs(sys.argv[2]) + rules_exprs(sys.argv[3]):
        if expr is None:
            print("%s queries nothing" % where)
            bad += 1
            continue
        for name in NAME.findall(expr):
            checked += 1
            if name not in have:
                print("%s names %s, which the exporter does not serve" % (where, name))
                bad += 1
    print("%d names checked against %d served metrics, %d unknown" % (checked, len(have), bad))
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
