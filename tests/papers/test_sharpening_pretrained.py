"""P11 sharpening, the paper's own setting (full scale): the pretrained-LM path dry-runs end to end on a tiny
randomly initialised GPT-2 written to disk with its tokenizer, its self-reward matches Hugging Face's own
transition scores, and the GSM-style prompt loader names the file and line of bad input."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
import yaml

from papers.sharpening import pretrained as pt
from papers.sharpening import stages


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 1-layer GPT-2 over a byte-level tokenizer with no merges (one token per byte), saved as a user would."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    path = tmp_path_factory.mktemp("tiny_gpt2")
    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    vocab["<|endoftext|>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(vocab), n_positions=128, n_embd=16, n_layer=1, n_head=2,
                                  bos_token_id=len(vocab) - 1, eos_token_id=len(vocab) - 1)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(path)
    return path


def _gsm(path: Path, rows) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_self_reward_is_the_sum_of_huggingface_transition_scores(tiny_model_dir):
    model, tok = pt.load(tiny_model_dir)
    texts, reward = pt.sample_and_score(model, tok, "Question: 2+2?\nAnswer:", 6, 10, seed=3)
    ids = tok("Question: 2+2?\nAnswer:", return_tensors="pt")["input_ids"]
    torch.manual_seed(3)  # the same draws, now with Hugging Face's own scores
    out = model.generate(ids, do_sample=True, num_return_sequences=6, max_new_tokens=10, top_k=0, top_p=1.0,
                         temperature=1.0, output_scores=True, return_dict_in_generate=True,
                         pad_token_id=tok.eos_token_id)
    scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)  # (6, T)
    new = out.sequences[:, ids.shape[1]:]
    eos = (new == tok.eos_token_id).long()
    keep = (eos.cumsum(1) - eos) == 0  # up to and including the first end-of-sequence token
    np.testing.assert_allclose(reward, (scores * keep).sum(1).numpy(), rtol=1e-4, atol=1e-4)
    assert texts == tok.batch_decode(torch.where(keep, new, tok.eos_token_id), skip_special_tokens=True)


def test_pretrained_stage_dry_runs_at_full_scale(tiny_model_dir, tmp_path):
    cfg = yaml.safe_load((Path(__file__).parents[2] / "config" / "config.yaml").read_text())["sharpening"]
    prompts = _gsm(tmp_path / "gsm.jsonl", [{"question": f"What is {i} + 1?",
                                             "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(3)])
    cfg = {**cfg, "pretrained": {**cfg["pretrained"], "models": [{"name": "tiny", "path": str(tiny_model_dir)}],
                                 "prompts": str(prompts), "bon_sizes": [1, 2, 4], "max_new_tokens": 6}}
    stages.pretrained(cfg=cfg, name="tiny", prompts=prompts, results=tmp_path / "out.parquet")
    df = pd.read_parquet(tmp_path / "out.parquet")
    assert sorted(df.method.unique()) == ["best_of_n", "best_of_n_shuffled", "greedy"]
    means, per_question = df[df.level == "pretrained"], df[df.level == "pretrained_question"]
    assert sorted(means[means.method == "best_of_n"].budget) == [1, 2, 4]
    assert sorted(per_question.seed.unique()) == [0, 1, 2] and len(per_question) == 3 * (1 + 2 * 3)
    assert df.accuracy.between(0, 1).all()
    # the table's row is the mean of the per-question rows that claim (a) resamples at the full scale
    mean_q = per_question.groupby(["method", "budget"]).accuracy.mean()
    for r in means.itertuples():
        assert r.accuracy == pytest.approx(mean_q[(r.method, r.budget)])
    with pytest.raises(ValueError, match="no model named 'other'"):
        stages.pretrained(cfg=cfg, name="other", prompts=prompts, results=tmp_path / "x.parquet")


def test_math_prompt_loader_and_answer_check(tmp_path):
    good = _gsm(tmp_path / "good.jsonl", [{"question": "q", "answer": "so 1,234 apples\n#### 1,234"}])
    assert pt.read_math_prompts(good) == [{"question": "q", "reference": 1234.0}]
    assert pt.is_correct("He has 3 then 1234 apples.\n\nQuestion: next", 1234.0, "\n\nQuestion:")
    assert not pt.is_correct("1234 no wait 12\n\nQuestion: 1234", 1234.0, "\n\nQuestion:")
    assert pt.parse_number("none") is None and math.isclose(pt.parse_number("-2.5 m"), -2.5)
    (tmp_path / "bad.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q"\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: not JSON"):
        pt.read_math_prompts(tmp_path / "bad.jsonl")
    _gsm(tmp_path / "nomark.jsonl", [{"question": "q", "answer": "1"}])
    with pytest.raises(ValueError, match=r"nomark.jsonl, line 1: .*####"):
        pt.read_math_prompts(tmp_path / "nomark.jsonl")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        pt.read_math_prompts(tmp_path / "missing.jsonl")
