"""P6 sam_late: the SAM, PGD and smoothing math against closed forms and independent implementations,
the measurements (Lanczos sharpness, barrier, fits) on hand-built cases, and the switching loop."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from papers.sam_late import analysis, data, model, sam
from papers.sam_late.params import parse
from papers.sam_late.train import train


def _linear_problem(seed=0, n=12, d=5, c=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.randint(0, c, (n,), generator=g)
    net = nn.Linear(d, c).double()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    return net, x, y


# ---- the update rules ------------------------------------------------------------------------
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_sam_step_matches_the_closed_form(smoothing):
    # w+ = w - lr grad L(w + rho g / |g|), written out with torch.func on the flat parameters.
    net, x, y = _linear_problem()
    lr, rho = 0.3, 0.7
    names = [n for n, _ in net.named_parameters()]
    w0 = {n: p.detach().clone() for n, p in net.named_parameters()}

    def loss(w):
        return sam.smooth_cross_entropy(torch.func.functional_call(net, w, (x,)), y, smoothing)

    g = torch.func.grad(loss)(w0)
    norm = torch.sqrt(sum((g[n] ** 2).sum() for n in names))
    g_adv = torch.func.grad(loss)({n: w0[n] + rho * g[n] / norm for n in names})
    expected = {n: w0[n] - lr * g_adv[n] for n in names}

    opt = torch.optim.SGD(net.parameters(), lr=lr)
    sam.sam_step(net, opt, x, y, smoothing, rho)
    for n, p in net.named_parameters():
        torch.testing.assert_close(p.detach(), expected[n], rtol=1e-12, atol=1e-12)


def test_sam_with_tiny_rho_is_an_sgd_step():
    net_a, x, y = _linear_problem(1)
    net_b, _, _ = _linear_problem(1)
    sam.sam_step(net_a, torch.optim.SGD(net_a.parameters(), lr=0.5), x, y, 0.0, 1e-9)
    sam.sgd_step(net_b, torch.optim.SGD(net_b.parameters(), lr=0.5), x, y, 0.0)
    for a, b in zip(net_a.parameters(), net_b.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-8)


def test_smooth_cross_entropy_is_the_official_kl_plus_the_target_entropy():
    logits = torch.tensor([[2.0, -1.0, 0.5, 0.0], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    y = torch.tensor([0, 3])
    s, c = 0.2, 4
    q = torch.full((2, c), s / (c - 1), dtype=torch.float64)
    q[0, 0], q[1, 3] = 1 - s, 1 - s
    log_p = F.log_softmax(logits, 1)
    kl = (q * (q.log() - log_p)).sum(1)  # the official smooth_crossentropy (kl_div, summed over classes)
    entropy = -(q * q.log()).sum(1)
    assert float(sam.smooth_cross_entropy(logits, y, s)) == pytest.approx(float((kl + entropy).mean()), rel=1e-12)
    assert float(sam.smooth_cross_entropy(logits, y, 0.0)) == pytest.approx(float(F.cross_entropy(logits, y)), rel=1e-12)


def test_one_pgd_step_on_a_linear_model_is_the_signed_gradient_step():
    net, x, y = _linear_problem(2)
    eps = 0.05
    x = x.clamp(0.2, 0.8)  # away from the pixel box, so only the eps-ball binds
    grad = torch.autograd.grad(F.cross_entropy(net(x.requires_grad_()), y), x)[0]
    expected = x.detach() + eps * grad.sign()
    got = sam.pgd(net, x.detach(), y, epsilon=eps, step_size=1.0, steps=1, random_start=False)
    torch.testing.assert_close(got, expected)


def test_pgd_stays_in_the_eps_ball_and_the_pixel_box_and_raises_the_loss():
    net, x, y = _linear_problem(3)
    eps = 0.1
    x_adv = sam.pgd(net, x, y, epsilon=eps, step_size=0.03, steps=7, random_start=True)
    assert (x_adv - x).abs().max() <= eps + 1e-12
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert F.cross_entropy(net(x_adv), y) > F.cross_entropy(net(x), y)


def test_second_sam_pass_leaves_batch_norm_statistics_alone():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
    reference = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))
    reference.load_state_dict(net.state_dict())
    reference.train()(x)  # one forward pass: the statistics SAM's first pass should leave
    sam.sam_step(net.train(), torch.optim.SGD(net.parameters(), lr=0.1), x, y, 0.0, 0.5)
    torch.testing.assert_close(net[1].running_mean, reference[1].running_mean)
    torch.testing.assert_close(net[1].running_var, reference[1].running_var)


# ---- measurements ----------------------------------------------------------------------------
def test_lanczos_sharpness_matches_the_exact_hessian():
    torch.manual_seed(0)
    net = model.mlp(3, (4,), 2).double()
    x, y = torch.randn(20, 3, dtype=torch.float64), torch.randint(0, 2, (20,))
    params = list(net.parameters())
    shapes = [p.shape for p in params]
    flat0 = torch.cat([p.detach().reshape(-1) for p in params])

    def loss_of_flat(flat):
        chunks, i = [], 0
        for s in shapes:
            chunks.append(flat[i:i + s.numel()].view(s))
            i += s.numel()
        w = dict(zip([n for n, _ in net.named_parameters()], chunks))
        return F.cross_entropy(torch.func.functional_call(net, w, (x,)), y)

    exact = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss_of_flat, flat0)).flip(0)[:2]
    got = analysis.sharpness(net, x, y, iters=flat0.numel(), k=2, seed=0)
    np.testing.assert_allclose(got, exact.numpy(), rtol=1e-6)


def test_barrier_of_hand_built_lines():
    alphas = np.linspace(-0.2, 1.2, 15)
    assert analysis.barrier(alphas, 2 - alphas) == pytest.approx(0.0, abs=1e-12)  # straight: no barrier
    assert analysis.barrier(alphas, (alphas - 0.5) ** 2) == pytest.approx(0.0, abs=1e-12)  # convex valley
    bump = 1 + 0.3 * np.sin(np.pi * alphas) * ((alphas >= 0) & (alphas <= 1))
    assert analysis.barrier(alphas, bump) == pytest.approx(0.3, rel=1e-2)  # peak at alpha = 0.5


def test_escape_fits_tell_an_exponential_from_a_power_law():
    t = np.arange(1, 31)
    exp_fit = analysis.escape_fits(t, 0.01 * np.exp(0.2 * t))
    assert exp_fit["rate"] == pytest.approx(0.2) and exp_fit["r2_exp"] == pytest.approx(1.0)
    assert exp_fit["r2_exp"] > exp_fit["r2_pow"]
    pow_fit = analysis.escape_fits(t, 0.1 * t ** 0.5)
    assert pow_fit["power"] == pytest.approx(0.5) and pow_fit["r2_pow"] == pytest.approx(1.0)
    assert pow_fit["r2_pow"] > pow_fit["r2_exp"]


def test_gap_fraction():
    assert analysis.gap_fraction(0.8, 0.9, 0.875) == pytest.approx(0.75)
    assert analysis.gap_fraction(6.0, 1.0, 2.0) == pytest.approx(0.8)  # sharpness: lower is the full arm
    assert np.isnan(analysis.gap_fraction(1.0, 1.0, 2.0))
    per_seed = analysis.gap_fraction([0.8, 0.7, 0.5], [0.9, 0.8, 0.5], [0.85, 0.9, 0.6])  # paired by seed
    np.testing.assert_allclose(per_seed[:2], [0.5, 2.0])
    assert np.isnan(per_seed[2])  # no gap for that seed: no share


def test_distance_and_the_point_at_a_distance_towards_another_state():
    a = {"w": torch.zeros(2), "b": torch.zeros(1), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0]), "n": torch.tensor(7)}
    assert analysis.state_distance(a, b) == pytest.approx(5.0)  # the 3-4-5 triangle over all floating tensors
    c = analysis.toward(a, b, 2.0)
    assert analysis.state_distance(a, c) == pytest.approx(2.0)
    torch.testing.assert_close(c["w"], torch.tensor([1.2, 0.0]))
    torch.testing.assert_close(c["b"], torch.tensor([1.6]))
    assert int(c["n"]) == 3


def test_interpolation_ends_are_the_two_states():
    a = {"w": torch.zeros(3), "n": torch.tensor(4)}
    b = {"w": torch.ones(3), "n": torch.tensor(9)}
    assert torch.equal(analysis.interpolate_state(a, b, 0.0)["w"], a["w"])
    assert torch.equal(analysis.interpolate_state(a, b, 1.0)["w"], b["w"])
    assert torch.allclose(analysis.interpolate_state(a, b, 1.2)["w"], torch.full((3,), 1.2))
    assert int(analysis.interpolate_state(a, b, 0.5)["n"]) == 4  # integer buffers are not interpolated


# ---- data ------------------------------------------------------------------------------------
def test_label_noise_moves_exactly_the_share_to_other_classes():
    y = np.arange(1000) % 10
    noisy = data.corrupt_labels(y, 0.2, 10, np.random.default_rng(0))
    assert (noisy != y).sum() == 200
    again = data.corrupt_labels(y, 0.2, 10, np.random.default_rng(0))
    assert np.array_equal(noisy, again)


def test_digits_loader_reads_the_packaged_file_and_names_bad_lines(tmp_path):
    x, y = data.load_digits()
    assert x.shape == (1797, 64) and 0 <= x.min() and x.max() == 1.0 and set(y) == set(range(10))
    bad = tmp_path / "digits.csv"
    bad.write_text(",".join(["0"] * 64 + ["3"]) + "\n" + ",".join(["0"] * 63 + ["x", "1"]) + "\n")
    with pytest.raises(ValueError, match=r"digits.csv, line 2"):
        data.load_digits(bad)


def test_each_seed_draws_its_own_split_and_label_noise():
    from papers.sam_late.params import DataParams

    d = DataParams(source="digits", train_size=300, test_size=1497, label_noise=0.2, seed=0)
    df = data.split_table(d, seeds=3, noisy=True)
    for s in range(3):
        counts = df[f"split{s}"].value_counts()
        assert (counts["train"], counts["test"]) == (300, 1497)
        train = df[f"split{s}"] == "train"
        assert (df.loc[train, f"noisy{s}"] != df.loc[train, "label"]).sum() == 60  # 20% of this seed's training labels
        assert (df.loc[~train, f"noisy{s}"] == df.loc[~train, "label"]).all()  # test labels stay clean
    assert (df.split0 != df.split1).any() and (df.noisy0 != df.noisy1).any()  # independent draws
    clean, noisy = (data.load_tensors(df, "digits", 1, c) for c in ("clean", "noisy"))
    assert clean["x_train"].shape == (300, *data.DIGITS_SHAPE) and torch.equal(clean["x_train"], noisy["x_train"])
    assert torch.equal(noisy["clean_train"], clean["y_train"]) and int((noisy["y_train"] != clean["y_train"]).sum()) == 60
    assert torch.equal(clean["y_test"], noisy["y_test"])  # the test labels are always clean
    assert "noisy0" not in data.split_table(d, seeds=1, noisy=False)


def test_random_crop_flip_without_padding_is_identity_or_mirror():
    torch.manual_seed(0)
    x = torch.rand(6, 3, 8, 8)
    out = data.random_crop_flip(x, padding=0)
    for a, b in zip(out, x):
        assert torch.equal(a, b) or torch.equal(a, b.flip(-1))


# ---- params and the switching loop -----------------------------------------------------------
def test_schedule_follows_the_official_scripts():
    p = parse({"epochs": 160, "late_epochs": 10, "lr": 0.01, "lr_milestones": [80, 160]})
    assert p.switch_epoch == 150
    assert [p.rule("late_sam", e) for e in (0, 149, 150, 159)] == ["sgd", "sgd", "sam", "sam"]
    assert [p.rule("early_sam", e) for e in (0, 9, 10)] == ["sam", "sam", "sgd"]
    assert p.rule("late_adv", 155) == "adv" and p.rule("sam", 0) == "sam"
    assert p.lr_at(79) == pytest.approx(0.01) and p.lr_at(80) == pytest.approx(0.001)  # MultiStepLR
    with pytest.raises(ValueError, match="must include the main rho"):
        parse({"rho": 0.3, "rhos": [0.1]})
    with pytest.raises(KeyError, match="sam_late.lr_schedule"):
        parse({"lr_schedule": 1})


def _tiny(**kw):
    cfg = {"seeds": 1, "data": {"source": "digits", "train_size": 40, "test_size": 20}, "model": "mlp",
           "hidden": [8], "epochs": 4, "late_epochs": 2, "adv_late_epochs": 2, "batch_size": 10, "lr": 0.05, "momentum": 0.9,
           "lr_milestones": [], "augment": False, "rho": 0.3, "rhos": [0.3], "hessian_samples": 40,
           "interpolation_samples": 40, "escape_steps": 3, "attack": {"epsilon": 0.1, "step_size": 0.05, "steps": 2}}
    cfg.update(kw)
    p = parse(cfg)
    g = torch.Generator().manual_seed(0)
    tensors = {"x_train": torch.rand(40, 64, generator=g), "y_train": torch.randint(0, 10, (40,), generator=g),
               "x_test": torch.rand(20, 64, generator=g), "y_test": torch.randint(0, 10, (20,), generator=g)}
    return p, tensors


def _net(seed=0):
    torch.manual_seed(seed)
    return model.mlp(64, (8,), 10)


@pytest.mark.parametrize("arm", ["late_sam", "late_adv", "sgd"])
def test_a_late_arm_branched_from_the_sgd_checkpoint_equals_the_run_from_scratch(arm):
    p, t = _tiny()
    _, _, sgd_ckpts = train(_net(), t, p, arm="sgd", rho=p.rho, seed=0)
    scratch = _net()
    h_scratch, _, _ = train(scratch, t, p, arm=arm, rho=p.rho, seed=0)
    branched = _net(1)  # other weights: the checkpoint must overwrite them
    h_branch, esc, ckpts = train(branched, t, p, arm=arm, rho=p.rho, seed=0, start=sgd_ckpts["switch"], track=True)
    for a, b in zip(scratch.parameters(), branched.parameters()):
        torch.testing.assert_close(a, b)
    assert list(h_branch.epoch) == [2, 3] and list(h_branch.rule) == list(h_scratch.rule.iloc[2:])
    assert list(esc.step) == [1, 2, 3] and (esc.distance > 0).all()
    # the training loss after the switch (claim (c)'s premise) is measured from w_switch itself
    from papers.sam_late.train import evaluate
    at_switch = _net()
    at_switch.load_state_dict(sgd_ckpts["switch"]["model"])
    assert esc.switch_train_loss.iloc[0] == pytest.approx(evaluate(at_switch, t["x_train"], t["y_train"])[0])
    assert (esc.train_loss > 0).all()
    assert "final" in ckpts and "midway" not in ckpts  # no convergence gate reads a midway state any more


def test_late_and_early_at_share_the_late_phase_of_late_sam():
    """One rule for K across (a) and (e): late AT runs the last late_epochs, early AT the first, then SGD; an
    adv_late_epochs other than late_epochs is refused, and early and late phases may not overlap."""
    p, t = _tiny(epochs=8, late_epochs=2, late_sweep=[4], adv_late_epochs=None)
    assert p.adv_switch_epoch == p.switch_epoch == 6
    assert [p.rule("late_adv", e) for e in (5, 6)] == ["sgd", "adv"]
    assert [p.rule("early_adv", e) for e in (1, 2)] == ["adv", "sgd"]
    assert [p.rule("early_sam", e, switch=4) for e in (3, 4)] == ["sam", "sgd"]
    _, _, sgd_ckpts = train(_net(), t, p, arm="sgd", rho=p.rho, seed=0)
    h, _, ckpts = train(_net(), t, p, arm="late_adv", rho=p.rho, seed=0, start=sgd_ckpts["switch"])
    assert list(h.rule) == ["adv"] * 2 and ckpts["final"]["epoch"] == 8
    h, _, _ = train(_net(), t, p, arm="early_adv", rho=p.rho, seed=0)
    assert list(h.rule) == ["adv"] * 2 + ["sgd"] * 6
    with pytest.raises(ValueError, match="adv_late_epochs"):
        parse({"epochs": 20, "late_epochs": 2, "late_sweep": [4], "adv_late_epochs": 4})
    with pytest.raises(ValueError, match="must not overlap"):
        parse({"epochs": 20, "late_epochs": 11})


def test_the_paper_share_adds_short_arms_unless_it_is_the_late_phase():
    p = parse({"epochs": 400, "late_epochs": 200, "late_sweep": [], "paper_share": 0.0625})
    assert p.share_epochs == 25 and p.late_ks == [25] and p.early_ks == [25] and p.switch_epochs == [200, 375]
    full = parse({"epochs": 160, "late_epochs": 10, "late_sweep": [2, 40], "paper_share": 0.0625})
    assert full.share_epochs == 10 and full.late_ks == [2, 40] and full.early_ks == []


def test_history_records_the_test_set_every_history_every_epochs_and_at_the_end():
    p, t = _tiny(epochs=5, late_epochs=2, history_every=2)
    h, _, _ = train(_net(), t, p, arm="sgd", rho=p.rho, seed=0)
    assert list(h.test_loss.notna()) == [False, True, False, True, True]


def test_a_sweep_arm_branched_at_its_own_switch_equals_the_run_from_scratch():
    p, t = _tiny(epochs=6, late_epochs=2, late_sweep=[4])
    assert p.switch_epochs == [2, 4, 5]  # 5: the paper-share arm (1 of 6 epochs)
    _, _, sgd_ckpts = train(_net(), t, p, arm="sgd", rho=p.rho, seed=0)
    assert sgd_ckpts[2]["epoch"] == 2 and sgd_ckpts["switch"]["epoch"] == 4
    scratch, branched = _net(), _net(1)
    h_scratch, _, _ = train(scratch, t, p, arm="late_sam", rho=p.rho, seed=0, switch=2)
    h_branch, esc, _ = train(branched, t, p, arm="late_sam", rho=p.rho, seed=0, start=sgd_ckpts[2], switch=2,
                             track=True)
    assert list(h_scratch.rule) == ["sgd", "sgd", "sam", "sam", "sam", "sam"]
    for a, b in zip(scratch.parameters(), branched.parameters()):
        torch.testing.assert_close(a, b)
    assert list(h_branch.epoch) == [2, 3, 4, 5] and len(esc) == p.escape_steps
    with pytest.raises(ValueError, match="late_sweep"):
        parse({"epochs": 10, "late_epochs": 2, "late_sweep": [2]})


def test_sam_arms_leave_sgd_weights_and_early_sam_differs_from_sgd():
    p, t = _tiny()
    nets = {}
    for arm in ("sgd", "early_sam", "sam"):
        nets[arm] = _net()
        train(nets[arm], t, p, arm=arm, rho=p.rho, seed=0)
    diff = lambda a, b: sum(float((x - y).detach().norm())
                              for x, y in zip(nets[a].parameters(), nets[b].parameters()))  # noqa: E731
    assert diff("sgd", "early_sam") > 0 and diff("sgd", "sam") > 0


# ---- the full scale's code path (CIFAR-10, VGG-16-BN) on a fake batch ------------------------
def test_cifar_loader_and_vgg16_bn_on_a_fake_batch(tmp_path):
    import pickle

    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), b"labels": [1, 7]}
        (tmp_path / name).write_bytes(pickle.dumps(batch))
    x, y = data.load_cifar(tmp_path, "train")
    assert x.shape == (10, 3, 32, 32) and 0 <= x.min() and x.max() <= 1 and list(y[:2]) == [1, 7]
    (tmp_path / "test_batch").write_bytes(pickle.dumps({b"oops": 1}))
    with pytest.raises(ValueError, match="test_batch: not a CIFAR batch"):
        data.load_cifar(tmp_path, "test")
    torch.manual_seed(0)
    net = model.build("vgg16_bn", data.CIFAR_SHAPE, (), 10)
    xb = data.random_crop_flip(torch.from_numpy(x[:4]))
    with torch.no_grad():
        assert net.eval()(xb).shape == (4, 10)


# ---- claims ----------------------------------------------------------------------------------
def _arms(seeds, rho, loss, eig, robust, noise, rng):
    """A metrics table (evaluate's) with per-arm means of test loss `loss`, `eig`, `robust`, plus seed noise."""
    import pandas as pd

    from papers.sam_late.params import is_sam_arm

    rows = []
    for arm in loss:
        for seed in range(seeds):
            rows.append({"labels": "clean", "arm": arm, "rho": rho if is_sam_arm(arm) else 0.0, "seed": seed,
                         "test_loss": loss[arm] + noise * rng.normal(), "test_acc": 0.95 + 0.01 * rng.normal(),
                         "eig_1": eig[arm] * (1 + 0.02 * rng.normal()), "robust_acc": robust[arm] + 0.005 * rng.normal(),
                         "train_acc": 1.0, "distance": 1.0})
    return pd.DataFrame(rows)


def _rises(seeds, sam, sgd, rng):
    """Per seed, the training loss's largest rise above w_switch's after the switch: late SAM's and SGD's."""
    import pandas as pd

    return (pd.Series(sam + 0.001 * rng.normal(size=seeds)), pd.Series(sgd + 0.001 * rng.normal(size=seeds)))


def _fits(seeds, r2_exp, r2_pow, rate, rng):
    import pandas as pd

    return pd.DataFrame({"seed": range(seeds), "rate": rate + 0.001 * rng.normal(size=seeds),
                         "r2_exp": r2_exp + 0.005 * rng.normal(size=seeds),
                         "r2_pow": r2_pow + 0.005 * rng.normal(size=seeds), "power": 1.0}).set_index("seed")


def _switch_fit(seeds, acc):
    import pandas as pd

    return pd.DataFrame({"labels": "clean", "seed": range(seeds), "switch_train_acc": acc, "switch_train_loss": 0.1})


def _ratios(seeds, ratio, rng):
    """Per seed, late SAM's first step over SGD's (claim (c)'s small-perturbation premise)."""
    import pandas as pd

    return pd.Series(ratio * (1 + 0.02 * rng.normal(size=seeds)))


P_CLAIMS = {"seeds": 10, "rho": 0.3, "rhos": [0.3], "epochs": 160, "late_epochs": 10, "late_sweep": [40]}
ROBUST = {"sgd": 0.2, "sam": 0.3, "late_sam": 0.25, "late_sam_k40": 0.25, "early_sam": 0.2, "adv": 0.6,
          "late_adv": 0.55, "early_adv": 0.3, "late_rand": 0.2, "late_clean": 0.19}


@pytest.mark.parametrize("sam_loss_gain", [0.05, 0.0])
def test_claims_decide_on_seed_intervals_with_their_controls(sam_loss_gain):
    from papers.sam_late.report import sam_late_claims

    rng = np.random.default_rng(0)
    p = parse(P_CLAIMS)
    loss = {"sgd": 0.30, "sam": 0.30 - sam_loss_gain, "late_sam": 0.30 - 0.9 * sam_loss_gain,
            "late_sam_k40": 0.30 - 0.95 * sam_loss_gain, "early_sam": 0.30 - 0.05 * sam_loss_gain, "adv": 0.3,
            "late_adv": 0.3, "early_adv": 0.3, "late_rand": 0.30, "late_clean": 0.3}
    eig = {"sgd": 10.0, "sam": 3.0, "late_sam": 3.5, "late_sam_k40": 3.2, "early_sam": 9.5, "adv": 8.0,
           "late_adv": 8.0, "early_adv": 9.0, "late_rand": 10.0, "late_clean": 9.0}
    m = _arms(10, 0.3, loss, eig, ROBUST, noise=0.002, rng=rng)
    sam_fits, sgd_fits = _fits(10, 0.97, 0.8, 0.05, rng), _fits(10, 0.6, 0.7, 0.01, rng)
    planted = _fits(10, 0.99, 0.85, 0.05, rng)
    late_barriers = [0.01, 0.0, 0.02, 0.01, 0.0] * 2
    rises = _rises(10, 0.05, 0.0, rng)  # late SAM climbs out of SGD's minimum, SGD stays in it
    small = _ratios(10, 1.2, rng)  # late SAM's first step comparable with SGD's: a small-perturbation phase
    claims = {c.id: c for c in sam_late_claims(p, m, _switch_fit(10, 1.0), sam_fits, sgd_fits, planted, late_barriers,
                                               [1.5, 2.0, 1.8, 1.2, 1.6] * 2, loss_rises=rises, first_steps=small)}
    assert list(claims) == ["a", "b", "c", "d", "e"]
    assert claims["c"].verdict == "holds" and claims["c"].control.verdict == "does not hold"
    assert claims["c"].positive_control.verdict == "holds"
    assert claims["d"].verdict == "holds" and claims["d"].control.verdict == "does not hold"
    assert claims["e"].verdict == "holds" and claims["e"].control.verdict == "does not hold"
    # the mechanism ablations (review sam_late_r20261205): SAM's late phase with a random direction, late AT on clean
    # inputs; early SAM / early AT of the same length are context in the notes
    assert claims["e"].control.kind == "ablation" and claims["a"].control.kind == "ablation"
    assert "random direction" in claims["a"].control.description and "early SAM" in claims["a"].note
    assert "clean inputs" in claims["e"].control.description and "early AT" in claims["e"].note
    assert "10 epochs" not in claims["e"].statement
    assert "weaker than the paper's" in claims["a"].note and "paired difference" in claims["a"].note
    assert "last 10 of 160 epochs" in claims["a"].statement and "last 10 of 160 epochs" in claims["e"].statement
    assert len(claims["a"].evidence) == 2  # test loss and sharpness at the deciding late phase only
    assert "K = 40" in claims["a"].note  # the other late phases are reported
    # (b)'s control: SAM throughout also runs SAM late, so the "at most half" test must fail
    assert claims["b"].control.verdict == "does not hold"
    if sam_loss_gain:
        assert claims["a"].verdict == "holds" and claims["a"].control.verdict == "does not hold"
        assert claims["b"].verdict == "holds"
        assert "not attributable" in claims["b"].note
    else:  # no test-loss gap between SAM and SGD: the premise of (a), (b) is unmet, never "does not hold"
        for cid in ("a", "b"):
            assert claims[cid].verdict == "inconclusive" and "premise not met" in claims[cid].note
    # (c) where SAM's training loss does not rise after the switch (no instability to escape), or rises no more than
    # SGD's, or was not recorded: the premise is unmet, inconclusive
    for no_escape in (_rises(10, -0.01, -0.01, rng), _rises(10, 0.05, 0.05, rng), None):
        flat_c = {c.id: c for c in sam_late_claims(p, m, _switch_fit(10, 1.0), sam_fits, sgd_fits, planted,
                                                   late_barriers, [1.5] * 10, loss_rises=no_escape,
                                                   first_steps=small)}
        assert flat_c["c"].verdict == "inconclusive" and "unstable under SAM" in flat_c["c"].note
    # a control line as long as late SAM's that shows no barrier either makes (d) vacuous: inconclusive
    flat = {c.id: c for c in sam_late_claims(p, m, _switch_fit(10, 1.0), sam_fits, sgd_fits, planted, late_barriers,
                                             [0.0] * 10, loss_rises=rises, first_steps=small)}
    assert flat["d"].control.verdict == "holds" and flat["d"].verdict == "inconclusive"
    assert "cannot tell one valley from two" in flat["d"].note
    # SGD that has not fitted its training set at the switch: the late-phase claims cannot be decided
    unfit = {c.id: c for c in sam_late_claims(p, m, _switch_fit(10, 0.9), sam_fits, sgd_fits, planted, late_barriers,
                                              [1.5] * 10, loss_rises=rises, first_steps=small)}
    for cid in ("a", "c", "d", "e"):
        assert unfit[cid].verdict == "inconclusive" and "fitted its training set" in unfit[cid].note


def test_low_shares_at_the_late_phase_fail_a_and_e_and_controls_that_match_fail_their_ablations():
    """No convergence gate any more: shares below 0.5 at the deciding late phase fail (a) and (e); a control that
    closes as much (late SAM with a random direction, late AT on clean inputs) makes the ablation hold, so the claim
    is inconclusive; an early arm of equal length that matches is (b)'s matter and leaves (a) and (e) decided."""
    from papers.sam_late.report import sam_late_claims

    rng = np.random.default_rng(2)
    p = parse(P_CLAIMS)
    loss = {"sgd": 0.30, "sam": 0.25, "late_sam": 0.29, "late_sam_k40": 0.28, "early_sam": 0.2975, "adv": 0.3,
            "late_adv": 0.3, "early_adv": 0.3, "late_rand": 0.30, "late_clean": 0.3}
    eig = {"sgd": 10.0, "sam": 3.0, "late_sam": 8.6, "late_sam_k40": 7.2, "early_sam": 9.5, "adv": 8.0,
           "late_adv": 8.0, "early_adv": 8.0, "late_rand": 10.0, "late_clean": 8.0}
    robust = {**ROBUST, "late_adv": 0.32}
    m = _arms(10, 0.3, loss, eig, robust, noise=0.002, rng=rng)
    fits = _fits(10, 0.97, 0.8, 0.05, rng)
    args = (_switch_fit(10, 1.0), fits, _fits(10, 0.6, 0.7, 0.01, rng), fits, [0.0] * 10, [1.5] * 10)
    claims = {c.id: c for c in sam_late_claims(p, m, *args, loss_rises=_rises(10, 0.05, 0.0, rng),
                                               first_steps=_ratios(10, 1.2, rng))}
    assert claims["a"].verdict == "does not hold" and claims["e"].verdict == "does not hold"
    # early arms that match the late ones: (a) and (e) still hold (timing is (b)'s question)
    m2 = _arms(10, 0.3, {**loss, "late_sam": 0.255, "early_sam": 0.255}, {**eig, "late_sam": 3.3, "early_sam": 3.3},
               {**ROBUST, "early_adv": 0.58}, noise=0.002, rng=rng)
    early = {c.id: c for c in sam_late_claims(p, m2, *args, loss_rises=_rises(10, 0.05, 0.0, rng),
                                              first_steps=_ratios(10, 1.2, rng))}
    assert early["a"].verdict == "holds" and early["e"].verdict == "holds"
    # controls that match: the mechanism is not what closes the gap, inconclusive
    m3 = _arms(10, 0.3, {**loss, "late_sam": 0.255, "late_rand": 0.255}, {**eig, "late_sam": 3.3, "late_rand": 3.3},
               {**ROBUST, "late_clean": 0.58}, noise=0.002, rng=rng)
    matched = {c.id: c for c in sam_late_claims(p, m3, *args, loss_rises=_rises(10, 0.05, 0.0, rng),
                                                first_steps=_ratios(10, 1.2, rng))}
    for cid in ("a", "e"):
        assert matched[cid].control.verdict == "holds" and matched[cid].verdict == "inconclusive"


def test_escape_loss_rise_and_first_step_ratio_closed_forms():
    import pandas as pd

    from papers.sam_late.report import escape_loss_rise, first_step_ratio

    esc = pd.DataFrame({"labels": "clean", "arm": "late_sam", "rho": 0.3, "seed": [0, 0, 0, 1, 1, 1],
                        "step": [1, 2, 3] * 2, "distance": [0.3, 0.4, 0.5, 0.2, 0.3, 0.4],
                        "train_loss": [0.12, 0.15, 0.11, 0.10, 0.09, 0.08], "switch_train_loss": [0.1] * 3 + [0.11] * 3})
    np.testing.assert_allclose(escape_loss_rise(esc, "late_sam", 0.3).to_numpy(), [0.05, -0.01])
    sgd = esc.assign(arm="sgd", rho=0.0, distance=[0.01, 0.02, 0.03, 0.02, 0.03, 0.04])
    np.testing.assert_allclose(first_step_ratio(pd.concat([esc, sgd]), 0.3).to_numpy(), [30.0, 10.0])


def test_planted_escape_on_sgd_drift_is_found_exponential_by_the_same_fits():
    import pandas as pd

    from papers.sam_late.report import planted_escape_fits

    t = np.arange(1, 31)
    rng = np.random.default_rng(1)
    sam = pd.DataFrame([{"labels": "clean", "arm": "late_sam", "rho": 0.3, "seed": s, "step": k,
                         "distance": 0.5 * k ** 0.8 * np.exp(0.02 * rng.normal())} for s in range(3) for k in t])
    sgd = pd.DataFrame([{"labels": "clean", "arm": "sgd", "rho": 0.0, "seed": s, "step": k, "distance": 0.01 * k}
                        for s in range(3) for k in t])
    fits = pd.DataFrame([{"seed": s, **analysis.escape_fits(g.step, g.distance)} for s, g in sam.groupby("seed")])
    fits = fits.set_index("seed").assign(rate=0.15)  # a clear exponential rate to plant
    planted = planted_escape_fits(pd.concat([sam, sgd]), fits, 0.3)
    assert (fits.r2_pow > fits.r2_exp).all()  # the measured escape here is a power law ...
    assert (planted.r2_exp > 0.9).all() and (planted.r2_exp > planted.r2_pow).all()  # ... the planted one is not


def test_escape_is_decided_at_the_smallest_rho_whose_premises_are_met():
    """(c): at rho 0.3 the loss does not rise after the switch (premise unmet), at 1.0 it does: decided at 1.0, with
    both rhos' fits in the note; where no rho meets the premises, or SAM's first step is many times SGD's (no
    small-perturbation phase), reported at the main rho, inconclusive."""
    from papers.sam_late.report import sam_late_claims

    rng = np.random.default_rng(4)
    p = parse({**P_CLAIMS, "rhos": [0.3, 1.0]})
    loss = {"sgd": 0.30, "sam": 0.25, "late_sam": 0.26, "late_sam_k40": 0.255, "early_sam": 0.2975, "adv": 0.3,
            "late_adv": 0.3, "early_adv": 0.3, "late_rand": 0.3, "late_clean": 0.3}
    eig = {"sgd": 10.0, "sam": 3.0, "late_sam": 3.5, "late_sam_k40": 3.2, "early_sam": 9.5, "adv": 8.0,
           "late_adv": 8.0, "early_adv": 8.0, "late_rand": 10.0, "late_clean": 8.0}
    m = _arms(10, 0.3, loss, eig, ROBUST, noise=0.002, rng=rng)
    sgd_fits = _fits(10, 0.6, 0.7, 0.01, rng)
    flat, steep = _fits(10, 0.5, 0.99, 0.02, rng), _fits(10, 0.97, 0.8, 0.05, rng)
    rise_sam_03, rise_sgd = _rises(10, -0.01, 0.0, rng)
    rise_sam_10, _ = _rises(10, 0.05, 0.0, rng)
    small, large = _ratios(10, 1.2, rng), _ratios(10, 30.0, rng)

    def claim_c(by_rho):
        return {x.id: x for x in sam_late_claims(p, m, _switch_fit(10, 1.0), flat, sgd_fits, steep, [0.0] * 10,
                                                 [1.5] * 10, loss_rises=(rise_sam_03, rise_sgd),
                                                 escapes_by_rho=by_rho)}["c"]

    c = claim_c({0.3: (flat, steep, rise_sam_03, small), 1.0: (steep, steep, rise_sam_10, small)})
    assert c.measured["rho"] == 1.0 and c.verdict == "holds", c.note
    assert "rho 0.3:" in c.note and "rho 1.0:" in c.note and "premise not met" in c.note
    c0 = claim_c({0.3: (flat, steep, rise_sam_03, small), 1.0: (steep, steep, rise_sam_03, small)})
    assert c0.measured["rho"] == 0.3 and c0.verdict == "inconclusive"
    big = claim_c({0.3: (steep, steep, rise_sam_10, large), 1.0: (steep, steep, rise_sam_10, large)})
    assert big.verdict == "inconclusive" and "small-perturbation phase" in big.note
    assert big.measured["first_step_ratio"] == pytest.approx(30.0, rel=0.05)


# ---- seeds side by side (papers.sam_late.batched) equal the one-seed loop ---------------------------
def _seed_tensors(s):
    g = torch.Generator().manual_seed(100 + s)
    return {"x_train": torch.rand(40, 64, generator=g), "y_train": torch.randint(0, 10, (40,), generator=g),
            "x_test": torch.rand(20, 64, generator=g), "y_test": torch.randint(0, 10, (20,), generator=g)}


def test_member_loss_is_the_smoothed_cross_entropy_of_each_seed():
    from papers.sam_late import batched

    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(3, 7, 10, generator=g), torch.randint(0, 10, (3, 7), generator=g)
    for s in (0.0, 0.1):
        want = torch.stack([sam.smooth_cross_entropy(logits[j], y[j], s) for j in range(3)])
        torch.testing.assert_close(batched.member_loss(logits, y, s), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rule", ["sgd", "sam", "adv", "rand", "clean"])
def test_side_by_side_steps_equal_each_seed_s_own_steps(rule):
    """Three steps of every rule on three seeds at once land where each seed's own optimiser and step take it
    (momentum included), PGD's random start drawn from each seed's generator as from torch's global one."""
    from papers.sam_late import batched

    p, _ = _tiny()
    nets = [_net(s) for s in range(3)]
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(3, 10, 64, generator=g), torch.randint(0, 10, (3, 10), generator=g)
    mem = batched.Members([model.mlp(64, (8,), 10) for _ in nets], [{"model": n.state_dict(), "epoch": 0,
                          "optimizers": {"sgd": {"state": {}}, "sam": {"state": {}}}} for n in nets])
    gens = [torch.Generator().manual_seed(7 + j) for j in range(3)]
    losses = [batched.step(mem, rule, x, y, p, rho=p.rho, gens=gens, lr=0.05) for _ in range(3)]
    for j, net in enumerate(nets):
        opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=p.momentum, weight_decay=p.weight_decay)
        torch.manual_seed(7 + j)
        for k in range(3):
            if rule == "sgd":
                loss = sam.sgd_step(net, opt, x[j], y[j], p.label_smoothing)
            elif rule == "sam":
                loss = sam.sam_step(net, opt, x[j], y[j], p.label_smoothing, p.rho)
            elif rule == "rand":
                loss = sam.random_sam_step(net, opt, x[j], y[j], p.label_smoothing, p.rho)
            elif rule == "clean":
                loss = sam.clean_step(net, opt, x[j], y[j])
            else:
                loss = sam.adv_step(net, opt, x[j], y[j], p.attack)
            assert float(losses[k][j]) == pytest.approx(float(loss), abs=1e-5)
        for q, w in zip(net.parameters(), mem.ws):
            torch.testing.assert_close(q.detach(), w[j], rtol=1e-5, atol=1e-6)


def test_random_direction_step_perturbs_by_rho_along_no_gradient_and_steps_with_the_gradient_there():
    """late_rand's step (the control of (a)): eps has norm rho, is not the gradient's direction, is fresh each step and
    follows the seed; the update is SGD's with grad L(w + eps), computed here independently of sam.py's step."""
    p, _ = _tiny()
    net = _net(0)
    x, y = torch.rand(10, 64), torch.randint(0, 10, (10,))
    params = list(net.parameters())
    torch.manual_seed(3)
    eps = sam.random_direction(params, 0.3)
    again = sam.random_direction(params, 0.3)
    flat = torch.cat([e.flatten() for e in eps])
    assert float(flat.norm()) == pytest.approx(0.3, rel=1e-5)
    assert not torch.allclose(flat, torch.cat([e.flatten() for e in again]))  # a fresh direction each step
    net.zero_grad()
    sam.smooth_cross_entropy(net(x), y, 0.1).backward()
    g = torch.cat([q.grad.flatten() for q in params])
    assert abs(float(flat @ g / (flat.norm() * g.norm()))) < 0.2  # ~ N(0, 1/sqrt(P)) for P = 610 parameters
    # the step: the gradient at w + eps (same seed, same draw), then torch's SGD step from w
    w0 = [q.detach().clone() for q in params]
    ref = _net(0)
    with torch.no_grad():
        for q, e in zip(ref.parameters(), eps):
            q.add_(e)
    ref.zero_grad()
    sam.smooth_cross_entropy(ref(x), y, 0.1).backward()
    want = [w - 0.05 * (q.grad + p.weight_decay * w) for w, q in zip(w0, ref.parameters())]
    opt = torch.optim.SGD(params, lr=0.05, momentum=p.momentum, weight_decay=p.weight_decay)
    torch.manual_seed(3)
    loss = sam.random_sam_step(net, opt, x, y, 0.1, 0.3)
    with torch.no_grad():
        at_w = float(sam.smooth_cross_entropy(_net(0)(x), y, 0.1))
    assert float(loss) == pytest.approx(at_w, rel=1e-6)
    for q, w in zip(net.parameters(), want):
        torch.testing.assert_close(q.detach(), w, rtol=1e-5, atol=1e-6)
    # and it is not SAM's step
    sam_net = _net(0)
    sam.sam_step(sam_net, torch.optim.SGD(sam_net.parameters(), lr=0.05, momentum=p.momentum,
                                          weight_decay=p.weight_decay), x, y, 0.1, 0.3)
    assert not torch.allclose(next(sam_net.parameters()), next(net.parameters()), atol=1e-6)


def test_clean_input_control_makes_no_adversarial_example(monkeypatch):
    """late_clean (the control of (e)): every input the network sees in its late phase is a batch of the clean
    training set, PGD is never called (loop and side-by-side paths), and it takes late AT's loss and optimiser."""
    from papers.sam_late import batched

    p, t = _tiny()
    _, _, sgd_ckpts = train(_net(), t, p, arm="sgd", rho=p.rho, seed=0)

    def no_pgd(*a, **k):
        raise AssertionError("the clean-input control called PGD")

    monkeypatch.setattr(sam, "pgd", no_pgd)
    monkeypatch.setattr(batched, "pgd", no_pgd)
    seen = []
    net = _net(1)
    net.register_forward_hook(lambda mod, inp, out: seen.append(inp[0].detach().clone()) if mod.training else None)
    h, _, _ = train(net, t, p, arm="late_clean", rho=p.rho, seed=0, start=sgd_ckpts["switch"])
    assert list(h.rule) == ["clean"] * p.late_epochs and len(seen) == p.late_epochs * 4
    rows = {tuple(r.tolist()) for r in t["x_train"]}
    assert all(tuple(r.tolist()) in rows for b in seen for r in b)  # clean training images, unperturbed
    batched.train_members([_net(1)], [t], p, arm="late_clean", rho=p.rho, seeds=[0], starts=[sgd_ckpts["switch"]])
    # late AT's loss and optimiser: clean_step is adv_step's update at the clean inputs
    a, b = _net(2), _net(2)
    x, y = t["x_train"][:10], t["y_train"][:10]
    sam.clean_step(a, torch.optim.SGD(a.parameters(), lr=0.05), x, y)
    opt = torch.optim.SGD(b.parameters(), lr=0.05)
    F.cross_entropy(b(x), y).backward()
    opt.step()
    for q, r in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(q, r)


def test_side_by_side_training_equals_the_seed_loop():
    """train_members over three seeds returns each seed's history, escape and checkpoints of train() (late arms
    branched from SGD's checkpoints), to float rounding."""
    from papers.sam_late import batched

    p, _ = _tiny(epochs=6, late_epochs=3, adv_late_epochs=None, history_every=2)
    seeds = [0, 1, 2]
    tensors = [_seed_tensors(s) for s in seeds]
    loop = {s: train(_net(s), tensors[s], p, arm="sgd", rho=p.rho, seed=s, track=True) for s in seeds}
    fast = batched.train_members([_net(s) for s in seeds], tensors, p, arm="sgd", rho=p.rho, seeds=seeds, track=True)
    for arm in ("sam", "early_sam", "adv", "late_sam", "late_adv", "early_adv", "late_rand", "late_clean"):
        late = arm.startswith("late")
        starts = [loop[s][2]["switch"] for s in seeds] if late else None
        want = [train(_net(s), tensors[s], p, arm=arm, rho=p.rho, seed=s, start=starts[s] if late else None,
                      track=late) for s in seeds]
        got = batched.train_members([_net(9) if late else _net(s) for s in seeds], tensors, p, arm=arm, rho=p.rho, seeds=seeds,
                                    starts=starts, track=late)
        for (h0, e0, c0), (h1, e1, c1) in zip(want, got):
            pd_cols = ["epoch", "lr", "train_loss", "test_loss", "test_acc"]
            assert list(h0.rule) == list(h1.rule) and list(h0.columns) == list(h1.columns)
            np.testing.assert_allclose(h1[pd_cols].to_numpy(float), h0[pd_cols].to_numpy(float), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(e1.to_numpy(float), e0.to_numpy(float), rtol=1e-4, atol=1e-5)
            assert len(e0) == (p.escape_steps if late else 0)
            assert c0.keys() == c1.keys()
            for k in c0:
                assert c0[k]["epoch"] == c1[k]["epoch"]
                for name, t0 in c0[k]["model"].items():
                    torch.testing.assert_close(c1[k]["model"][name], t0, rtol=1e-4, atol=1e-5)
                for o in ("sgd", "sam"):
                    s0, s1 = c0[k]["optimizers"][o], c1[k]["optimizers"][o]
                    assert s0["param_groups"] == s1["param_groups"] and s0["state"].keys() == s1["state"].keys()
                    for i in s0["state"]:
                        torch.testing.assert_close(s1["state"][i]["momentum_buffer"], s0["state"][i]["momentum_buffer"],
                                                   rtol=1e-4, atol=1e-5)
    for (h0, e0, c0), (h1, e1, c1) in zip(loop.values(), fast):  # SGD itself, with its escape and branch points
        np.testing.assert_allclose(h1.train_loss, h0.train_loss, rtol=1e-5)
        np.testing.assert_allclose(e1.to_numpy(float), e0.to_numpy(float), rtol=1e-5, atol=1e-6)
        assert c0.keys() == c1.keys()


# ---- late_rand's radius, matched to SAM's strength (review sam_late_r20261205b) ----------------------------------
def _fitted_net_and_batches(seed=0):
    """A small MLP trained to near a minimum of the smoothed loss on 40 random points (as w_switch is), and 4 batches."""
    p, t = _tiny(epochs=30, late_epochs=2)
    net = _net(seed)
    train(net, t, p, arm="sgd", rho=p.rho, seed=seed)
    x, y = t["x_train"], t["y_train"]
    return net, [(x[i:i + 10], y[i:i + 10]) for i in range(0, 40, 10)]


def test_matched_radius_meets_sams_loss_rise_and_is_not_rho():
    """sam.matched_radius: recomputed here independently (SAM's rise with torch.func on the flat weights; the random
    rise with the same generator's draws), the random perturbation of norm r raises the mean batch loss by SAM's rise
    to 1e-3, r is far from rho, a same-norm random perturbation is much weaker than SAM's, and the weights come back."""
    from torch.func import functional_call

    net, batches = _fitted_net_and_batches()
    w0 = {k: v.detach().clone() for k, v in net.named_parameters()}
    rho, dirs = 0.3, 5
    out = sam.matched_radius(net, batches, smoothing=0.1, rho=rho, directions=dirs,
                             generator=torch.Generator().manual_seed(11))
    for k, v in net.named_parameters():
        torch.testing.assert_close(v.detach(), w0[k], rtol=0, atol=0)
    names = list(w0)

    def loss_at(flat_delta, x, y):
        ws, i = {}, 0
        for k in names:
            n = w0[k].numel()
            ws[k] = w0[k] + flat_delta[i:i + n].view_as(w0[k])
            i += n
        return sam.smooth_cross_entropy(functional_call(net, ws, (x,)), y, 0.1)

    zero = torch.zeros(sum(v.numel() for v in w0.values()))
    sam_rises = []
    for x, y in batches:
        g = torch.func.grad(loss_at)(zero, x, y)
        sam_rises.append(float(loss_at(rho * g / g.norm(), x, y) - loss_at(zero, x, y)))
    target = float(np.mean(sam_rises))
    assert out["rise_sam"] == pytest.approx(target, rel=1e-4)
    gen = torch.Generator().manual_seed(11)
    units = []
    for _ in range(len(batches) * dirs):
        d = torch.cat([torch.randn(w0[k].shape, generator=gen).flatten() for k in names])
        units.append(d / d.norm())

    def rand_rise(r):
        return float(np.mean([float(loss_at(r * units[b * dirs + k], *batches[b]) - loss_at(zero, *batches[b]))
                              for b in range(len(batches)) for k in range(dirs)]))

    assert rand_rise(out["radius"]) == pytest.approx(target, rel=1e-3)
    assert out["rise_rand"] == pytest.approx(target, rel=1e-3)
    assert rand_rise(rho) == pytest.approx(out["rise_rand_at_rho"], rel=1e-3, abs=1e-7)
    assert out["radius"] > 3 * rho  # a random direction of SAM's norm is far weaker than SAM's ascent
    assert out["rise_rand_at_rho"] < 0.2 * target


def test_late_rand_trains_each_seed_at_its_own_radius_on_both_paths():
    """The side-by-side path with per-seed radii (late_rand's calibrated r, a (M,) tensor) equals the seed loop run
    at each seed's radius; and a radius other than rho gives another run (the norm is not rho)."""
    from papers.sam_late import batched

    p, _ = _tiny(epochs=4, late_epochs=2)
    seeds = [0, 1]
    tensors = [_seed_tensors(s) for s in seeds]
    starts = [train(_net(s), tensors[s], p, arm="sgd", rho=p.rho, seed=s)[2]["switch"] for s in seeds]
    radii = [2.5, 4.0]
    want = [train(_net(s), tensors[s], p, arm="late_rand", rho=radii[s], seed=s, start=starts[s]) for s in seeds]
    got = batched.train_members([_net(9) for _ in seeds], tensors, p, arm="late_rand",
                                rho=torch.tensor(radii, dtype=torch.float32), seeds=seeds, starts=starts)
    for (h0, _, c0), (h1, _, c1) in zip(want, got):
        np.testing.assert_allclose(h0.train_loss, h1.train_loss, rtol=1e-5)
        for k in c0["final"]["model"]:
            torch.testing.assert_close(c0["final"]["model"][k], c1["final"]["model"][k], rtol=1e-5, atol=1e-6)
    at_rho = train(_net(0), tensors[0], p, arm="late_rand", rho=p.rho, seed=0, start=starts[0])
    assert not torch.allclose(at_rho[2]["final"]["model"]["1.weight"], want[0][2]["final"]["model"]["1.weight"])
