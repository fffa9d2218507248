"""Text for the tiny language models: the King James Bible as bytes, with key records mixed in.

* The KJV comes from Debian's ``sword-text-kjv`` through ``diatheke`` (public domain, ~860k
  words), or from any UTF-8 text file a user names. It is read as UTF-8 bytes (vocabulary
  256): no tokenizer to ship, and every token is one position, so T counts characters.
* Far context that matters by construction of the data: key records of two bytes, a key byte
  and a value byte (``K V``), written over the text, each key several times in a window with the
  same value (:func:`training_sample`). A repeat's value is predictable only by looking back to an
  earlier record with the same key, however far away (associative recall, the multi-key retrieval
  of the paper's passkey and RULER tests). The key bytes are the 13 byte values that never occur in
  UTF-8 text (0xC0, 0xC1, 0xF5-0xFF; RFC 3629), so nothing in any text that ``read_text_file``
  accepts predicts them or what follows them; the values are capital letters (chance 1/26).
  The format is ours: the paper's passkey is a sentence in text ("The pass key is 12345"), whose
  retrieval needs a match over several tokens; a one-byte key needs the one-token match of plain
  induction (Olsson et al. 2022), the retrieval a model this small learns within the budget.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

# ``diatheke -b system -k modulelist`` names the Debian package's module engKJV2006eb.
KJV_MODULE = "engKJV2006eb"
KJV_RANGE = "Genesis-Revelation"

# Byte values that never occur in UTF-8 (RFC 3629 Sec. 1 and 4: C0, C1 and F5-FF are invalid everywhere).
KEY_BYTES = np.array([0xC0, 0xC1, *range(0xF5, 0x100)], dtype=np.uint8)
VALUE_BYTES = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", dtype=np.uint8).copy()
RECORD_LEN = 2  # key byte, value byte; the answer is the value, one byte after the key


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
def _check_no_keys(text: np.ndarray) -> None:
    if np.isin(text, KEY_BYTES).any():  # impossible for bytes decoded as UTF-8; guards other callers
        raise ValueError("the text contains a key byte (0xC0, 0xC1, 0xF5-0xFF): it is not UTF-8")


def _free(taken: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return all(hi <= a or lo >= b for a, b in taken)


def _write_records(rng: np.random.Generator, x: np.ndarray, recall: np.ndarray, keys: np.ndarray,
                   slots: np.ndarray) -> None:
    """Write ``keys[i]`` and its value at ``slots[i]`` (the values drawn once per distinct key); mark
    in ``recall`` the value of every occurrence of a key after its first."""
    distinct = np.unique(keys)
    value = dict(zip(distinct.tolist(), rng.choice(VALUE_BYTES, len(distinct)).tolist()))
    seen = set()
    for key, at in zip(keys.tolist(), slots.tolist()):
        x[at], x[at + 1] = key, value[key]
        recall[at + 1] = key in seen
        seen.add(key)


def training_sample(rng: np.random.Generator, text: np.ndarray, length: int, max_records: int,
                    repeats: int) -> tuple[np.ndarray, np.ndarray]:
    """A random window of ``length`` text bytes with 1 .. ``max_records`` distinct keys, each
    written ``repeats`` times with one value (2-byte records ``K V`` at random even offsets, in
    random order). Returns ``(tokens (length,), recall (length,) bool)``: ``recall`` marks the
    values of the repeats, the bytes only an earlier record predicts (given extra weight in
    training)."""
    if not 1 <= max_records <= len(KEY_BYTES):
        raise ValueError(f"max_records must lie in 1 .. {len(KEY_BYTES)} (the key bytes), got {max_records}")
    n = int(rng.integers(1, max_records + 1))
    if n * repeats * RECORD_LEN > length:
        raise ValueError(f"a window of {length} bytes cannot hold {n} x {repeats} records")
    start = int(rng.integers(0, len(text) - length + 1))
    x = text[start: start + length].copy()
    _check_no_keys(x)
    recall = np.zeros(length, dtype=bool)
    keys = np.repeat(rng.choice(KEY_BYTES, n, replace=False), repeats)
    rng.shuffle(keys)
    slots = np.sort(rng.choice(length // RECORD_LEN, len(keys), replace=False)) * RECORD_LEN
    _write_records(rng, x, recall, keys, slots)
    return x, recall


def record_drill(rng: np.random.Generator, length: int) -> tuple[np.ndarray, np.ndarray]:
    """A window made of records only: ``length // 2`` records whose keys are drawn uniformly from all
    key bytes, one value per key (a trailing odd byte is a value byte). The retrieval skill alone,
    with ~30 times the answers of a text window: the multi-query associative recall drill of Arora
    et al. 2024 (Zoology), used as a warm-up. Returns ``(tokens, recall)`` as :func:`training_sample`."""
    x = rng.choice(VALUE_BYTES, length)
    recall = np.zeros(length, dtype=bool)
    n = length // RECORD_LEN
    _write_records(rng, x, recall, rng.choice(KEY_BYTES, n), np.arange(n) * RECORD_LEN)
    return x, recall


def retrieval_prompt(rng: np.random.Generator, text: np.ndarray, start: int, length: int, n_keys: int,
                     depth: float, width: int = RECORD_LEN) -> tuple[np.ndarray, int, int]:
    """A retrieval prompt of ``length`` bytes: ``text[start:]`` with ``n_keys`` records written
    over it, the queried one (the first key) at ``depth`` (0 = the start, 1 = just before the
    query), the others (distinct keys, their own values) at uniform random places; it ends with the
    queried key, whose value (the last byte) is the answer. ``n_keys = 1`` is passkey retrieval;
    more is multi-key retrieval. Returns ``(tokens, answer_at, needle_at)``.

    ``width`` (even, >= 2) is how many positions each record in the haystack spans: its ``K V`` pair
    written ``width / 2`` times in a row. A one-pair record (width 2) has no attention locality: the
    keys next to it score like any text, which a search that scores one representative block per
    chunk cannot exploit. The paper's passkey is a sentence of many tokens ("The pass key is 12345.
    Remember it. 12345 is the pass key."), so its needle spans many positions; a wide record is that
    regime in our format (every pair of it answers the query alike). The query stays one pair."""
    if width < RECORD_LEN or width % RECORD_LEN:
        raise ValueError(f"width must be a positive multiple of {RECORD_LEN}, got {width}")
    x = text[start: start + length].copy()
    if len(x) < length:
        raise ValueError(f"held-out text too short for a prompt of {length} bytes at {start}")
    if not 1 <= n_keys <= len(KEY_BYTES):
        raise ValueError(f"n_keys must lie in 1 .. {len(KEY_BYTES)} (the key bytes), got {n_keys}")
    _check_no_keys(x)
    query_at = length - RECORD_LEN
    room = query_at - width  # last place a record may start before the query
    if room < 0 or n_keys * width > query_at:
        raise ValueError(f"a prompt of {length} bytes cannot hold {n_keys} records of width {width} and the query")
    needle_at = int(round(depth * room))
    keys = rng.choice(KEY_BYTES, n_keys, replace=False)
    values = rng.choice(VALUE_BYTES, n_keys)
    taken = [(needle_at, needle_at + width), (query_at, length)]
    x[needle_at: needle_at + width] = np.tile([keys[0], values[0]], width // RECORD_LEN)
    x[query_at], x[query_at + 1] = keys[0], values[0]
    for key, value in zip(keys[1:], values[1:]):
        for _ in range(100):
            at = int(rng.integers(0, room + 1))
            if _free(taken, at, at + width):
                break
        else:
            raise ValueError(f"no free place for {n_keys} records of width {width} in a prompt of {length} bytes")
        x[at: at + width] = np.tile([key, value], width // RECORD_LEN)
        taken.append((at, at + width))
    return x, query_at + 1, needle_at
