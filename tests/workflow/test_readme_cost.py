"""The README's cost sentence is computed from the summary's job times (scripts/readme_claims.py)."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _readme_claims():
    spec = importlib.util.spec_from_file_location("readme_claims", ROOT / "scripts" / "readme_claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cost_sentence_sums_cpu_time_and_names_every_paper_over_budget(tmp_path):
    rc = _readme_claims()
    path = tmp_path / "job_times.csv"
    path.write_text("paper,jobs,seconds,cpu_seconds,budget_seconds,within_budget\n"
                    "a,3,500,300,360,yes\nb,2,4000,2400,900,over\nc,1,90,60,360,yes\n")
    text = rc.cost_sentence(path)
    assert text.startswith("2,760 s (46 min) in all") and "at least 23 min" in text and "within the 60-minute" in text
    assert "1 of 3 papers are over their budget in CPU time: b 2,400 s of 900." in text
    path.write_text("paper,jobs,seconds,cpu_seconds,budget_seconds,within_budget\na,3,500,7300,9000,yes\n")
    text = rc.cost_sentence(path)
    assert "over the 60-minute target" in text and text.endswith("Every paper is within its budget in CPU time.")


def test_readme_cost_sentence_matches_the_committed_job_times():
    """The committed README says what the committed summary's job times say (rerun scripts/readme_claims.py)."""
    rc = _readme_claims()
    readme = (ROOT / "README.md").read_text()
    sentence = rc.cost_sentence(ROOT / "results" / "default" / "job_times.csv")
    assert f"<!-- COST -->{sentence}<!-- /COST -->" in readme
