"""A stage reruns when the code it runs or the parameters it reads change, and only then.

Code: papers.common.codehash. Parameters: each paper's STAGE_PARAMS (papers.common.params.stage_section).
"""
import re
import shutil

from papers.common.codehash import code_version
from smk import ROOT, snakemake

CALLS = sorted({m for f in (ROOT / "workflow" / "rules").glob("*.smk")
                for m in re.findall(r'call="([\w.]+:\w+)"', f.read_text())})


def _copy(tmp_path):
    shutil.copytree(ROOT / "workflow" / "papers", tmp_path / "workflow" / "papers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    return (("papers", tmp_path / "workflow"), ("kernels", tmp_path))


def _versions(roots):
    return {call: code_version(call, roots) for call in CALLS}


def _changed(before, after):
    return {call for call in before if before[call] != after[call]}


def test_every_rule_names_a_function_that_can_be_hashed():
    assert len(CALLS) > 40 and "papers.welfare.stages:report" in CALLS
    assert all(len(code_version(call)) == 16 for call in CALLS)


def test_an_edit_reruns_the_stages_whose_code_it_touches_and_no_other(tmp_path):
    roots = _copy(tmp_path)
    before = _versions(roots)
    assert before == _versions(roots)  # a copy with new timestamps changes nothing

    stages = tmp_path / "workflow" / "papers" / "welfare" / "stages.py"
    text = stages.read_text()
    stages.write_text(text.replace('    """The results table, the growth-rate figure,',
                                   '    edited = 1  # a new statement in the report function\n    """The results table, the growth-rate figure,'))
    assert _changed(before, _versions(roots)) == {"papers.welfare.stages:report"}

    stages.write_text(text + "\n# a comment at the end of the module: no stage runs it\n")
    assert _changed(before, _versions(roots)) == set()

    stages.write_text(text)
    dynamics = tmp_path / "workflow" / "papers" / "welfare" / "dynamics.py"
    dynamics.write_text(dynamics.read_text() + "\nEXTRA = 1\n")
    changed = _changed(before, _versions(roots))
    assert {"papers.welfare.stages:prepare", "papers.welfare.stages:simulate"} <= changed
    assert all(call.startswith("papers.welfare.") for call in changed)


def test_shared_code_reruns_the_papers_that_use_it(tmp_path):
    roots = _copy(tmp_path)
    before = _versions(roots)
    claims = tmp_path / "workflow" / "papers" / "common" / "claims.py"
    claims.write_text(claims.read_text() + "\nEXTRA = 1\n")
    changed = _changed(before, _versions(roots))
    assert "papers.welfare.stages:report" in changed and "papers.common.summary:write_summary" in changed
    assert "papers.welfare.stages:simulate" not in changed  # the simulation does not use the claims


def _planned(workdir, *config) -> dict:
    """{rule: jobs} that a dry run of the smoke scale in `workdir` would run, with `config` overrides."""
    args = ["-n", "--configfile", str(ROOT / "config" / "smoke.yaml")] + (["--config", *config] if config else [])
    result = snakemake(*args, workdir=workdir)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    if "Nothing to be done" in result.stdout + result.stderr:
        return {}
    stats = result.stdout.split("Job stats:")[1].split("total")[0]
    return {m[0]: int(m[1]) for m in re.findall(r"^(\w+)\s+(\d+)$", stats, re.M) if m[0] != "all"}


def test_a_parameter_reruns_the_stages_that_read_it_and_no_other(smoke_runs):
    workdir = smoke_runs[0]
    assert _planned(workdir) == {}
    # A claim's threshold is read by the report alone.
    assert _planned(workdir, "welfare={rate_tolerance: 0.5}") == {"welfare_report": 1, "summary": 1}
    # The horizon is read from the simulation on: the populations are not drawn again.
    planned = _planned(workdir, "welfare={horizon: 500}")
    assert set(planned) == {"welfare_simulate", "welfare_evaluate", "welfare_report", "summary"}
    assert planned["welfare_simulate"] == 12  # 6 policies x 2 populations
