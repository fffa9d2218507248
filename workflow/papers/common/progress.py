"""Progress bars that read well in a log file (the runner sends stderr to the rule's log)."""
from __future__ import annotations

import sys

from tqdm.auto import tqdm


def progress(iterable=None, *, desc: str, total: int | None = None, **kwargs):
    """A tqdm bar for a long loop: ASCII, refreshed at most every 5 s, on stderr."""
    kwargs.setdefault("mininterval", 5.0)
    return tqdm(iterable, desc=desc, total=total, ascii=True, file=sys.stderr, dynamic_ncols=False, **kwargs)
