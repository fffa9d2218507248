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
           "hidden": [8], "epochs": 4, "late_epochs": 2, "batch_size": 10, "lr": 0.05, "momentum": 0.9,
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
    h_branch, esc, _ = train(branched, t, p, arm=arm, rho=p.rho, seed=0, start=sgd_ckpts["switch"], track=True)
    for a, b in zip(scratch.parameters(), branched.parameters()):
        torch.testing.assert_close(a, b)
    assert list(h_branch.epoch) == [2, 3] and list(h_branch.rule) == list(h_scratch.rule.iloc[2:])
    assert list(esc.step) == [1, 2, 3] and (esc.distance > 0).all()


def test_a_sweep_arm_branched_at_its_own_switch_equals_the_run_from_scratch():
    p, t = _tiny(epochs=6, late_epochs=2, late_sweep=[4])
    assert p.switch_epochs == [2, 4]
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
def _arms(seeds, rho, acc, eig, robust, noise, rng):
    """A metrics table (evaluate's) with per-arm means `acc`, `eig`, `robust`, plus seed noise."""
    import pandas as pd

    from papers.sam_late.params import is_sam_arm

    rows = []
    for arm in acc:
        for seed in range(seeds):
            rows.append({"arm": arm, "rho": rho if is_sam_arm(arm) else 0.0, "seed": seed,
                         "test_acc": acc[arm] + noise * rng.normal(), "eig_1": eig[arm] * (1 + 0.02 * rng.normal()),
                         "robust_acc": robust[arm] + 0.005 * rng.normal(), "train_acc": 0.8, "distance": 1.0})
    return pd.DataFrame(rows)


def _fits(seeds, r2_exp, r2_pow, rate, rng):
    import pandas as pd

    return pd.DataFrame({"seed": range(seeds), "rate": rate + 0.001 * rng.normal(size=seeds),
                         "r2_exp": r2_exp + 0.005 * rng.normal(size=seeds),
                         "r2_pow": r2_pow + 0.005 * rng.normal(size=seeds), "power": 1.0}).set_index("seed")


@pytest.mark.parametrize("sam_acc_gain", [0.08, 0.0])
def test_claims_decide_on_seed_intervals_with_their_controls(sam_acc_gain):
    from papers.sam_late.stages import sam_late_claims

    rng = np.random.default_rng(0)
    p = parse({"seeds": 5, "rho": 0.3, "rhos": [0.3], "epochs": 160, "late_epochs": 10, "late_sweep": [40]})
    acc = {"sgd": 0.82, "sam": 0.82 + sam_acc_gain, "late_sam": 0.82 + 0.9 * sam_acc_gain,
           "late_sam_k40": 0.82 + 0.95 * sam_acc_gain, "early_sam": 0.82 + 0.05 * sam_acc_gain, "adv": 0.8,
           "late_adv": 0.8}
    eig = {"sgd": 10.0, "sam": 3.0, "late_sam": 3.5, "late_sam_k40": 3.2, "early_sam": 9.5, "adv": 8.0,
           "late_adv": 8.0}
    robust = {"sgd": 0.2, "sam": 0.3, "late_sam": 0.25, "late_sam_k40": 0.25, "early_sam": 0.2, "adv": 0.6,
              "late_adv": 0.55}
    m = _arms(5, 0.3, acc, eig, robust, noise=0.003, rng=rng)
    sam_fits = _fits(5, 0.97, 0.8, 0.05, rng)
    sgd_fits = _fits(5, 0.6, 0.7, 0.01, rng)
    late_barriers = [0.01, 0.0, 0.02, 0.01, 0.0]
    claims = {c.id: c for c in sam_late_claims(p, m, sam_fits, sgd_fits, late_barriers, [1.5, 2.0, 1.8, 1.2, 1.6])}
    assert claims["c"].verdict == "holds" and claims["c"].control.verdict == "does not hold"
    assert claims["d"].verdict == "holds" and claims["d"].control.verdict == "does not hold"
    assert claims["e"].verdict == "holds" and claims["e"].control.verdict == "does not hold"
    # (b)'s control: two late-SAM arms (both end with SAM), so the "much less" test must fail
    assert claims["b"].control.verdict == "does not hold"
    if sam_acc_gain:
        assert claims["a"].verdict == "holds" and claims["a"].control.verdict == "does not hold"
        assert len(claims["a"].evidence) == 2 + 2 * 2  # the two gaps, then both shares at K = 10 and K = 40
        assert claims["b"].verdict == "holds"
    else:  # no accuracy gap between SAM and SGD: the gap fractions cannot hold, the note says why
        assert claims["a"].verdict != "holds" and "seed noise" in claims["a"].note
        assert claims["b"].verdict != "holds"
    # a control line as long as late SAM's that shows no barrier either makes (d) vacuous: inconclusive
    flat = {c.id: c for c in sam_late_claims(p, m, sam_fits, sgd_fits, late_barriers, [0.0] * 5)}
    assert flat["d"].control.verdict == "holds" and flat["d"].verdict == "inconclusive"
    assert "cannot tell one valley from two" in flat["d"].note
