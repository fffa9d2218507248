"""scripts/compare_results.py: a fresh run reproduces the reference when verdicts agree and intervals overlap."""
import copy
import json
import shutil
import subprocess
import sys

from smk import ROOT

SCRIPT = ROOT / "scripts" / "compare_results.py"
WELFARE = ROOT / "results" / "default" / "welfare" / "claims.json"  # committed


def _run(reference, fresh):
    return subprocess.run([sys.executable, str(SCRIPT), str(reference), str(fresh)], capture_output=True, text=True)


def _write(folder, claims):
    (folder / "welfare").mkdir(parents=True, exist_ok=True)
    (folder / "welfare" / "claims.json").write_text(json.dumps(claims))


def _shift(evidence, widths):
    """Move the effect and interval of the evidence and of each part by `widths` times its own width."""
    for test in [evidence, *evidence.get("parts", [])]:
        by = widths * (test["interval"][1] - test["interval"][0])
        test["effect"] += by
        test["interval"] = [x + by for x in test["interval"]]


def test_same_verdicts_and_overlapping_intervals_reproduce(tmp_path):
    reference = json.loads(WELFARE.read_text())
    fresh = copy.deepcopy(reference)
    for claim in fresh["claims"]:  # numbers drift a little, as on another machine
        _shift(claim["evidence"], 0.1)
    _write(tmp_path / "ref", reference)
    _write(tmp_path / "new", fresh)
    result = _run(tmp_path / "ref", tmp_path / "new")
    assert result.returncode == 0, result.stdout
    assert f"1 papers, {len(reference['claims'])} claims compared: every verdict" in result.stdout


def test_a_changed_verdict_or_a_moved_interval_is_reported(tmp_path):
    reference = json.loads(WELFARE.read_text())
    fresh = copy.deepcopy(reference)
    fresh["claims"][0]["verdict"] = "inconclusive"
    _shift(fresh["claims"][1]["evidence"], 3)  # moved past its own width: no overlap
    del fresh["claims"][2]
    _write(tmp_path / "ref", reference)
    _write(tmp_path / "new", fresh)
    result = _run(tmp_path / "ref", tmp_path / "new")
    assert result.returncode == 1
    out = result.stdout
    assert "welfare (a): verdict 'inconclusive', reference 'holds'" in out
    assert "welfare (b): evidence: interval" in out and "does not overlap" in out
    assert "welfare (c): missing in the fresh run" in out


def test_the_committed_results_reproduce_themselves(tmp_path):
    shutil.copytree(ROOT / "results" / "default", tmp_path / "copy", ignore=shutil.ignore_patterns("*.png", "*.pt"))
    result = _run(ROOT / "results" / "default", tmp_path / "copy")
    assert result.returncode == 0 and "differences" not in result.stdout, result.stdout
