"""Text for the tiny language models: the King James Bible as bytes, with key records mixed in.

* The KJV comes from Debian's ``sword-text-kjv`` through ``diatheke`` (public domain, ~860k
  words), or from any UTF-8 text file a user names. It is read as UTF-8 bytes (vocabulary
  256): no tokenizer to ship, and every token is one position, so T counts characters.
* Far context that matters by construction of the data: key records ``<key NM is 12345>`` (a
  name of two capital letters, five random digits) are inserted into the text, and each is repeated
  later (:func:`insert_records`). The first copy's digits are random; the repeat's digits are
  predictable only by looking back to the first copy, however far away (an associative recall /
  multi-key retrieval task, as the paper's passkey and RULER tests). ``<`` does not occur in the
  KJV, so nothing else in the text predicts the digits; the shared ``<key `` prefix is the
  official passkey prompt's "The pass key is" in small (a long common prefix to match on).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

# ``diatheke -b system -k modulelist`` names the Debian package's module engKJV2006eb.
KJV_MODULE = "engKJV2006eb"
KJV_RANGE = "Genesis-Revelation"

KEY_DIGITS = 5
RECORD = "<key {name} is {key}>"  # 17 bytes; the key starts at byte 11
KEY_OFFSET = 11
RECORD_LEN = len(RECORD.format(name="AB", key="0" * KEY_DIGITS))


def read_diatheke(module: str = KJV_MODULE, key: str = KJV_RANGE) -> str:
    """The text of a SWORD module through diatheke. ``-o h`` turns section headings on: without
    it diatheke 1.9 repeats the last heading before every later verse (e.g. Psalm 145's)."""
    try:
        out = subprocess.run(["diatheke", "-b", module, "-f", "plain", "-o", "h", "-k", key],
                             check=True, capture_output=True)
    except FileNotFoundError:
        raise RuntimeError("diatheke not found: apt-get install diatheke sword-text-kjv "
                           "(or set hip.data.text to a UTF-8 text file)") from None
    text = out.stdout.decode("utf-8")
    if not text.strip() or text.strip() == f"({module})":
        raise RuntimeError(f"diatheke returned no text for module {module!r} (installed: "
                           f"`diatheke -b system -k modulelist`)")
    return text


def read_text_file(path: str | Path) -> str:
    """A UTF-8 text file; a byte that is not UTF-8 is reported with its file and line."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def clean(text: str, module: str = KJV_MODULE) -> str:
    """One verse (or heading) per line: strip indentation, drop blank lines and diatheke's
    trailing ``(module)`` line."""
    lines = (line.strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and line != f"({module})") + "\n"


def to_bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def write_tokens(tokens: np.ndarray, path: str | Path) -> None:
    """Token ids (uint8 bytes) as a one-column Parquet file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"token": tokens.astype(np.uint8)}).to_parquet(path, index=False)


def load_tokens(path: str | Path) -> np.ndarray:
    """Token ids written by :func:`write_tokens`; a file without a uint8 ``token`` column is refused."""
    df = pd.read_parquet(path)
    if "token" not in df.columns:
        raise ValueError(f"{path}: no column 'token' (columns: {list(df.columns)})")
    if df["token"].dtype != np.uint8:
        raise ValueError(f"{path}: column 'token' must be uint8 bytes, got {df['token'].dtype}")
    return df["token"].to_numpy()




# ---- key records: far context that matters by construction ---------------------------------------
def record_bytes(name: str, key: str) -> np.ndarray:
    """``<key NM is 12345>`` as bytes."""
    return to_bytes(RECORD.format(name=name, key=key))


def random_names(rng: np.random.Generator, n: int) -> list[str]:
    """n distinct names of two capital letters."""
    codes = rng.choice(26 * 26, size=n, replace=False)
    return [chr(65 + c // 26) + chr(65 + c % 26) for c in codes]


def random_key(rng: np.random.Generator) -> str:
    return str(rng.integers(10 ** (KEY_DIGITS - 1), 10 ** KEY_DIGITS))


def _free(taken: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return all(hi <= a or lo >= b for a, b in taken)


def _two_free_places(rng: np.random.Generator, taken: list[tuple[int, int]], length: int, span: int,
                     min_gap: int) -> tuple[int, int] | None:
    """Starts (a, b) of two spans of `span` bytes, b at least `min_gap` bytes after a's end, both clear of
    `taken`, by rejection sampling (20 tries); None when no try succeeds."""
    for _ in range(20):
        a = int(rng.integers(0, length - 2 * span - min_gap + 1))
        b = int(rng.integers(a + span + min_gap, length - span + 1))
        if _free(taken, a, a + span) and _free(taken, b, b + span):
            return a, b
    return None


def training_sample(rng: np.random.Generator, text: np.ndarray, length: int, max_records: int,
                    min_gap: int, copy_spans: int = 0, span_len: int = 64,
                    periodic: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """A random window of ``length`` text bytes with 1 .. ``max_records`` records written over it,
    each repeated later, at least ``min_gap`` bytes after its first copy ends; and ``copy_spans``
    passages of ``span_len`` bytes of the window copied again later (a passage quoted twice: the
    copy is predictable by looking back, which teaches the model to copy -- induction heads --
    in far fewer steps than the records alone). With probability ``periodic`` the window is a
    passage repeated with a random period in ``[min_gap, length / 2)`` instead, as the official
    passkey prompts' repeated filler: every byte after the first period is a copy.

    Returns ``(tokens (length,), recall (length,) bool)``: ``recall`` marks the repeats' key
    digits, the copied passages past their first 4 bytes and the periodic repeats, the bytes only
    far context predicts (given extra weight in training)."""
    if length < 2 * RECORD_LEN + min_gap:
        raise ValueError(f"a window of {length} bytes cannot hold a record and its repeat {min_gap} bytes later")
    start = int(rng.integers(0, len(text) - length))
    x = text[start: start + length].copy()
    recall = np.zeros(length, dtype=bool)
    taken: list[tuple[int, int]] = []
    if rng.random() < periodic:  # a passage of `period` bytes repeated to the end (the official passkey filler)
        period = int(rng.integers(min_gap, max(length // 2, min_gap + 1)))
        x = np.resize(x[:period], length)
        recall[period:] = True
    names = random_names(rng, max_records)
    for name in names[: int(rng.integers(1, max_records + 1))]:
        places = _two_free_places(rng, taken, length, RECORD_LEN, min_gap)
        if places is None:
            continue
        first, repeat = places
        rec = record_bytes(name, random_key(rng))
        x[first: first + RECORD_LEN] = rec
        x[repeat: repeat + RECORD_LEN] = rec
        recall[repeat + KEY_OFFSET: repeat + KEY_OFFSET + KEY_DIGITS] = True
        taken += [(first, first + RECORD_LEN), (repeat, repeat + RECORD_LEN)]
    if length >= 2 * span_len + min_gap:
        for _ in range(copy_spans):
            places = _two_free_places(rng, taken, length, span_len, min_gap)
            if places is None:
                continue
            src, dst = places
            x[dst: dst + span_len] = x[src: src + span_len]
            recall[dst + 4: dst + span_len] = True
            taken += [(src, src + span_len), (dst, dst + span_len)]
    return x, recall


DRILL_ALPHABET = to_bytes("abcdefghijklmnopqrstuvwxyz0123456789")


def copy_drill(rng: np.random.Generator, length: int, min_gap: int) -> tuple[np.ndarray, np.ndarray]:
    """A window of ``length`` random letters and digits with period ``P`` drawn in ``[min_gap, length / 2)``:
    every byte after the first period is a copy of the byte ``P`` back, and nothing else predicts it (no text
    statistics to fall back on). The copying skill the key records need (match what precedes, copy what
    follows: an induction head), drilled on data where it is the only way to lower the loss.
    Returns ``(tokens (length,), recall (length,) bool)``, recall marking the copies."""
    if length < 2 * min_gap + 1:
        raise ValueError(f"a drill window of {length} bytes cannot repeat a period of {min_gap} bytes")
    period = int(rng.integers(min_gap, length // 2))
    x = np.resize(DRILL_ALPHABET[rng.integers(0, len(DRILL_ALPHABET), period)], length)
    recall = np.zeros(length, dtype=bool)
    recall[period:] = True
    return x, recall


def retrieval_prompt(rng: np.random.Generator, text: np.ndarray, start: int, length: int, n_keys: int,
                     depth: float) -> tuple[np.ndarray, int, int]:
    """A retrieval prompt of ``length`` bytes: ``text[start:]`` with ``n_keys`` records written
    over it, the queried one (the first name) at ``depth`` (0 = the start, 1 = just before the
    query), the others at uniform random places; it ends with the queried record again, whose
    five digits are the answer. ``n_keys = 1`` is passkey retrieval; more is multi-key
    retrieval (the distractors share the format). Returns ``(tokens, answer_start, needle_at)``."""
    x = text[start: start + length].copy()
    if len(x) < length:
        raise ValueError(f"held-out text too short for a prompt of {length} bytes at {start}")
    query_at = length - RECORD_LEN
    room = query_at - RECORD_LEN  # last place a record may start before the query
    needle_at = int(round(depth * room))
    names = random_names(rng, n_keys)
    taken = [(needle_at, needle_at + RECORD_LEN), (query_at, length)]
    key = random_key(rng)
    x[needle_at: needle_at + RECORD_LEN] = record_bytes(names[0], key)
    x[query_at:] = record_bytes(names[0], key)
    for name in names[1:]:
        for _ in range(100):
            at = int(rng.integers(0, room + 1))
            if _free(taken, at, at + RECORD_LEN):
                break
        x[at: at + RECORD_LEN] = record_bytes(name, random_key(rng))
        taken.append((at, at + RECORD_LEN))
    return x, query_at + KEY_OFFSET, needle_at
