"""PromQL for the dashboard tests: the metric names an expression selects, the series
names a scrape's `# TYPE` lines make queryable, and promtool's parse of expressions.

promtool (Debian package prometheus; scripts/setup.sh installs its binary) is the
parser of record: an expression it accepts is valid PromQL. The names are read by a
small lexer that is only asked to tell a metric name from a function, a keyword or a
grouping label: label matchers `{...}`, ranges `[...]` and strings are single tokens."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile

import yaml

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|\{[^}]*\}|\[[^\]]*\]'
                   r"|(?:\d+(?:ms|[smhdwy]))+(?![a-zA-Z0-9_:])"  # a duration (offset 5m)
                   r"|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[a-zA-Z_:][a-zA-Z0-9_:]*|\S")
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = GROUPING | {"bool", "offset", "and", "or", "unless", "inf", "nan", "atan2"}
# Grafana's variables, as Grafana would substitute them
GRAFANA = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$model": ".*"}


def substituted(expr: str) -> str:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects (not functions, keywords or grouping labels)."""
    tokens = TOKEN.findall(expr)
    names, i = set(), 0
    while i < len(tokens):
        token = tokens[i]
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        if token in GROUPING and after == "(":
            i = tokens.index(")", i + 1) + 1  # the label list: (le, model)
            continue
        # followed by "(" a function, by a grouping keyword an aggregation: `sum by (le) (...)`
        if NAME.fullmatch(token) and token not in KEYWORDS and after != "(" and after not in GROUPING:
            names.add(token)
        i += 1
    return names


def queryable(families: dict[str, str]) -> set[str]:
    """The series names a family's `# TYPE name kind` makes queryable."""
    out = set()
    for name, kind in families.items():
        if kind == "counter":
            base = name.removesuffix("_total")
            out |= {f"{base}_total", f"{base}_created"}
        elif kind in ("histogram", "summary"):
            out |= {name, f"{name}_bucket", f"{name}_count", f"{name}_sum", f"{name}_created"}
        else:
            out.add(name)
    return out


def promtool() -> str | None:
    return shutil.which("promtool")


def parse_problems(exprs: list[str]) -> str:
    """promtool's complaints about `exprs` (each a recording rule's expression), "" when
    it parses them all."""
    rules = [{"record": f"starmesh_dashboard:query_{i}", "expr": substituted(e)} for i, e in enumerate(exprs)]
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
        f.flush()
        done = subprocess.run([promtool(), "check", "rules", f.name], capture_output=True, text=True, timeout=60)
    return "" if done.returncode == 0 else done.stdout + done.stderr


def config_problems(path) -> str:
    """`promtool check config` on a Prometheus config file: "" when it is valid."""
    done = subprocess.run([promtool(), "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    return "" if done.returncode == 0 else done.stdout + done.stderr
