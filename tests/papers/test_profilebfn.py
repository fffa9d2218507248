"""P17 profilebfn: the Bayesian flow, the loss, the sampler and the measures against independent computations
(closed forms, hand-worked cases, sampling against the analytic marginal, scikit-learn, pyhmmer's own search)."""
import gzip

import numpy as np
import pytest
import torch
from scipy import stats

from papers.profilebfn import bfn, data
from papers.profilebfn import metrics as M
from papers.profilebfn.params import parse

K = data.K


# ---- the flow ---------------------------------------------------------------------------------
def test_schedule_closed_form_and_rate():
    t = torch.tensor([0.0, 0.3, 0.6, 1.0])
    assert torch.allclose(bfn.beta(t, 2.0), 2.0 * t ** 2)
    assert float(bfn.beta(torch.tensor(1.0), 2.0)) == 2.0  # beta(1) = beta1
    h = 1e-4  # beta'(t) against a central difference
    fd = (bfn.beta(t[1:3] + h, 2.0) - bfn.beta(t[1:3] - h, 2.0)) / (2 * h)
    assert torch.allclose(bfn.beta_rate(t[1:3], 2.0), fd, atol=1e-3)


@pytest.mark.parametrize("degenerate", [True, False])
def test_flow_logits_have_the_sender_moments(degenerate):
    # y ~ N(beta (K p - 1), beta K I): sample mean and variance against the closed form, for a sequence
    # (one-hot p, BFN Eq. 185) and for a profile column (ProfileBFN Eq. 8).
    g = torch.Generator().manual_seed(0)
    p = torch.zeros(K)
    if degenerate:
        p[3] = 1.0
    else:
        p[:4] = torch.tensor([0.5, 0.3, 0.15, 0.05])
    n, t, beta1 = 20000, 0.6, 2.0
    y = bfn.flow_logits(p.expand(n, 1, K).clone(), torch.full((n,), t), beta1, g)[:, 0]  # (n, K)
    b = beta1 * t ** 2
    assert torch.allclose(y.mean(0), b * (K * p - 1), atol=4 * (b * K / n) ** 0.5)
    assert torch.allclose(y.var(0), torch.full((K,), b * K), rtol=0.05)


def test_flow_marginal_equals_composed_bayesian_updates():
    # BFN Eq. 178: n Bayesian updates of accuracies alpha_i from the uniform prior give the flow at
    # beta = sum alpha_i. The flow's theta against theta after 10 updates, by sampling (two-sample KS).
    g = torch.Generator().manual_seed(1)
    n, beta1, t = 4000, 2.0, 0.7
    x = torch.full((n, 1), 5)
    direct = bfn.flow(torch.nn.functional.one_hot(x, K).float(), torch.full((n,), t), beta1, g)[:, 0]
    theta = torch.full((n, 1, K), 1.0 / K)
    grid = torch.linspace(0, t, 11)
    for a, b in zip(grid[:-1], grid[1:]):
        alpha = float(bfn.beta(b, beta1) - bfn.beta(a, beta1))
        theta = bfn.bayesian_update(theta, x, alpha, g)
    composed = theta[:, 0]
    for k in (5, 0):  # the true class and another
        assert stats.ks_2samp(direct[:, k].numpy(), composed[:, k].numpy()).pvalue > 0.01
    assert abs(float(direct[:, 5].mean() - composed[:, 5].mean())) < 0.02


def test_continuous_loss_hand_case():
    # K = 20, x = 0, e_hat uniform: ||e_x - e_hat||^2 = 0.95^2 + 19 * 0.05^2 = 0.95; t = 0.5, beta1 = 2:
    # (K / 2) beta'(t) = 10 * 2 = 20, so the loss is 19.
    x = torch.zeros(1, 1, dtype=torch.long)
    e_hat = torch.full((1, 1, K), 1.0 / K)
    assert float(bfn.continuous_loss(x, e_hat, torch.tensor([0.5]), 2.0)) == pytest.approx(19.0)


def test_continuous_loss_is_the_limit_of_n_gaussian_kls():
    # BFN Sec. 6.12: with alpha = beta(t) - beta(t - 1/n), n KL(N(alpha (K e_x - 1), alpha K) ||
    # N(alpha (K e_hat - 1), alpha K)) -> (K / 2) beta'(t) ||e_x - e_hat||^2 as n grows (torch's KL).
    torch.manual_seed(0)
    e_hat = torch.softmax(torch.randn(1, 1, K), -1)
    x = torch.tensor([[7]])
    t, beta1, n = 0.8, 2.0, 10000
    alpha = beta1 * (t ** 2 - (t - 1 / n) ** 2)  # in float64: the difference of two close accuracies
    e_x = torch.nn.functional.one_hot(x, K).double()
    sd = torch.full((K,), (alpha * K) ** 0.5, dtype=torch.float64)
    kl = torch.distributions.kl_divergence(
        torch.distributions.Normal(alpha * (K * e_x[0, 0] - 1), sd),
        torch.distributions.Normal(alpha * (K * e_hat[0, 0].double() - 1), sd)).sum()
    assert float(n * kl) == pytest.approx(float(bfn.continuous_loss(x, e_hat, torch.tensor([t]), beta1)), rel=1e-3)


def test_sampler_follows_a_confident_network():
    # A network that always predicts one fixed sequence: the sampler's argmax is that sequence, whatever
    # the profile (the last step replaces the distribution by the prediction).
    target = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])

    def net(theta, t):
        return 50.0 * torch.nn.functional.one_hot(target, K).float().expand(theta.shape[0], -1, -1)

    prior = torch.full((8, K), 1.0 / K)
    out = bfn.sample(net, prior, 5, t0=0.6, steps=4, beta1=2.0, generator=torch.Generator().manual_seed(0))
    assert (out == target).all()


# ---- data -------------------------------------------------------------------------------------
def test_profile_pseudocount_by_hand():
    x = np.array([[0, 1], [0, data.GAP], [2, 1]], dtype=np.int8)
    p = data.profile(x, 1.0)
    assert p[0, 0] == pytest.approx(3 / 23) and p[0, 2] == pytest.approx(2 / 23) and p[0, 5] == pytest.approx(1 / 23)
    assert p[1, 1] == pytest.approx(3 / 22)  # the gap is not counted
    assert np.allclose(p.sum(1), 1.0)


def test_encode_decode_round_trip():
    rows = ["ACDEF-Y", "XWVT.-A"]
    enc = data.encode(rows)
    assert enc[1, 0] == data.GAP and enc[1, 4] == data.GAP  # X and '.' are not residues
    assert data.decode(enc) == ["ACDEF-Y", "-WVT--A"]


def test_packaged_family_reads():
    f = data.read_stockholm(data.default_family_paths()["RRM_1"])
    assert f.name == "RRM_1" and len(f.aligned) == 79 and len(f.match_columns) == 72 and f.gathering == 17.7
    nif3 = data.read_stockholm(data.default_family_paths()["NIF3"], "NIF3")  # the second family of its file
    assert nif3.name == "NIF3" and len(nif3.aligned) == 122


def test_gibbs_sampler_matches_the_exact_two_site_distribution():
    # L = 2 with a planted contact: the exact joint P(a, b) ~ exp(h_1(a) + h_2(b) + J(a, b)) against
    # 20,000 Gibbs draws.
    rng = np.random.default_rng(0)
    contacts = np.array([[0, 1]])
    h, J = data.potts_model(2, contacts, 3, 2.0, 1.5, rng)
    logp = h[0][:, None] + h[1][None, :] + J[0, 1]
    exact = np.exp(logp - logp.max())
    exact /= exact.sum()
    x = data.gibbs_sample(h, J, 20000, 10, rng)
    counts = np.zeros((K, K))
    np.add.at(counts, (x[:, 0], x[:, 1]), 1.0)
    assert (exact * len(x)).min() > 5  # every cell expects enough draws for Pearson's chi-square test
    assert stats.chisquare(counts.ravel(), exact.ravel() * len(x)).pvalue > 0.001
    # ... and a sampler that ignored the coupling would fail it
    indep = np.outer(exact.sum(1), exact.sum(0))
    assert stats.chisquare(counts.ravel(), indep.ravel() * len(x)).pvalue < 1e-6


# ---- measures ---------------------------------------------------------------------------------
def test_mutual_information_against_scikit_learn():
    from sklearn.metrics import mutual_info_score

    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, 3000)
    b = np.where(rng.random(3000) < 0.7, a, rng.integers(0, 4, 3000))
    x = np.stack([a, b, rng.integers(0, 20, 3000)], 1).astype(np.int8)
    mi = M.mutual_information(x, pseudocount=1e-9)
    assert mi[0, 1] == pytest.approx(mutual_info_score(a, b), rel=1e-4)
    assert mi[0, 2] < 0.1 * mi[0, 1] and mi[0, 0] == 0.0


def test_apc_by_hand():
    mi = np.array([[0, 2, 1], [2, 0, 3], [1, 3, 0]], dtype=float)
    # row means over off-diagonal: 1.5, 2.5, 2; overall 2: APC_01 = 2 - 1.5 * 2.5 / 2 = 0.125
    out = M.apc(mi)
    assert out[0, 1] == pytest.approx(0.125) and out[1, 2] == pytest.approx(3 - 2.5 * 2 / 2) and out[0, 0] == 0


def test_contact_precision_by_hand():
    s = np.zeros((6, 6))
    s[0, 3] = s[3, 0] = 5.0  # a contact, ranked first
    s[1, 2] = s[2, 1] = 9.0  # separation 1: not scored at min_separation 2
    s[1, 5] = s[5, 1] = 4.0  # not a contact, ranked second
    assert M.contact_precision(s, np.array([[0, 3], [2, 5]]), top=2, min_separation=2) == 0.5


def test_identity_and_novelty_by_hand():
    a = data.encode(["ACDE", "AC-E"])
    b = data.encode(["ACDF", "WWWW"])
    ident = M.identity_matrix(a, b)
    assert ident[0, 0] == pytest.approx(3 / 4) and ident[1, 0] == pytest.approx(2 / 3) and ident[0, 1] == 0
    dn = M.diversity_novelty(a, b)
    assert dn["nearest_identity"] == pytest.approx((3 / 4 + 2 / 3) / 2)
    assert dn["pairwise_identity"] == pytest.approx(1.0)  # the two rows agree wherever both have a residue
    assert M.uniqueness(data.encode(["AC", "AC", "AD"])) == pytest.approx(2 / 3)


def test_hmm_scores_equal_pyhmmers_own_search():
    import pyhmmer

    f = data.read_stockholm(data.default_family_paths()["RRM_1"])
    hmm = M.build_hmm(f.name, f.aligned, f.match_columns)
    assert hmm.M == len(f.match_columns)  # the match states are our match columns
    members = [r.replace("-", "") for r in f.aligned[:10]]
    ours = M.hmm_scores(hmm, members)
    alphabet = hmm.alphabet
    seqs = pyhmmer.easel.DigitalSequenceBlock(alphabet, [
        pyhmmer.easel.TextSequence(name=f"g{i}", sequence=s).digitize(alphabet) for i, s in enumerate(members)])
    theirs = {h.name: h.score for h in next(iter(pyhmmer.hmmsearch([hmm], seqs, Z=len(members))))}
    for i, s in enumerate(ours):
        assert s == pytest.approx(theirs[f"g{i}"], abs=1e-4)
    assert (ours > f.gathering).all()  # seed members clear the family's own gathering threshold


# ---- bad input stops with a message naming the file, record or key -----------------------------
def test_missing_and_malformed_alignment(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.sto"):
        data.read_stockholm(tmp_path / "nope.sto")
    bad = tmp_path / "bad.sto"
    bad.write_text("# STOCKHOLM 1.0\n#=GF ID toy\nseq1 ACDE\nseq2 AC\n//\n")
    with pytest.raises(ValueError, match=r"bad.sto.*'seq2'"):
        data.read_stockholm(bad)
    unclosed = tmp_path / "unclosed.sto.gz"
    with gzip.open(unclosed, "wt") as fh:
        fh.write("# STOCKHOLM 1.0\nseq1 ACDE\n")
    with pytest.raises(ValueError, match="unclosed.sto.gz.*no closing"):
        data.read_stockholm(unclosed)
    with pytest.raises(ValueError, match="no family with '#=GF ID fn3'"):
        data.read_stockholm(data.default_family_paths()["RRM_1"], "fn3")


def test_malformed_fasta(tmp_path):
    bad = tmp_path / "bad.faa"
    bad.write_text("ACDE\n>x\nAC\n")
    with pytest.raises(ValueError, match="bad.faa: line 1"):
        data.read_fasta(bad)


@pytest.mark.parametrize("cfg, key", [
    ({"t0": 1.5}, "profilebfn.t0"),
    ({"families": ["NoSuchFamily"]}, "profilebfn.families"),
    ({"sampling_steps": 3}, "profilebfn.sampling_steps"),
    ({"model": {"d_model": 30, "n_head": 4}}, "profilebfn.model"),
])
def test_wrong_config_values_name_the_key(cfg, key):
    with pytest.raises((ValueError, KeyError), match=key.replace(".", r"\.")):
        parse(cfg)


# ---- the competence gate, the covariation statistic, the streamed data -----------------------------------------
def test_context_free_prediction_is_the_bayes_posterior_of_one_position():
    """p(x | y) is proportional to prior_x N(y; beta (K e_x - 1), beta K I): the explicit Gaussian densities give
    the same posterior as prior x softmax(y)."""
    rng = np.random.default_rng(0)
    prior = rng.dirichlet(np.ones(K))
    beta = 0.7
    y = rng.normal(size=K) * np.sqrt(beta * K)
    log_like = np.array([-((y - beta * (K * np.eye(K)[x] - 1)) ** 2).sum() / (2 * beta * K) for x in range(K)])
    want = prior * np.exp(log_like - log_like.max())
    want /= want.sum()
    theta = torch.softmax(torch.tensor(y), -1)
    got = bfn.context_free_prediction(theta[None], torch.tensor(prior))[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_per_sequence_loss_averages_to_the_batch_loss_on_equal_lengths():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, K, (3, 5), generator=g)
    e_hat = torch.softmax(torch.randn(3, 5, K, generator=g), -1)
    t = torch.rand(3, generator=g)
    mask = torch.ones(3, 5, dtype=torch.bool)
    per = bfn.continuous_loss_per_sequence(x, e_hat, t, 2.0, mask)
    assert float(per.mean()) == pytest.approx(float(bfn.continuous_loss(x, e_hat, t, 2.0, mask)), rel=1e-6)


def test_contact_auc_by_hand_and_against_scikit_learn():
    from sklearn.metrics import roc_auc_score

    s = np.zeros((6, 6))
    s[0, 3] = s[3, 0] = 5.0  # contact, top
    s[2, 5] = s[5, 2] = 1.0  # contact, tied with (1, 4)
    s[1, 4] = s[4, 1] = 1.0
    contacts = np.array([[0, 3], [2, 5]])
    # pairs at |i - j| >= 2: 10; the contacts outscore 8 non-contacts each, (2, 5) ties one (half)
    assert M.contact_auc(s, contacts, 2) == pytest.approx((8 + 7.5) / 16)
    rng = np.random.default_rng(1)
    r = rng.normal(size=(30, 30))
    r = r + r.T
    c = data.planted_contacts(30, 10, 4, rng)
    i, j = np.triu_indices(30, k=4)
    truth = np.isin(i * 100 + j, c[:, 0] * 100 + c[:, 1])
    assert M.contact_auc(r, c, 4) == pytest.approx(roc_auc_score(truth, r[i, j]))


def test_planted_contacts_are_disjoint_far_apart_and_reproducible():
    a = data.planted_contacts(40, 20, 4, np.random.default_rng(7))
    assert len(np.unique(a)) == 40 and (a[:, 1] - a[:, 0] >= 4).all()  # a perfect matching of the 40 columns
    assert np.array_equal(a, data.planted_contacts(40, 20, 4, np.random.default_rng(7)))
    with pytest.raises(ValueError, match="disjoint"):
        data.planted_contacts(10, 6, 2, np.random.default_rng(0))


def test_training_set_is_streamed_filtered_and_held_out(tmp_path):
    """A FASTA of RRM_1 members and other proteins, in chunks of 7 records: the members hit the family's HMM and are
    dropped, a share of the rest is held out, the rest is written group by group; the pool streams row groups."""
    import pyarrow.parquet as pq

    from papers.profilebfn.stages import TrainingPool, filter_training

    f = data.read_stockholm(data.default_family_paths()["RRM_1"])
    hmm = M.build_hmm(f.name, f.aligned, f.match_columns)
    members = [r.replace("-", "") for r in f.aligned[:6]]
    others = [s for _, s in data.read_fasta(data.default_training_path())[:30]]
    fasta = tmp_path / "train.faa"
    fasta.write_text("".join(f">s{i}\n{s}\n" for i, s in enumerate(members + others)))
    out = tmp_path / "train.parquet"
    res = filter_training(fasta, [hmm], 1e-3, {"fraction": 0.2, "max": 3}, np.random.default_rng(0), out,
                          {"name": ["potts_0"], "sequence": ["ACDE"], "source": ["potts"]}, chunk_size=7)
    written = pq.read_table(out).to_pandas()
    assert res["removed"] == 6 and len(res["heldout"]) <= 3
    assert res["kept"] + len(res["heldout"]) == 30 and len(written) == res["kept"] + 1
    assert not set(members) & set(written.sequence) and pq.ParquetFile(out).metadata.num_row_groups == 6 + 1  # 36 records in chunks of 7, then the extra rows
    assert np.isclose(res["composition"].sum(), 1.0)
    pool = TrainingPool(out, np.random.default_rng(0), in_memory=5, refresh=1)  # streams one row group at a time
    assert pool.streaming and all(len(x) for x in pool.sample(4))
