"""What two or more papers share, and nothing paper-specific.

- :mod:`papers.common.runner`: the bridge from a Snakemake rule to a stage function (logs, threads).
- :mod:`papers.common.params`: a paper's dataclass of parameters, built from its config section.
- :mod:`papers.common.io`: Parquet and JSON in and out, deterministic.
- :mod:`papers.common.seeding`: one seeding block for random, numpy and torch.
- :mod:`papers.common.progress`: tqdm bars that read well in a log file.
- :mod:`papers.common.claims`: the claims contract (``claims.json``) and its schema.
- :mod:`papers.common.tables`: results tables as Markdown and CSV, mean +- std over seeds.
- :mod:`papers.common.plotting`: matplotlib figures saved byte-for-byte reproducibly.
- :mod:`papers.common.report`: a paper's section of the summary (``report.md``).
- :mod:`papers.common.summary`: the cross-paper summary (``summary.md``, ``summary.csv``).
"""
