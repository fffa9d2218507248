"""papers.common: the loaders, the claims contract, parameters and tables."""
import gzip
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dataclasses import dataclass, field

from papers.common.datasets import load_cifar, load_digits
import types

from papers.common.params import ALL, StageConfig, UndeclaredParameter, for_stage, from_config, stage_section, to_dict
from papers.common.tables import mean_std, write_table

ROOT = Path(__file__).resolve().parents[2]


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


def _paper(stage_params, params=_Outer):
    """A stand-in for a paper's params module: its Params class and its STAGE_PARAMS."""
    return types.SimpleNamespace(Params=params, STAGE_PARAMS=stage_params, __file__="demo/params.py")


def test_a_stage_is_given_the_parameters_it_declares_and_reads_no_other():
    section = {"seeds": 3, "inner": {"lr": 0.5}}  # `sizes` is not configured: its default applies
    paper = _paper({"train": ("seeds", "sizes"), "report": ALL})
    assert stage_section(paper, "train", section, "demo") == {"seeds": 3}  # what the rerun trigger sees
    assert stage_section(paper, "report", section, "demo") == section
    with pytest.raises(KeyError, match="stage 'plot' has no entry in STAGE_PARAMS in demo/params.py"):
        stage_section(paper, "plot", section, "demo")
    with pytest.raises(KeyError, match="names lrr"):
        stage_section(_paper({"train": ("lrr",)}), "train", section, "demo")

    # The stage gets the whole section, but reading `inner` (configured, not declared) is refused:
    # a change to it would not rerun the stage, so reading it would give stale results.
    full = from_config(_Outer, section, where="demo")
    view = for_stage(full, StageConfig(section, readable={"seeds": 3}, rule="demo_train"))
    assert (view.seeds, view.sizes) == (3, (1, 2))
    with pytest.raises(UndeclaredParameter, match="rule demo_train reads parameter 'inner'"):
        view.inner
    assert to_dict(view) == {"seeds": 3, "sizes": [1, 2]}  # what a checkpoint records
    assert "inner" not in repr(view)
    # Outside a rule (tests, notebooks) a plain mapping gives the parameters unchanged.
    assert for_stage(full, section) is full and to_dict(full)["inner"] == {"lr": 0.5}


@dataclass(frozen=True)
class _Inner2:
    lr: float = 0.1
    momentum: float = 0.0


@dataclass(frozen=True)
class _Outer2:
    seeds: int = 1
    inner: _Inner2 = field(default_factory=_Inner2)
    extra: dict = field(default_factory=dict)


def test_a_stage_may_declare_one_key_of_a_nested_section():
    """`inner.lr` declared: a change to `inner.momentum` does not rerun the stage, so the stage may not read it."""
    section = {"seeds": 3, "inner": {"lr": 0.5, "momentum": 0.9}, "extra": {"a": 1, "b": 2}}
    paper = _paper({"train": ("seeds", "inner.lr", "extra.a"), "both": ("inner", "inner.lr")}, _Outer2)
    view_cfg = stage_section(paper, "train", section, "demo")
    assert view_cfg == {"seeds": 3, "inner": {"lr": 0.5}, "extra": {"a": 1}}
    assert section["inner"] == {"lr": 0.5, "momentum": 0.9}  # the config itself is left as it was
    assert stage_section(paper, "both", section, "demo") == {"inner": {"lr": 0.5, "momentum": 0.9}}
    with pytest.raises(KeyError, match="seeds.x, but demo.seeds is not a section"):
        stage_section(_paper({"train": ("seeds.x",)}, _Outer2), "train", section, "demo")

    Outer2 = _Outer2
    full = from_config(Outer2, section, where="demo")
    view = for_stage(full, StageConfig(section, readable=view_cfg, rule="demo_train"))
    assert (view.seeds, view.inner.lr, view.extra["a"], view.extra.get("a")) == (3, 0.5, 1, 1)
    with pytest.raises(UndeclaredParameter, match="'momentum'"):
        view.inner.momentum  # a dataclass section
    with pytest.raises(UndeclaredParameter, match="'extra.b'"):
        view.extra["b"]  # a plain mapping section
    assert dict(view.extra.items()) == {"a": 1} and full.extra["b"] == 2 and full.inner.momentum == 0.9
    assert to_dict(view) == {"seeds": 3, "inner": {"lr": 0.5}, "extra": {"a": 1}}  # what a checkpoint records


def test_tables(tmp_path):
    assert mean_std([1.0, 2.0, 3.0]) == "2 +- 1"
    assert mean_std([0.5]) == "0.5"
    df = pd.DataFrame({"arm": ["a", "b"], "value": ["1 +- 0", "2 +- 0"]})
    write_table(df, tmp_path / "t.md", tmp_path / "t.csv", caption="Cap.",
                csv_df=pd.DataFrame({"arm": ["a", "b"], "mean": [1.0, 2.0 / 3.0]}))
    assert (tmp_path / "t.md").read_text().startswith("Cap.\n\n| arm | value |\n|---|---|\n| a | 1 +- 0 |")
    assert (tmp_path / "t.csv").read_text() == "arm,mean\na,1\nb,0.666667\n"


def test_run_times_are_summed_from_benchmark_files_and_set_against_the_budget(tmp_path):
    from papers.common.summary import time_table

    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"

    def bench(name, seconds, cpu):
        path = tmp_path / f"{name}.tsv"
        path.write_text(header + f"{seconds}\t0:00:00\t1\t1\t1\t1\t0\t0\t50\t{cpu}\n")
        return path

    jobs = {
        "fast": [bench("f1", 100.0, 90.0), bench("f2", 50.5, 40.0)],  # 150.5 s <= 360
        "contended": [bench("c1", 400.0, 200.0)],  # over in wall time, within in CPU time
        "slow": [bench("s1", 500.0, 450.0), bench("s2", 500.0, 480.0)],  # its own budget, 900: over
    }
    times = time_table(jobs, {"default": 360, "slow": 900}).set_index("paper")
    assert times.loc["fast", "seconds"] == 150.5 and times.loc["fast", "cpu_seconds"] == 130.0
    assert times.loc["fast", "jobs"] == 2 and times.loc["fast", "within_budget"] == "yes"
    assert times.loc["contended", "within_budget"] == "over in wall time, within in CPU time"
    assert times.loc["slow", "budget_seconds"] == 900 and times.loc["slow", "within_budget"] == "over"
    assert set(time_table(jobs, {}).within_budget) == {"no budget"}  # a scale without budgets (full)


def test_a_paper_without_benchmark_files_keeps_the_run_times_its_own_run_recorded(tmp_path):
    """benchmarks/ is not committed, so on a clone the summary regenerates from the claims alone: a paper whose
    benchmark files are absent takes the sums its run recorded beside its results; one rerun here is measured
    afresh from its benchmark files."""
    from papers.common.summary import write_summary

    run = tmp_path / "results" / "default"
    claims, reports = [], []
    for slug in ("welfare", "hip"):
        (run / slug).mkdir(parents=True)
        for name in ("claims.json", "report.md"):
            shutil.copyfile(ROOT / "results" / "default" / slug / name, run / slug / name)
        claims.append(run / slug / "claims.json")
        reports.append(run / slug / "report.md")
    bench = tmp_path / "welfare_job.tsv"
    bench.write_text("s\tcpu_time\n12.5\t10.0\n")
    (run / "hip" / "job_times.csv").write_text("jobs,seconds,cpu_seconds\n17,1515.39,493.86\n")  # from its run
    (run / "welfare" / "job_times.csv").write_text("jobs,seconds,cpu_seconds\n21,947.61,85.2\n")  # superseded
    write_summary(claims=claims, reports=reports, summary_md=run / "summary.md", summary_csv=run / "summary.csv",
                  scale="default", job_benchmarks={"welfare": [str(bench)], "hip": [str(tmp_path / "absent.tsv")]},
                  time_budget={"default": 360, "hip": 900}, job_times_csv=run / "job_times.csv")
    times = pd.read_csv(run / "job_times.csv")
    assert list(times["paper"]) == ["welfare", "hip"]  # the order of the selected papers
    assert times.iloc[0].tolist() == ["welfare", 1, 12.5, 10.0, 360, "yes"]  # measured here
    assert times.iloc[1].tolist() == ["hip", 17, 1515.39, 493.86, 900, "over in wall time, within in CPU time"]
    assert "| hip | 17 | 1515 | 494 | 900 | over in wall time, within in CPU time |" in (run / "summary.md").read_text()


def test_a_paper_s_job_times_are_recorded_only_from_a_complete_set_of_benchmark_files(tmp_path):
    from papers.common.records import export_job_times

    jobs = [tmp_path / "a.tsv", tmp_path / "b.tsv"]
    jobs[0].write_text("s\th:m:s\tcpu_time\n10.5\t0:00:10\t8.25\n")
    assert not export_job_times([str(p) for p in jobs], tmp_path / "times.csv")  # b.tsv missing: a partial run
    assert not (tmp_path / "times.csv").exists()
    jobs[1].write_text("")  # touched, never timed (a fake scheduler, --touch)
    assert not export_job_times([str(p) for p in jobs], tmp_path / "times.csv")
    jobs[1].write_text("s\th:m:s\tcpu_time\n2\t0:00:02\t1.75\n")
    assert export_job_times([str(p) for p in jobs], tmp_path / "times.csv")
    assert (tmp_path / "times.csv").read_text() == "jobs,seconds,cpu_seconds\n2,12.5,10\n"


def test_fasta_records_join_lines_name_header_lines_and_reject_bad_files(tmp_path):
    from papers.common.fasta import fasta_records

    good = tmp_path / "a.fasta"
    good.write_text(">one x\nMKT\nAYI\n\n>two\nQR\n>empty\n")
    assert list(fasta_records(good)) == [("MKTAYI", 1), ("QR", 5), ("", 7)]
    for text, where in (("MKT\n>x\nA\n", "line 1"), ("", "no FASTA records")):
        bad = tmp_path / "b.fasta"
        bad.write_text(text)
        with pytest.raises(ValueError, match=f"b.fasta: .*{where}"):
            list(fasta_records(bad))


def test_reservoir_sample_keeps_each_item_with_probability_size_over_count():
    # Algorithm R: every one of N items ends in the sample with probability k / N (exactly); fewer than k: all
    from papers.common.fasta import reservoir_sample

    k, n, trials = 5, 40, 4000
    kept = np.zeros(n)
    for seed in range(trials):
        sample, count = reservoir_sample(iter(range(n)), k, np.random.default_rng(seed))
        assert count == n and len(set(sample)) == k
        kept[sample] += 1
    # binomial sd of each item's share: sqrt(p (1 - p) / trials) = 0.0058; 5 sd over 40 items
    np.testing.assert_allclose(kept / trials, k / n, atol=0.03)
    assert reservoir_sample(range(3), k, np.random.default_rng(0)) == ([0, 1, 2], 3)
