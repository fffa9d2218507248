"""The cross-paper summary: one row per claim of every selected paper, with its verdict and links."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from papers.common.io import ensure_parent, read_json
from papers.common.report import short


def write_summary(*, claims, reports, summary_md, summary_csv, scale: str) -> None:
    """Aggregate the papers' ``claims.json`` files (list `claims`, same order as `reports`)."""
    rows = []
    for claims_path, report_path in zip(claims, reports):
        data = read_json(claims_path)
        for c in data["claims"]:
            rows.append({
                "paper": data["paper"],
                "claim": c["id"],
                "statement": c["statement"],
                "paper_value": c["paper"],
                "measured": short(c["measured"]),
                "holds": c["holds"],
                "scale": c["scale"],
                "report": os.path.relpath(report_path, Path(summary_md).parent),
                "table": os.path.relpath(Path(claims_path).with_name("table.md"), Path(summary_md).parent),
            })
    df = pd.DataFrame(rows)
    df.to_csv(ensure_parent(summary_csv), index=False)

    held = int(df["holds"].sum())
    lines = [
        f"# Summary: scale `{scale}`",
        "",
        f"{held} of {len(df)} claims hold across {df['paper'].nunique()} papers. Each verdict is computed "
        "from measured data by the criterion in the paper's report; a claim that does not hold says why there.",
        "",
        "| paper | claim | statement | paper says | measured | verdict | table |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in df.itertuples(index=False):
        cells = [f"[{r.paper}]({r.report})", r.claim, r.statement, r.paper_value, r.measured,
                 "holds" if r.holds else "**does not hold**", f"[table]({r.table})"]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    ensure_parent(summary_md).write_text("\n".join(lines) + "\n")
