"""P1 orion on a pretrained causal LM (papers.orion.lm.PretrainedLM): the hooks against Hugging Face's own hidden
states and closed forms, and the evaluate stage end to end, on a tiny random GPT-2 written to a local directory
(the full scale points at a real one; nothing is downloaded)."""
import numpy as np
import pandas as pd
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from papers.orion import patching, stages
from papers.orion.lm import PretrainedLM, WordLM
from papers.orion.model import GPTConfig
from papers.orion.params import parse

WORDS = ["<pad>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "q", ":", "?"]


def _write_gpt2(path, n_layer=3, seed=0, n_positions=32, byte_level=False):
    """A random GPT-2 and its tokenizer, saved as save_pretrained writes them: word-level over WORDS, or (with
    `byte_level`) GPT-2-like bytes with one merge per leading-space letter, which reads any text (no unknown
    token) and gives each answer the first token "<space><first letter>"."""
    if byte_level:
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        vocab = {w: i for i, w in enumerate(["<pad>", *sorted(alphabet), *(f"Ġ{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789")])}
        merges = [("Ġ", c) for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
        tok = Tokenizer(models.BPE(vocab, merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")
    else:
        vocab = {w: i for i, w in enumerate(WORDS)}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        wrapped = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>")
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(vocab), n_positions=n_positions, n_embd=16, n_layer=n_layer, n_head=2))
    model.save_pretrained(path)
    wrapped.save_pretrained(path)
    return model.eval()


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2")
    _write_gpt2(path)
    return path


@pytest.fixture(scope="module")
def lm(gpt2_dir):
    return PretrainedLM(gpt2_dir, device="cpu")


PROMPTS = [["a", "b", "c", "q", ":"], ["d", "e", "q", ":"], ["f", "g", "a", "b", "e", "q", "?"]]


def test_residuals_are_huggingface_hidden_states(lm):
    """Layer l of our hooks is hidden_states[l] of the model's own output (l < n_layer; GPT-2's last entry has
    the final LayerNorm applied, so the last block's output is checked through the logits instead)."""
    batch = lm.encode(PROMPTS)
    assert batch.pos.tolist() == [4, 3, 6] and lm.n_layer == 3
    ours = lm.residuals(batch)  # (L + 1, B, C)
    with torch.no_grad():
        out = lm.model(input_ids=batch.ids, attention_mask=batch.mask.long(), output_hidden_states=True)
    rows = torch.arange(3)
    for layer in range(lm.n_layer):
        torch.testing.assert_close(ours[layer], out.hidden_states[layer][rows, batch.pos])
    last = lm.model.lm_head(lm.model.transformer.ln_f(ours[-1]))
    torch.testing.assert_close(last, out.logits[rows, batch.pos])


def test_right_padding_does_not_change_the_last_token(lm):
    batch = lm.encode(PROMPTS)
    together = lm.last_logits(batch)
    for i, p in enumerate(PROMPTS):
        torch.testing.assert_close(together[i], lm.last_logits(lm.encode([p]))[0], atol=1e-5, rtol=1e-5)


def test_patching_closed_forms(lm):
    """Writing a prompt's own state changes nothing; writing x1's state after the last block gives x1's logits
    exactly (only the final norm and the head follow); writing it at layer 0 changes the output."""
    x1, x2 = lm.encode([PROMPTS[0]]), lm.encode([PROMPTS[1]])
    own, src = lm.residuals(x2), lm.residuals(x1)
    clean2 = lm.last_logits(x2)
    for layer in range(lm.n_layer + 1):
        torch.testing.assert_close(lm.patched_logits(x2, layer, own[layer]), clean2)
    torch.testing.assert_close(lm.patched_logits(x2, lm.n_layer, src[-1]), lm.last_logits(x1), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(lm.patched_logits(x2, 0, src[0]), clean2)


def test_a_prompt_longer_than_the_context_is_a_clear_error(lm):
    with pytest.raises(ValueError, match="exceeds the model's 32 positions"):
        lm.encode([["a"] * 40])


def test_answer_ids_are_the_first_token_of_the_spaced_answer(lm, tmp_path):
    assert lm.answer_ids(["c", "q"]).tolist() == [WORDS.index("c"), WORDS.index("q")]
    with pytest.raises(ValueError, match="does not know the answer 'zebra'"):
        lm.answer_ids(["c", "zebra"])
    _write_gpt2(tmp_path, byte_level=True)
    byte_lm = PretrainedLM(tmp_path, device="cpu")
    vocab = byte_lm.tokenizer.get_vocab()
    assert byte_lm.answer_ids(["cat", "zebra"]).tolist() == [vocab["Ġc"], vocab["Ġz"]]
    assert byte_lm.encode([["a", "cat"]]).ids[0].tolist() == [vocab["a"], vocab["Ġc"], vocab["a"], vocab["t"]]


def test_sweep_through_hooks_equals_a_hand_written_forward(tmp_path):
    """The whole sweep through PretrainedLM's module hooks equals the sweep through WordLM over a hand-written
    forward of the same GPT-2 blocks (our GPT's hook protocol), an independent path to the same numbers."""
    model = _write_gpt2(tmp_path, n_layer=2, seed=1)
    lm = PretrainedLM(tmp_path, device="cpu")
    index = {w: i for i, w in enumerate(WORDS)}

    class HFAsWordModel(torch.nn.Module):  # the GPT.forward(idx, hook, at) protocol over the HF blocks
        cfg = GPTConfig(vocab_size=len(WORDS), block_size=32, n_layer=2)

        def forward(self, idx, hook=None, at=None):
            t = model.transformer
            x = t.wte(idx) + t.wpe(torch.arange(idx.shape[1]))
            x = hook(0, x) if hook else x
            for layer, block in enumerate(t.h, start=1):
                out = block(x)
                x = out[0] if isinstance(out, tuple) else out
                x = hook(layer, x) if hook else x
            if at is not None:
                x = x[torch.arange(len(at)), at]
            return model.lm_head(t.ln_f(x))

    pairs = pd.DataFrame({"x1": ["a b c q :", "d e f q :"], "x2": ["e f g q :", "b c a q :"],
                          "x21": ["e f g q :", "b c a q :"], "x3": ["c d e q :", "f a b q :"], "r1c1": ["a", "d"],
                          "r2c2": ["e", "b"], "r1c2": ["g", "c"], "r2c3": ["d", "e"]})
    ours = patching.request_patching(WordLM(HFAsWordModel(), index), pairs)
    theirs = patching.request_patching(lm, pairs)
    pd.testing.assert_frame_equal(ours, theirs, atol=1e-5, rtol=1e-4)


def test_evaluate_pretrained_stage_writes_the_tiny_models_columns(gpt2_dir, tmp_path):
    """The stage on held-out sets whose words the tokenizer knows; the outputs have the columns the report reads."""
    rng = np.random.default_rng(0)
    words = ["a", "b", "c", "d", "e"]
    test = pd.DataFrame({"family": ["story"] * 4, "key": ["k"] * 4, "prompt": ["a b q :", "c d q :", "e a q :", "b c q :"],
                         "answer": ["a", "c", "e", "b"]})
    pairs = pd.DataFrame([{"family": "story", "k1": "x", "k2": "y", "x1": "a b q :", "x2": "c d q ?", "x21": "c d q :",
                           "x3": "e b q ?", "r1c1": "a", "r2c2": "d", "r1c2": str(rng.choice(words)), "r2c3": "b",
                           "request_tokens": 2,
                           "key_distance": 1} for _ in range(3)])
    injection = pd.DataFrame([{"role": "trusted", "clean": "a b q :", "injected": "a b q :", "answer": "a",
                               "injected_key": "", "injected_answer": "a"},
                              {"role": "trusted_other", "clean": "b a q :", "injected": "b a q :", "answer": "b",
                               "injected_key": "", "injected_answer": "b"},
                              {"role": "untrusted", "clean": "c d q :", "injected": "c d : q :", "answer": "c",
                               "injected_key": "job", "injected_answer": "d"}])
    paths = {k: tmp_path / f"{k}.parquet" for k in ("test", "pairs", "injection", "metrics", "sweep", "oversight")}
    for df, k in ((test, "test"), (pairs, "pairs"), (injection, "injection")):
        df.to_parquet(paths[k])
    cfg = {"pretrained": [{"name": "gpt2tiny", "path": str(gpt2_dir)}]}
    stages.evaluate_pretrained(cfg=cfg, model_name="gpt2tiny", **paths)
    acc, sweep, over = (pd.read_parquet(paths[k]) for k in ("metrics", "sweep", "oversight"))
    assert set(acc.columns) >= {"model", "seed", "n_layer", "family", "accuracy"} and acc.n_layer.iloc[0] == 3
    assert sorted(sweep.layer.unique()) == [0, 1, 2, 3]
    assert set(sweep.hypothesis) == set(patching.HYPOTHESES) | set(patching.CONTROL_HYPOTHESES)
    assert over.layer.min() == -1 and set(over.condition) == {"injected", "clean"}
    assert set(over.trusted) == {"trusted", "trusted_other"} and set(sweep.source) == {"request", patching.CONTROL}
    assert (sweep.window_request_tokens == 0).all() and not acc.routed.any()  # no value window in a pretrained LM


def test_pretrained_params_name_the_bad_key(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"orion.pretrained\[0\].path"):
        parse({"pretrained": [{"name": "x", "path": str(tmp_path / "missing")}]})
    with pytest.raises(ValueError, match="clash"):
        parse({"pretrained": [{"name": parse({}).model_names[0], "path": str(tmp_path)}]})


def test_smoke_dag_with_a_pretrained_model(tmp_path):
    """orion's smoke DAG with one pretrained LM configured: its evaluate job runs beside the trained model's and
    the report's tables and claims cover it."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
    from smk import ROOT, snakemake

    _write_gpt2(tmp_path / "gpt2", byte_level=True, n_positions=1024)
    extra = tmp_path / "pretrained.yaml"
    extra.write_text(f"orion:\n  pretrained: [{{name: gpt2tiny, path: {tmp_path / 'gpt2'}}}]\n")
    run = snakemake("orion", "-c", "1", "--configfile", str(ROOT / "config/smoke.yaml"), str(extra),
                    workdir=tmp_path / "run")
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "run/results/smoke/orion"
    table = pd.read_csv(out / "table.csv")
    assert set(table.model) == {"L3", "L3routed", "gpt2tiny"}
    assert (out / "evaluate/pretrained_gpt2tiny_patching.parquet").is_file()
    claims = json.loads((out / "claims.json").read_text())
    assert claims["claims"][0]["measured"]["pairs_tested"] == 4  # story x (3 seeds of L3 + gpt2tiny); L3routed apart
    assert claims["claims"][2]["verdict"] != "not measured"  # claim (c) runs on the pretrained LM
