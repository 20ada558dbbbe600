"""A picture of the split, from the plan alone: each package a cluster of its ELF files, an
arrow for each NEEDED entry that one shipped file satisfies for another, and each declared
process-exclusive pair as a red dashed line saying whether it is in effect. Graphviz DOT (for
`dot -Tsvg`) or Mermaid (for READMEs and issues)."""

from __future__ import annotations

import json
from enum import StrEnum

from splitter.model import Plan, Verdict


class GraphFormat(StrEnum):
    """What `splitter plan --graph` writes."""

    DOT = "dot"
    MERMAID = "mermaid"


def _edges(plan: Plan) -> list[tuple[str, str]]:
    """(file, file it loads) for every NEEDED entry a shipped file answers, sorted."""
    provider = {b.provides: b.path for b in plan.binaries}
    return sorted({(b.path, provider[n]) for b in plan.binaries for n in b.needed if n in provider})


def _clusters(plan: Plan) -> list[tuple[int, str, list[str]]]:
    """(index, package name, its ELF files) for every package."""
    return [
        (i, package.name, [b.path for b in plan.binaries if plan.owners[b.path][0] == package.name])
        for i, package in enumerate(plan.packages)
    ]


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _pair_label(verdict: Verdict) -> str:
    return f"process-exclusive: {verdict.state}"


def render_dot(plan: Plan) -> str:
    """The split as a Graphviz digraph."""
    q = json.dumps  # DOT's quoted strings escape like JSON's for these names
    ids = {b.path: f"n{i}" for i, b in enumerate(plan.binaries)}
    lines = [
        f"digraph {q(plan.wheel.filename)} {{",
        "  rankdir=LR;",
        '  node [shape=box, fontname="Helvetica"];',
        f"  label={q(f'{plan.wheel.filename}: the split')};",
    ]
    for index, name, files in _clusters(plan):
        lines += [f"  subgraph cluster_{index} {{", f"    label={q(name)};"]
        lines += [f"    {ids[path]} [label={q(_name(path))}];" for path in files]
        lines.append("  }")
    for source, target in _edges(plan):
        lines.append(f"  {ids[source]} -> {ids[target]};")
    for verdict in plan.exclusive:
        if verdict.first in ids and verdict.second in ids:
            label = q(_pair_label(verdict))
            lines.append(
                f"  {ids[verdict.first]} -> {ids[verdict.second]} "
                f"[dir=none, style=dashed, color=red, fontcolor=red, label={label}];"
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_mermaid(plan: Plan) -> str:
    """The split as a Mermaid flowchart."""
    ids = {b.path: f"n{i}" for i, b in enumerate(plan.binaries)}
    lines = ["flowchart LR"]
    for index, name, files in _clusters(plan):
        lines.append(f'  subgraph p{index}["{name}"]')
        lines += [f'    {ids[path]}["{_name(path)}"]' for path in files]
        lines.append("  end")
    for source, target in _edges(plan):
        lines.append(f"  {ids[source]} --> {ids[target]}")
    for verdict in plan.exclusive:
        if verdict.first in ids and verdict.second in ids:
            label = _pair_label(verdict)
            lines.append(f'  {ids[verdict.first]} -. "{label}" .- {ids[verdict.second]}')
    return "\n".join(lines) + "\n"


def render_graph(plan: Plan, form: GraphFormat) -> str:
    """The split in the format asked for."""
    return render_dot(plan) if form is GraphFormat.DOT else render_mermaid(plan)
