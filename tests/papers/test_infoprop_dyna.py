"""P13 infoprop, the Dyna comparison (claim c): SAC's squashed-Gaussian likelihood against torch.distributions, the
independence of the vectorised runs, common initial weights per seed, the per-run model against its members
computed one by one, the arms' rollout lengths, the SAC targets by hand, the claim from hand-made results, and
bad configuration values."""
import copy
import dataclasses
from pathlib import Path

import jsonschema
import yaml

import numpy as np
import pandas as pd
import pytest
import torch
from torch import distributions as dist

from papers.infoprop import dyna as Y
from papers.infoprop.params import Params, parse
from papers.infoprop.report import dyna_claim


def _opts(agent, lr=1e-2):
    return {"q": torch.optim.Adam(agent.q.parameters(), lr=lr), "pi": torch.optim.Adam(agent.policy.parameters(), lr=lr),
            "alpha": torch.optim.Adam([agent.log_alpha], lr=lr)}


def test_squashed_gaussian_log_prob_against_torch_distributions():
    torch.manual_seed(0)
    agent = Y.Agent(2, 3, 2, 16, 2)
    obs = torch.randn(2, 5, 3)
    a, logp = agent.sample(obs, torch.Generator().manual_seed(1))
    mean, log_std = agent.policy(obs).chunk(2, -1)
    reference = dist.TransformedDistribution(dist.Normal(mean, log_std.clamp(*Y.LOG_STD_BOUNDS).exp()),
                                             [dist.TanhTransform()])
    # Ours adds 1e-6 inside log(1 - a^2) (as pytorch_sac_pranz24): a tiny bias away from |a| = 1.
    expected = reference.log_prob(a.clamp(-1 + 1e-6, 1 - 1e-6)).sum(-1, keepdim=True)
    assert torch.allclose(logp, expected, atol=1e-3)
    assert torch.equal(agent.deterministic(obs), torch.tanh(mean))


def test_runs_are_independent_in_an_update():
    # Changing run 1's batch must leave run 0's update exactly as it was: each run's loss gradient is its own.
    torch.manual_seed(0)
    agent = Y.Agent(2, 3, 1, 16, 2)
    other = copy.deepcopy(agent)
    batch = torch.randn(2, 32, 3 + 1 + 1 + 3)
    changed = batch.clone()
    changed[1] = torch.randn(32, 8) * 5
    s = {"gamma": 0.9, "tau": 0.1, "target_entropy": -1.0}
    for net, b in ((agent, batch), (other, changed)):
        opts = _opts(net)
        for _ in range(3):
            Y.sac_update(net, opts, b, 3, 1, s, torch.Generator().manual_seed(5))
    for (name, p), q in zip(agent.named_parameters(), other.parameters()):
        if name == "log_alpha":
            assert torch.equal(p[0], q[0]) and not torch.equal(p[1], q[1])
        elif p.shape[0] == 2:  # policy layers: run axis first
            assert torch.equal(p[0], q[0]), name
        else:  # twin Q stack: rows 0 (Q1, run 0) and 2 (Q2, run 0)
            assert torch.equal(p[0], q[0]) and torch.equal(p[2], q[2]), name
            assert not torch.equal(p[1], q[1]), name


def test_sac_critic_target_by_hand():
    # With alpha = 1 (log alpha 0), the critic's regression target is r + gamma (min(Q1', Q2')(s', a') - log pi(a'|s')):
    # one plain SGD step of lr 1 on 0.5 * loss of a bias-only change reproduces it.
    torch.manual_seed(0)
    agent = Y.Agent(1, 2, 1, 8, 1)
    o, a, r, o2 = torch.randn(1, 4, 2), torch.rand(1, 4, 1) * 2 - 1, torch.randn(1, 4, 1), torch.randn(1, 4, 2)
    a2, logp2 = agent.sample(o2, torch.Generator().manual_seed(3))
    with torch.no_grad():
        target = r + 0.9 * (agent.min_q(agent.q_target, o2, a2) - logp2)
        q_before = agent.twin_q(agent.q, o, a)
    grads = {}
    opts = {"q": torch.optim.SGD(agent.q.parameters(), lr=0.0), "pi": torch.optim.SGD(agent.policy.parameters(), lr=0.0),
            "alpha": torch.optim.SGD([agent.log_alpha], lr=0.0)}
    agent.q.layers[-1].bias.register_hook(lambda g: grads.setdefault("bias", g.clone()))
    Y.sac_update(agent, opts, torch.cat([o, a, r, o2], -1), 2, 1, {"gamma": 0.9, "tau": 0.0, "target_entropy": -1.0},
                 torch.Generator().manual_seed(3))
    # d/db of runs * 2 * mean over (2, 1, 4, 1) of (q - y)^2 = (q - y) summed over the batch / 2 per twin.
    expected = ((q_before - target) / 2).sum(2).view(2, 1, 1)
    assert torch.allclose(grads["bias"], expected, atol=1e-5)


def test_runs_of_a_seed_start_alike():
    seed_of_run = np.array([0, 1, 0, 1])
    agent = Y.Agent(4, 3, 1, 8, 2)
    Y.share_across_arms(agent, seed_of_run)
    w = agent.policy.layers[0].weight
    assert torch.equal(w[0], w[2]) and torch.equal(w[1], w[3]) and not torch.equal(w[0], w[1])
    q = agent.q.layers[0].weight.view(2, 4, *agent.q.layers[0].weight.shape[1:])
    assert torch.equal(q[0, 0], q[0, 2]) and torch.equal(q[1, 1], q[1, 3]) and not torch.equal(q[0, 0], q[1, 0])


def test_run_ensemble_predict_matches_its_members_one_by_one():
    torch.manual_seed(0)
    m = {"ensemble": 3, "hidden": 8, "layers": 2, "lr": 1e-2, "weight_decay": 0.0, "batch": 16, "epochs": 2,
         "learn_logvar_bounds": True}
    model = Y.RunEnsemble(2, 4, 3, m, np.array([0, 1]))
    inputs = torch.randn(2, 40, 4) * torch.tensor([1.0, 5.0])[:, None, None] + torch.tensor([0.0, 3.0])[:, None, None]
    targets = torch.randn(2, 40, 3)
    model.fit(inputs, targets, torch.Generator().manual_seed(0))
    x = torch.randn(2, 6, 4)
    mu, var = model.predict(x)  # (E, R B, D)
    for r in range(2):
        xn = (x[r] - inputs[r].mean(0)) / (inputs[r].std(0) + 1e-8)
        for e in range(3):
            k = r * 3 + e
            h = xn
            for layer in model.net.hidden:
                h = torch.nn.functional.silu(h @ layer.weight[k] + layer.bias[k])
            mean, logvar = (h @ model.net.head.weight[k] + model.net.head.bias[k]).split(3, -1)
            logvar = model.net.max_logvar[0] - torch.nn.functional.softplus(model.net.max_logvar[0] - logvar)
            logvar = model.net.min_logvar[0] + torch.nn.functional.softplus(logvar - model.net.min_logvar[0])
            std_out = targets[r].std(0) + 1e-8
            expect_mu = mean * std_out + targets[r].mean(0)
            expect_var = logvar.exp() * std_out ** 2
            assert torch.allclose(mu[e, r * 6: (r + 1) * 6].float(), expect_mu, atol=1e-5)
            assert torch.allclose(var[e, r * 6: (r + 1) * 6].float(), expect_var, rtol=1e-4)


def test_rollout_lengths_of_the_arms():
    # MBPO stops at its horizon; the K = 1 control and the true model are never stopped (their information loss is
    # 0); Infoprop in between.
    torch.manual_seed(0)
    arms = np.array(["mbpo", "infoprop", "infoprop_k1", "true_model", "true_model_h1"])
    m = {"ensemble": 3, "hidden": 8, "layers": 2, "lr": 1e-2, "weight_decay": 0.0, "batch": 32, "epochs": 3,
         "learn_logvar_bounds": True}
    model = Y.RunEnsemble(5, 4, 4, m, np.zeros(5, dtype=int))
    inputs = torch.randn(1, 60, 4).expand(5, -1, -1)
    model.fit(inputs, torch.randn(1, 60, 4).expand(5, -1, -1) * 0.1, torch.Generator().manual_seed(0))
    agent = Y.Agent(5, 3, 1, 8, 2)
    d = {"rollouts_per_step": 4, "model_every": 10, "mbpo_horizon": 2, "infoprop_horizon": 12}
    info = {"resolution": 1e-6, "upper_quantile": 0.9999, "lower_quantile": 0.01}
    out, lengths = Y.rollouts(agent, model, arms, {"obs": inputs[..., :3], "act": inputs[..., 3:]}, 60, d, info,
                              torch.Generator().manual_seed(0))
    assert lengths[0] == 2 and lengths[2] == 12 and lengths[3] == 12 and 0 < lengths[1] <= 12 and lengths[4] == 2
    assert [len(o) for o in out] == [2 * 40, int(round(lengths[1] * 40)), 12 * 40, 12 * 40, 2 * 40]
    assert out[0].shape[1] == 3 + 1 + 1 + 3
    # The true model's transitions are Pendulum's own: next obs and reward from (obs, act) by its equations.
    o, a, r, o2 = out[3][:, :3], out[3][:, 3:4], out[3][:, 4:5], out[3][:, 5:]
    nxt, rew = Y.pendulum_step(o.double(), a.double())
    assert torch.allclose(o2.double(), nxt, atol=1e-5) and torch.allclose(r.double(), rew, atol=1e-5)


def test_pendulum_step_matches_gymnasium():
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    for a in (0.3, -1.0, 0.9, 0.0):
        nxt, rew, *_ = env.step(np.array([2 * a], dtype=np.float32))  # the dyna loop scales [-1, 1] to the torque box
        mine, r = Y.pendulum_step(torch.tensor(obs, dtype=torch.float64), torch.tensor([a], dtype=torch.float64))
        np.testing.assert_allclose(mine.numpy(), nxt, atol=1e-6)
        assert float(r) == pytest.approx(rew, abs=1e-6)
        obs = nxt


def _results(gain: float, k1_gain: float, true_final: float = -150.0, seeds: int = 3, mbpo_final: float = -400.0):
    rows, stats = [], []
    for seed in range(seeds):
        base = mbpo_final + 50 * seed
        for arm, ret, length in (("mbpo", base, 1.0), ("infoprop", base + gain + seed, 30.0 + seed),
                                 ("infoprop_k1", base + k1_gain - seed, 100.0), ("true_model", true_final + seed, 100.0),
                                 ("true_model_h1", true_final + 2 * seed, 1.0)):
            rows.append({"arm": arm, "seed": seed, "real_steps": 100, "return": ret, "final": True})
            rows.append({"arm": arm, "seed": seed, "real_steps": 10, "return": -1200.0 + seed, "final": False})
            stats.append({"arm": arm, "seed": seed, "real_steps": 100, "accepted_length": length})
    return pd.DataFrame(rows), pd.DataFrame(stats)


def test_claim_c_from_hand_made_results():
    p = Params()
    claim = dyna_claim(p, *_results(gain=200.0, k1_gain=-100.0))
    assert claim.verdict == "holds" and claim.control.verdict == "does not hold" and claim.premise_met
    assert claim.measured["final return infoprop"] == pytest.approx(np.mean([-400 + 200 + 0, -350 + 201, -300 + 202]))
    # The control gains as much: the test cannot tell the mechanism from its absence.
    assert dyna_claim(p, *_results(gain=200.0, k1_gain=300.0)).verdict == "inconclusive"
    assert dyna_claim(p, *_results(gain=-300.0, k1_gain=0.0)).verdict == "does not hold"
    # The loop does not learn even with the true simulator (-1100 closes 8% of the gap from -1200 to 0): whatever the
    # arms' difference, the claim is inconclusive, never decided.
    for gain in (200.0, -300.0):
        unlearned = dyna_claim(p, *_results(gain=gain, k1_gain=0.0, true_final=-1100.0))
        assert unlearned.verdict == "inconclusive" and not unlearned.premise_met
        # ... and likewise when the loop learns with the true model but not with a learned one (MBPO stays at -1100).
        baseline_flat = dyna_claim(p, *_results(gain=gain, k1_gain=0.0, mbpo_final=-1100.0))
        assert baseline_flat.verdict == "inconclusive" and not baseline_flat.premise_met


def test_accepted_length_is_a_check_and_claim_c_is_not_measured_where_not_run():
    from papers.infoprop.report import DYNA_ARMS, dyna_checks, dyna_not_measured

    p = Params()
    _, stats = _results(gain=200.0, k1_gain=-100.0)
    (check,) = dyna_checks(p, stats)
    assert check.passed and check.measured == pytest.approx(31.0)
    # The reason is computed from the trial's cost and this run's CPU use: 10 s a run x arms x 3 seeds x (3000 / 1500).
    p = parse({"dyna": {**Params().dyna, "run": False, "real_steps": 3000,
                        "trial": {"cpu_s_per_run": 10.0, "real_steps": 1500, "epochs": 100, "seeds": 3, "learned": 1}}})
    claim = dyna_not_measured(p, used_cpu=500.0, budget=600.0)
    assert claim.verdict == "not measured"
    assert f"at least {10 * len(DYNA_ARMS) * 3 * 2} CPU-s" in claim.note and "more than the 100 CPU-s left" in claim.note
    assert "in 1 of 3 seeds" in claim.note


def test_bad_dyna_config_names_the_key():
    with pytest.raises(ValueError, match="dyna.initial_steps"):
        parse({"dyna": {**Params().dyna, "initial_steps": 5000}})
    # Unknown or out-of-range values of the nested sections are caught by the schema when the workflow is parsed.
    schema = yaml.safe_load((Path(__file__).parents[2] / "workflow/schemas/infoprop.schema.yaml").read_text())
    section = {k: v for k, v in dataclasses.asdict(Params()).items()}
    jsonschema.validate(section, schema)
    for bad, word in (({**section["dyna"], "horizon": 3}, "horizon"), ({**section["dyna"], "env": "Hopper-v5"}, "Hopper")):
        with pytest.raises(jsonschema.ValidationError, match=word):
            jsonschema.validate({**section, "dyna": bad}, schema)
