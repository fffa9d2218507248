"""FASTA files read as a stream, and a uniform sample drawn while reading.

The full scales of cbplm and flexpert point at UniRef50, tens of GB of sequence: neither may hold the file in
memory, so records come one at a time (:func:`fasta_records`) and a sample of fixed size is kept by reservoir
sampling (:func:`reservoir_sample`).
"""
from __future__ import annotations

from typing import Iterable, Iterator, TypeVar

import numpy as np

T = TypeVar("T")


def fasta_records(path) -> Iterator[tuple[str, int]]:
    """(sequence, line of its '>' header) of every record of a FASTA file, in file order, read line by line;
    a record's lines are joined without whitespace. A sequence line before the first header, or a file without
    a record, is an error that names the file (and the line)."""
    header_line, chunks = None, []
    with open(path) as f:
        for number, text in enumerate(f, start=1):
            text = text.strip()
            if text.startswith(">"):
                if header_line is not None:
                    yield "".join(chunks), header_line
                header_line, chunks = number, []
            elif text:
                if header_line is None:
                    raise ValueError(f"{path}: line {number}: no FASTA records: a sequence before the first '>' "
                                     "header")
                chunks.append(text)
    if header_line is None:
        raise ValueError(f"{path}: no FASTA records")
    yield "".join(chunks), header_line


def reservoir_sample(items: Iterable[T], size: int, rng: np.random.Generator) -> tuple[list[T], int]:
    """A uniform sample of at most `size` of `items`, read once (Vitter's Algorithm R: the i-th item replaces a
    uniformly chosen slot with probability size / i), in memory `size` items, not the stream. Returns the sample
    and how many items there were."""
    sample: list[T] = []
    count = 0
    for item in items:
        count += 1
        if len(sample) < size:
            sample.append(item)
        else:
            j = int(rng.integers(count))
            if j < size:
                sample[j] = item
    return sample, count
