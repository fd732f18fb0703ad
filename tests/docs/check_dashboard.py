#!/usr/bin/env python3
"""Checks docs/grafana/kvtier-dashboard.json against docs/metrics.md.

Usage: check_dashboard.py DASHBOARD_JSON METRICS_MD

Checks that the dashboard parses; that every panel has a title and every panel other than a
row has at least one target with an expr; that every kvtier_* name in a target's expr (and in
a template variable's query) is a metric of the metrics doc's tables, with the histogram
suffixes _bucket/_sum/_count taken back to a histogram's family name; that the labels a query
selects on, groups by or asks label_values for are labels the doc lists (for the metric, where
the selector names one); that __inputs has a prometheus datasource and every ${NAME}
datasource is one of __inputs; that panel ids are unique; and that gridPos rectangles lie
within the 24 columns and do not overlap. Prints one line per problem and exits 1 if there is any, else
prints "dashboard ok: N panels, M metrics" (N: panels other than rows; M: distinct metric
families the targets use) and exits 0. Standard library only.
"""

import json
import re
import sys

GRID_COLUMNS = 24
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
METRIC_RE = re.compile(r"kvtier_[a-z0-9_]+")
BACKTICKED_RE = re.compile(r"`([^`]+)`")
# metric{label="v", label=~"v"}: the selector of a named metric.
SELECTOR_RE = re.compile(r"(kvtier_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)")
# by (a, b), without (a), on (a), ignoring (a), group_left (a), group_right (a).
GROUPING_RE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
LABEL_VALUES_RE = re.compile(r"label_values\(\s*(kvtier_[a-z0-9_]+)\s*(?:\{[^}]*\})?\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)")


def parse_metrics_doc(text):
    """Returns {name: {"type": str, "labels": set}} from the doc's tables, and all doc labels.

    A metric's labels are the backticked names in its table's label column plus the backticked
    names in its section's heading (e.g. "## Per client (`client`, `client_id`, `model`)").
    """
    metrics = {}
    section_labels = set()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            section_labels = set(BACKTICKED_RE.findall(stripped))
            continue
        if not stripped.startswith("|"):
            continue
        cells = [c.strip() for c in stripped.strip("|").split("|")]
        if len(cells) < 3:
            continue
        first = BACKTICKED_RE.fullmatch(cells[0])
        if not first or not METRIC_RE.fullmatch(first.group(1)):
            continue
        labels = set(BACKTICKED_RE.findall(cells[2])) | section_labels
        metrics[first.group(1)] = {"type": cells[1].lower(), "labels": labels}
    all_labels = set()
    for info in metrics.values():
        all_labels |= info["labels"]
    return metrics, all_labels


def family_of(name, metrics):
    """The documented family a series name belongs to, or None."""
    if name in metrics:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            base = name[: -len(suffix)]
            if base in metrics and metrics[base]["type"] in ("histogram", "summary"):
                return base
    return None


def allowed_labels(name, family, metrics):
    labels = set(metrics[family]["labels"])
    if name == family + "_bucket":
        labels.add("le")
    return labels


def check_expr(where, expr, metrics, all_labels, problems):
    """Checks the metric names and labels of one PromQL expression; returns the families used."""
    families = set()
    # Label values and strings ("...") may hold anything; names are looked for outside them.
    code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    for name in sorted(set(METRIC_RE.findall(code))):
        family = family_of(name, metrics)
        if family is None:
            problems.append(f"{where}: metric {name} is not in the metrics doc")
        else:
            families.add(family)
    for m in SELECTOR_RE.finditer(code):
        family = family_of(m.group(1), metrics)
        if family is None:
            continue
        allowed = allowed_labels(m.group(1), family, metrics)
        for label, _ in MATCHER_RE.findall(m.group(2)):
            if label != "__name__" and label not in allowed:
                problems.append(f"{where}: {m.group(1)} has no label {label} in the metrics doc")
    for m in GROUPING_RE.finditer(code):
        for label in (s.strip() for s in m.group(2).split(",")):
            if label and label != "le" and label not in all_labels:
                problems.append(f"{where}: {m.group(1)} ({label}): no metric in the metrics doc has label {label}")
    for m in LABEL_VALUES_RE.finditer(code):
        family = family_of(m.group(1), metrics)
        if family is not None and m.group(2) not in allowed_labels(m.group(1), family, metrics):
            problems.append(f"{where}: label_values asks {m.group(1)} for label {m.group(2)}, which the metrics doc does not list for it")
    return families


def walk_panels(panels, problems, where="panels", group="panels"):
    """Yields (panel, layout group) for each panel, rows' children included.

    A collapsed row keeps its children in its own "panels", laid out apart from the dashboard's
    grid: they form a layout group of their own.
    """
    if not isinstance(panels, list):
        problems.append(f"{where} is not a list")
        return
    for i, panel in enumerate(panels):
        if not isinstance(panel, dict):
            problems.append(f"{where}[{i}] is not an object")
            continue
        yield panel, group
        children = panel.get("panels")
        if children:
            inner = f"{where}[{i}].panels"
            yield from walk_panels(children, problems, inner, inner if panel.get("collapsed") else group)


def panel_name(panel):
    return f"panel {panel.get('id')!r} ({panel.get('title') or 'untitled'})"


def check_grid(panel, problems):
    gp = panel.get("gridPos")
    if not isinstance(gp, dict):
        problems.append(f"{panel_name(panel)}: no gridPos")
        return None
    values = [gp.get(k) for k in ("x", "y", "w", "h")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        problems.append(f"{panel_name(panel)}: gridPos x, y, w, h must be integers")
        return None
    x, y, w, h = values
    if x < 0 or y < 0 or w <= 0 or h <= 0 or x + w > GRID_COLUMNS:
        problems.append(f"{panel_name(panel)}: gridPos {gp} is outside the {GRID_COLUMNS}-column grid")
        return None
    return (x, y, w, h)


def overlaps(a, b):
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    return ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah


def main(argv):
    if len(argv) != 3:
        print(f"usage: {argv[0]} DASHBOARD_JSON METRICS_MD", file=sys.stderr)
        return 2
    problems = []
    try:
        with open(argv[1], encoding="utf-8") as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        print(f"{argv[1]}: cannot load the dashboard: {e}")
        return 1
    try:
        with open(argv[2], encoding="utf-8") as f:
            metrics, all_labels = parse_metrics_doc(f.read())
    except (OSError, ValueError) as e:
        print(f"{argv[2]}: cannot read the metrics doc: {e}")
        return 1
    if not metrics:
        print(f"{argv[2]}: no metric names found in its tables")
        return 1
    if not isinstance(dashboard, dict):
        print(f"{argv[1]}: the dashboard is not a JSON object")
        return 1

    inputs = dashboard.get("__inputs") or []
    input_names = {i.get("name") for i in inputs if isinstance(i, dict)}
    if not any(isinstance(i, dict) and i.get("type") == "datasource" and i.get("pluginId") == "prometheus"
               for i in inputs):
        problems.append("__inputs has no prometheus datasource")

    unknown_inputs = {}

    def check_datasource(where, ds):
        uid = ds.get("uid") if isinstance(ds, dict) else ds
        m = re.fullmatch(r"\$\{([A-Za-z0-9_]+)\}", uid) if isinstance(uid, str) else None
        if m and m.group(1) not in input_names:
            unknown_inputs.setdefault(m.group(1), []).append(where)

    ids = {}
    rects = {}
    families = set()
    count = 0
    for panel, group in walk_panels(dashboard.get("panels"), problems):
        name = panel_name(panel)
        if not isinstance(panel.get("title"), str) or not panel["title"].strip():
            problems.append(f"{name}: no title")
        pid = panel.get("id")
        if not isinstance(pid, int) or isinstance(pid, bool):
            problems.append(f"{name}: id is not an integer")
        elif pid in ids:
            problems.append(f"{name}: id {pid} is also used by {ids[pid]}")
        else:
            ids[pid] = name
        rect = check_grid(panel, problems)
        if rect is not None:
            for other_name, other in rects.get(group, []):
                if overlaps(rect, other):
                    problems.append(f"{name}: gridPos overlaps {other_name}")
            rects.setdefault(group, []).append((name, rect))
        if panel.get("type") == "row":
            continue
        count += 1
        check_datasource(name, panel.get("datasource"))
        targets = panel.get("targets")
        exprs = [t.get("expr") for t in targets if isinstance(t, dict)] if isinstance(targets, list) else []
        exprs = [e for e in exprs if isinstance(e, str) and e.strip()]
        if not exprs:
            problems.append(f"{name}: no target with an expr")
        for t in targets if isinstance(targets, list) else []:
            if isinstance(t, dict):
                check_datasource(f"{name} target {t.get('refId')}", t.get("datasource"))
        for expr in exprs:
            families |= check_expr(name, expr, metrics, all_labels, problems)

    for var in (dashboard.get("templating") or {}).get("list") or []:
        if not isinstance(var, dict):
            continue
        check_datasource(f"variable {var.get('name')}", var.get("datasource"))
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if isinstance(query, str):
            check_expr(f"variable {var.get('name')}", query, metrics, all_labels, problems)

    for name, users in unknown_inputs.items():
        problems.append(f"datasource ${{{name}}} is not one of __inputs (used {len(users)} times, first by {users[0]})")

    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"dashboard ok: {count} panels, {len(families)} metrics")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
