"""papers.common: the loaders, the claims contract, parameters and tables."""
import gzip
import pickle

import numpy as np
import pandas as pd
import pytest
from dataclasses import dataclass, field

from papers.common.datasets import load_cifar, load_digits
from papers.common.params import from_config
from papers.common.tables import mean_std, write_table


def test_digits_loader_reads_the_packaged_file_and_names_bad_lines(tmp_path):
    x, y = load_digits()
    assert x.shape == (1797, 64) and x.dtype == np.float32 and x.min() == 0 and x.max() == 1.0
    assert np.bincount(y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]  # UCI digits class counts
    bad = tmp_path / "digits.csv.gz"
    with gzip.open(bad, "wt") as f:
        f.write(",".join(["0"] * 64) + ",3\n" + ",".join(["0"] * 63) + ",3\n")
    with pytest.raises(ValueError, match=r"digits.csv.gz, line 2: expected 65 values"):
        load_digits(bad)
    bad.write_bytes(gzip.compress(b",".join([b"0"] * 64) + b",x\n"))
    with pytest.raises(ValueError, match="line 1: not a row of numbers"):
        load_digits(bad)


def test_cifar_loader_folder_and_npz(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name, n in [*((f"data_batch_{i}", 2) for i in range(1, 6)), ("test_batch", 3)]:
        (folder / name).write_bytes(pickle.dumps({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                                                  b"labels": [7] * n}))
    x, y = load_cifar(folder, "train")
    assert x.shape == (10, 3, 32, 32) and 0 <= x.min() and x.max() <= 1 and set(y) == {7}
    raw = pickle.loads((folder / "test_batch").read_bytes())[b"data"]
    np.testing.assert_allclose(load_cifar(folder, "test")[0].reshape(3, -1), raw / 255.0, rtol=1e-6)
    (folder / "test_batch").write_bytes(pickle.dumps({b"oops": 1}))
    with pytest.raises(ValueError, match="test_batch: not a CIFAR batch"):
        load_cifar(folder, "test")
    npz = tmp_path / "c.npz"
    np.savez(npz, x_train=np.zeros((2, 32, 32, 3), np.uint8), y_train=[1, 2], x_test=np.zeros((1, 28, 28)), y_test=[0])
    assert load_cifar(npz, "train")[0].shape == (2, 3, 32, 32)  # channel-last accepted
    with pytest.raises(ValueError, match="x_test"):
        load_cifar(npz, "test")


@dataclass(frozen=True)
class _Inner:
    lr: float = 0.1


@dataclass(frozen=True)
class _Outer:
    seeds: int = 1
    sizes: tuple = (1, 2)
    inner: _Inner = field(default_factory=_Inner)


def test_from_config_builds_nested_dataclasses_and_names_unknown_keys():
    p = from_config(_Outer, {"seeds": 3, "sizes": [4, 5], "inner": {"lr": 0.5}}, where="demo")
    assert p == _Outer(3, (4, 5), _Inner(0.5))
    with pytest.raises(KeyError, match="demo.inner.lrr"):
        from_config(_Outer, {"inner": {"lrr": 1}}, where="demo")


def test_tables(tmp_path):
    assert mean_std([1.0, 2.0, 3.0]) == "2 +- 1"
    assert mean_std([0.5]) == "0.5"
    df = pd.DataFrame({"arm": ["a", "b"], "value": ["1 +- 0", "2 +- 0"]})
    write_table(df, tmp_path / "t.md", tmp_path / "t.csv", caption="Cap.",
                csv_df=pd.DataFrame({"arm": ["a", "b"], "mean": [1.0, 2.0 / 3.0]}))
    assert (tmp_path / "t.md").read_text().startswith("Cap.\n\n| arm | value |\n|---|---|\n| a | 1 +- 0 |")
    assert (tmp_path / "t.csv").read_text() == "arm,mean\na,1\nb,0.666667\n"
