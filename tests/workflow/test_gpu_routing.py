"""A stage asks the cluster for a GPU exactly when its code puts work on one (issue 54), decided by behaviour.

Every stage of the smoke DAG (reports and the summary aside: they read tables and write text) runs under
papers.common.cuda_probe, with the full scale's device settings (each `device` key of config/full.yaml): torch
reports a GPU, as on a GPU node, and every torch call that names a CUDA device is recorded and kept on the CPU. The
records are then compared with each rule's declared kind (`job_resources("gpu")` in workflow/rules): a stage that
placed work on CUDA must be of the `gpu` kind, and a `gpu` rule whose stage never did would hold a GPU for nothing.
"""
import yaml

from smk import ROOT, rule_kinds, snakemake, stage_rules

# Code the smoke DAG cannot run: rules with no job there, and a branch taken at the full scale only. Each runs where
# a user names a pretrained model, and each puts it on CUDA when torch sees one (read in the code named here), so
# each is of the `gpu` kind; the probe cannot confirm it without the model.
FULL_SCALE_ONLY = {
    "orion_evaluate_pretrained": "config/full.yaml `orion.pretrained`; papers/orion/lm.py PretrainedLM",
    "hip_evaluate_pretrained": "config/full.yaml `hip.pretrained`; papers/hip/pretrained.py (hip.device)",
    "sharpening_pretrained": "config/full.yaml `sharpening.pretrained`; papers/sharpening/pretrained.py load",
    "eagle_train": "llava.enabled at the full scale: papers/eagle/stages.py train fine-tunes the user's LLaVA models",
}
# A rule of the full scale that the smoke config leaves out, and whose code never names a device (CPU only).
NOT_AT_SMOKE_CPU = {"sbdd_vs_train": "the LM generator (sbdd_vs.generators); papers/sbdd_vs/lm.py"}


def device_settings(config):
    """The part of a config that picks devices: every key named `device`, at any depth, with its path."""
    found = {}
    for key, value in config.items():
        if key == "device":
            found[key] = value
        elif isinstance(value, dict) and (inner := device_settings(value)):
            found[key] = inner
    return found


def test_the_device_settings_of_the_full_scale_are_found():
    full = yaml.safe_load((ROOT / "config" / "full.yaml").read_text())
    assert device_settings(full)["hip"] == {"device": "cuda", "cost": {"device": "cuda"}}
    assert device_settings({"a": {"b": {"device": "cpu"}, "c": 1}, "d": 2}) == {"a": {"b": {"device": "cpu"}}}


def test_gpu_rules_are_exactly_the_stages_that_use_cuda(tmp_path):
    from papers.common.cuda_probe import PROBE_ENV, read_records

    work, records, devices = tmp_path / "work", tmp_path / "records", tmp_path / "full_scale_devices.yaml"
    work.mkdir()
    devices.write_text(yaml.safe_dump(device_settings(yaml.safe_load((ROOT / "config" / "full.yaml").read_text()))))
    config = ("--configfile", str(ROOT / "config" / "smoke.yaml"), str(devices))
    listed = snakemake("--list-rules", *config, workdir=work, timeout=300)
    assert listed.returncode == 0, listed.stderr[-3000:]
    defined = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]  # "rule (docstring)"
    reports = sorted(rule for rule in defined if rule.endswith("_report") or rule == "summary")
    assert len(reports) >= 19, defined
    run = snakemake("--cores", "2", *config, "--omit-from", *reports, workdir=work, timeout=1500,
                    env={PROBE_ENV: str(records)})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    used = read_records(records)

    kinds = rule_kinds()
    stages = {rule for rule in stage_rules() if not rule.endswith("_report")} - {"summary"}
    unseen = set(FULL_SCALE_ONLY) | set(NOT_AT_SMOKE_CPU)
    assert stages - set(used) == unseen - set(used), "stages the probe did not see"
    assert {kinds[rule] for rule in FULL_SCALE_ONLY} == {"gpu"} and {kinds[r] for r in NOT_AT_SMOKE_CPU} == {"train"}
    uses_cuda = {rule for rule, cuda in used.items() if cuda}
    declared_gpu = {rule for rule in used if kinds[rule] == "gpu"} - set(FULL_SCALE_ONLY)
    assert uses_cuda - declared_gpu == set(), "stages that put work on CUDA but are not of the gpu kind"
    assert declared_gpu - uses_cuda == set(), "gpu-kind rules whose stage never put work on CUDA"
    # not blind: a stage that picks CUDA by itself (ensembles) and one that follows the config key (hip) are seen
    assert {"ensembles_train", "hip_evaluate", "hip_cost"} <= uses_cuda
