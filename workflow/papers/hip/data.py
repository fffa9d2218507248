"""Text for the tiny language models: the King James Bible as bytes, and passkey-retrieval samples.

* The KJV comes from Debian's ``sword-text-kjv`` through ``diatheke`` (public domain, ~860k
  words), or from any UTF-8 text file a user names. It is read as UTF-8 bytes (vocabulary
  256): no tokenizer to ship, and every token is one position, so T counts characters.
* Passkey retrieval as in the official repository's data set (``hip_research/dataset/
  passkey.py``): a five-digit key hidden at a random depth of repeated filler text, then a
  question; the model must copy the key. Shortened for a byte-level model (no chat template,
  the key sentence once), and the key follows "is: " in both the key sentence and the question:
  "is " alone also ends three phrases of every filler, which a byte model cannot tell apart
  (see :func:`passkey_sample`).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

# ``diatheke -b system -k modulelist`` names the Debian package's module engKJV2006eb.
KJV_MODULE = "engKJV2006eb"
KJV_RANGE = "Genesis-Revelation"

# The official passkey data set's filler sentence, verbatim.
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PREFIX = "Remember the pass key.\n"
KEY_LINE = "The pass key is: {key}. Remember it. {key} is the pass key. "
QUERY = "\nWhat is the pass key? The pass key is: "
KEY_DIGITS = 5


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


# ---- passkey retrieval ---------------------------------------------------------------------------
def passkey_min_length(key_repeats: int = 1) -> int:
    """Bytes of a passkey prompt and answer without filler."""
    return len(PREFIX) + len(KEY_LINE.format(key="0" * KEY_DIGITS)) * key_repeats + len(QUERY) + KEY_DIGITS


def passkey_sample(rng: np.random.Generator, length: int, key_repeats: int = 1) -> tuple[np.ndarray, int, int]:
    """One passkey prompt of about ``length`` bytes followed by its answer.

    Layout as in the official data set: prefix, filler repeated, the key sentence (``key_repeats``
    times in a row; the official data set repeats its key sentence five times) inserted between
    two fillers at a uniformly random depth, the question, the five digits. Returns
    ``(tokens, answer_start, key_start)``: the bytes (the prompt padded with filler to exactly
    ``length - KEY_DIGITS`` bytes, then the answer), the index of the first answer byte and
    that of the key sentence.
    """
    key = str(rng.integers(10 ** (KEY_DIGITS - 1), 10 ** KEY_DIGITS))
    key_line = KEY_LINE.format(key=key) * key_repeats
    room = length - KEY_DIGITS - len(PREFIX) - len(key_line) - len(QUERY)
    if room < 0:
        raise ValueError(f"passkey length {length} too short: needs at least {length - room} bytes")
    n_fill = room // len(FILLER)
    depth = int(rng.integers(0, n_fill + 1))  # fillers before the key, uniform in 0 .. n_fill
    pad = FILLER[: room - n_fill * len(FILLER)]  # tops the prompt up to the exact length
    prompt = PREFIX + FILLER * depth + key_line + FILLER * (n_fill - depth) + pad + QUERY
    tokens = to_bytes(prompt + key)
    assert len(tokens) == length, (len(tokens), length)
    return tokens, length - KEY_DIGITS, len(PREFIX) + depth * len(FILLER)


def passkey_batch(rng: np.random.Generator, n: int, length: int,
                  key_repeats: int = 1) -> tuple[np.ndarray, int, np.ndarray]:
    """(n, length) uint8 prompts with answers, the answer start (the same for all), and the
    key sentence's start (n,)."""
    samples = [passkey_sample(rng, length, key_repeats) for _ in range(n)]
    return np.stack([s[0] for s in samples]), samples[0][1], np.array([s[2] for s in samples])
