"""fairseq-alibi-import-hf on GPT-2s shaped like trained ones: every logit far below zero (their token
rows share a direction that the final LayerNorm's bias points against), where a zero row's logit 0
would take almost all the mass. fairseq's distribution is HF's, exactly, from the model, the hub
interface, fairseq-eval-lm and the export back to Hugging Face; the conversion to ALiBi keeps it."""
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from conftest import REPO, run
from gpt2_shapes import VARIANTS, fairseq_index, hf_log_probs, wikitext_lines
from gpt2_shapes import negative_gpt2 as import_negative_gpt2

pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=VARIANTS)
def negative_gpt2(request, tmp_path_factory):
    return import_negative_gpt2(request.param, tmp_path_factory.mktemp(request.param))


def test_the_gpt2s_logits_sit_far_below_zero(negative_gpt2):
    _, gpt2, encode, _, _ = negative_gpt2
    ids = [gpt2.config.eos_token_id, *encode(wikitext_lines()[3])][:64]
    with torch.no_grad():
        logits = gpt2(torch.tensor([ids])).logits
    assert logits.max() < -5, logits.max()


def test_fairseqs_log_probabilities_are_the_gpt2s_and_its_specials_take_no_mass(negative_gpt2):
    from fairseq_alibi.models.build import load_checkpoint

    variant, gpt2, encode, _, imported = negative_gpt2
    model, _, task = load_checkpoint(str(imported / "checkpoint.pt"), str(imported))
    index = fairseq_index(variant, gpt2)
    ids = [gpt2.config.eos_token_id, *encode(wikitext_lines()[3])][:64]
    with torch.no_grad():
        got = model.get_normalized_probs(model(index[torch.tensor([ids])]), log_probs=True)[0]
    expected = hf_log_probs(gpt2, ids)
    torch.testing.assert_close(got[:, index], expected, rtol=1e-5, atol=1e-5)
    others = torch.ones(got.size(-1), dtype=torch.bool)
    others[index] = False
    assert others.sum() == (0 if variant.startswith("word_level") else 4)  # <s>, <pad>, <unk>, <|endoftext|>'s own
    assert (got[:, others] == float("-inf")).all()
    torch.testing.assert_close(got[:, index].exp().sum(-1), torch.ones(len(ids)))


def test_the_hub_interface_scores_text_as_the_gpt2(negative_gpt2):
    from fairseq.models.transformer_lm import TransformerLanguageModel

    from fairseq_alibi import plugin  # noqa: F401  (gpt2_transformer_lm)

    variant, gpt2, encode, _, imported = negative_gpt2
    if variant.startswith("word_level"):
        pytest.skip("the hub encodes raw text with a BPE only")
    hub = TransformerLanguageModel.from_pretrained(str(imported), "checkpoint.pt").eval()
    line = wikitext_lines()[5].strip()
    eos = gpt2.config.eos_token_id
    ids = encode(line)
    assert hub.encode(line).tolist() == [*(fairseq_index(variant, gpt2)[ids].tolist()), hub.task.source_dictionary.eos()]
    scored = hub.score(line)["positional_scores"]
    # the hub scores the line's tokens, each after </s> (GPT-2's end of text) and the tokens before it
    expected = hf_log_probs(gpt2, [eos, *ids])[torch.arange(len(ids)), torch.tensor(ids)]
    torch.testing.assert_close(scored, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_fairseq_eval_lm_gives_the_gpt2s_perplexity(negative_gpt2, tmp_path):
    """The text binarized with the import's dict.txt, scored nonoverlapping at 32 tokens: fairseq-eval-lm's
    perplexity is HF's on the same blocks (each block's first input the token before it, </s> at the start)."""
    variant, gpt2, encode, _, imported = negative_gpt2
    lines = [line for line in wikitext_lines()[:60] if line.strip()]
    eos = gpt2.config.eos_token_id
    to_fairseq = fairseq_index(variant, gpt2)
    symbols = ["<s>", "<pad>", "</s>", "<unk>", *open(imported / "dict.txt").read().split()[::2]]
    text = [" ".join(symbols[to_fairseq[i]] for i in encode(line)) for line in lines]
    (tmp_path / "valid.txt").write_text("\n".join(text) + "\n")
    run(["fairseq-preprocess", "--only-source", "--srcdict", str(imported / "dict.txt"), "--validpref",
         str(tmp_path / "valid.txt"), "--destdir", str(tmp_path / "bin"), "--workers", "1"])
    printed = run(["fairseq-alibi-eval-lm", str(tmp_path / "bin"), "--path", str(imported / "checkpoint.pt"),
                   "--gen-subset", "valid", "--tokens-per-sample", "32", "--max-tokens", "4096"])
    fairseq_loss = float(re.search(r"Loss \(base 2\): ([0-9.]+)", printed).group(1))
    stream = [t for line in lines for t in (*encode(line), eos)]
    total, previous = 0.0, eos
    for start in range(0, len(stream), 32):
        block = stream[start:start + 32]
        inputs = [previous, *block[:-1]]
        total += hf_log_probs(gpt2, inputs)[torch.arange(len(block)), torch.tensor(block)].sum().item()
        previous = block[-1]
    hf_loss = -total / len(stream) / math.log(2)
    assert fairseq_loss == pytest.approx(hf_loss, abs=1e-4)  # fairseq prints 4 decimals
    assert 2 ** hf_loss < 2 * gpt2.config.vocab_size  # a random GPT-2's perplexity, not the specials' millions


def test_import_then_export_gives_the_gpt2s_log_probabilities(negative_gpt2, tmp_path):
    from transformers import AutoModelForCausalLM

    from fairseq_alibi.hf.export import export

    variant, gpt2, encode, _, imported = negative_gpt2
    export(str(imported / "checkpoint.pt"), str(tmp_path / "back"))
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "back", trust_remote_code=True).eval()
    index = fairseq_index(variant, gpt2)
    ids = [gpt2.config.eos_token_id, *encode(wikitext_lines()[7])][:64]
    with torch.no_grad():
        got = back(index[torch.tensor([ids])]).logits[0].log_softmax(-1)
    torch.testing.assert_close(got[:, index], hf_log_probs(gpt2, ids), rtol=1e-4, atol=1e-4)
    assert torch.isclose(got[:, index].exp().sum(-1), torch.ones(len(ids))).all()


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_the_alibi_conversion_keeps_the_masked_symbols(negative_gpt2, tmp_path):
    from fairseq_alibi.models.build import load_checkpoint

    variant, gpt2, _, _, imported = negative_gpt2
    proc = subprocess.run([sys.executable, "-m", "fairseq_alibi.commands.convert_checkpoint", "--replace-positions",
                           str(imported / "checkpoint.pt"), str(tmp_path / "alibi.pt")], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    model, _, _ = load_checkpoint(str(tmp_path / "alibi.pt"), str(imported))
    index = fairseq_index(variant, gpt2)
    with torch.no_grad():
        # past the GPT-2's 64 positions
        log_probs = model.get_normalized_probs(model(index[torch.randint(0, gpt2.config.vocab_size, (1, 200))]),
                                               log_probs=True)[0]
    torch.testing.assert_close(log_probs[:, index].exp().sum(-1), torch.ones(200))
    assert model.decoder.positions.method == "alibi" and model.decoder.embed_positions is None


def test_masked_output_symbols_are_checked_at_build():
    from conftest import build_model

    with pytest.raises(SystemExit, match="not an index of the 54-symbol dictionary"):
        build_model("alibi_transformer_lm", extra=["--masked-output-symbols", "0,99"])
    with pytest.raises(SystemExit, match="comma-separated dictionary indices"):
        build_model("alibi_transformer_lm", extra=["--masked-output-symbols", "unk"])
    with pytest.raises(SystemExit, match="one output matrix"):
        build_model("alibi_transformer_lm", extra=["--masked-output-symbols", "0", "--adaptive-softmax-cutoff", "20,40"])


def test_distillation_from_a_teacher_that_never_predicts_a_word_is_finite():
    from fairseq_alibi.distillation import distillation_terms

    teacher = torch.randn(3, 7).log_softmax(-1)
    teacher[:, 0] = float("-inf")
    student = torch.randn(3, 7, requires_grad=True)
    masked_student = student.masked_fill(torch.arange(7) == 0, float("-inf")).log_softmax(-1)
    terms = distillation_terms(masked_student, teacher, torch.ones(3, dtype=torch.bool), 2.0)
    terms.sum().backward()
    assert torch.isfinite(terms).all() and torch.isfinite(student.grad).all()
    expected = (teacher[:, 1:] / 2).log_softmax(-1)
    naive = (expected.exp() * (expected - (masked_student[:, 1:] / 2).log_softmax(-1))).sum(-1) * 4
    torch.testing.assert_close(terms, naive)


def test_a_fine_tune_that_would_drop_the_masked_symbols_is_refused_in_one_line(negative_gpt2, tmp_path):
    """fairseq's --finetune-from-model loads the start's weights only: the new model's options are the
    command line's, so a fine-tune of an imported GPT-2 without its --masked-output-symbols would put
    mass on fairseq's specials again."""
    from fairseq_alibi.commands.mistakes import common_mistake

    variant, _, _, _, imported = negative_gpt2
    start = str(imported / "checkpoint.pt")
    if variant.startswith("word_level"):  # nothing masked: nothing to carry, and the flag is refused
        assert common_mistake("train", ["--finetune-from-model", start], None) is None
        assert "predicts every symbol" in common_mistake(
            "train", ["--finetune-from-model", start, "--masked-output-symbols", "0"], None)
        return
    refused = common_mistake("train", ["--arch", "transformer_lm", "--finetune-from-model", start], None)
    assert "--masked-output-symbols 0,1,3,4" in refused and len(refused.splitlines()) == 1
    assert common_mistake("train", ["--finetune-from-model", start, "--masked-output-symbols", "0,1,3,4"], None) is None


def test_the_lm_eval_backend_stays_within_learned_positions_and_refuses_a_nan_score(negative_gpt2):
    """lm-eval's backend on an imported GPT-2 (learned positions end at 64): HFLM's default max_length
    (2048) once ran past the table (IndexError); a diverged checkpoint's NaN perplexity came out with rc 0."""
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance

    from fairseq_alibi.hf.lm_eval_backend import FairseqCheckpointLM

    variant, gpt2, _, _, imported = negative_gpt2
    if variant != "bpe_tied":
        pytest.skip("one import is enough for the backend")
    checkpoint, data = str(imported / "checkpoint.pt"), str(imported)
    lm = FairseqCheckpointLM(checkpoint=checkpoint, data=data, batch_size=1, device="cpu")
    assert lm.max_length == 64
    text = " ".join(line.strip() for line in wikitext_lines()[:20])  # several windows of 64
    request = Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)
    assert math.isfinite(lm.loglikelihood_rolling([request], disable_tqdm=True)[0])
    with pytest.raises(SystemExit, match="learned 64 positions, max_length 100 is past them: give max_length=64"):
        FairseqCheckpointLM(checkpoint=checkpoint, data=data, max_length=100, batch_size=1, device="cpu")
    with torch.no_grad():
        lm.model.output_layer.weight[10].fill_(float("nan"))
    with pytest.raises(SystemExit, match="rolling log-likelihood came out nan"):
        lm.loglikelihood_rolling([request], disable_tqdm=True)


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_the_export_refuses_another_models_tokenizer_in_one_line(negative_gpt2, tmp_path):
    """An imported GPT-2 exported with --tokenizer of another GPT-2 once wrote a folder whose tokenizer mapped
    every text to the wrong ids (or raised, where its ids ran past the other vocabulary)."""
    from tokenizers import ByteLevelBPETokenizer

    from conftest import snapshot

    variant, _, _, _, imported = negative_gpt2
    if variant != "bpe_tied":
        pytest.skip("one import is enough for the export's tokenizer")
    other = ByteLevelBPETokenizer()
    other.train_from_iterator(["another corpus, another tokenizer " * 50], vocab_size=280, min_frequency=1,
                              special_tokens=["<|endoftext|>"])
    (tmp_path / "other").mkdir()
    other.save_model(str(tmp_path / "other"))
    bare = tmp_path / "bare"  # the checkpoint and its dictionary without the BPE files kept beside them
    bare.mkdir()
    for name in ("checkpoint.pt", "dict.txt"):
        (bare / name).write_bytes((imported / name).read_bytes())
    before = snapshot(tmp_path)
    for checkpoint, message in ((imported / "checkpoint.pt", "are not the ones kept beside its dict.txt"),
                                (bare / "checkpoint.pt", "lists BPE id 299, which the")):
        proc = subprocess.run(["fairseq-alibi-export-hf", str(checkpoint), str(tmp_path / "out"), "--tokenizer",
                               str(tmp_path / "other")], capture_output=True, text=True, cwd=REPO)
        assert proc.returncode != 0 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert snapshot(tmp_path) == before


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_a_gpt2_imported_before_the_masking_is_refused_in_one_line(negative_gpt2, tmp_path):
    """A checkpoint the import wrote before this change (stock transformer_lm, nothing masked) would be
    scored silently wrong by every tool: refused, naming the fix. A GPT-2 that kept fairseq's ids is not."""
    from fairseq_alibi.models.build import load_checkpoint

    variant, _, _, _, imported = negative_gpt2
    state = torch.load(imported / "checkpoint.pt", weights_only=False)
    state["cfg"]["model"]["_name"] = "transformer_lm"
    state["cfg"]["model"].pop("masked_output_symbols", None)
    torch.save(state, tmp_path / "old.pt")
    if variant.startswith("word_level"):
        load_checkpoint(str(tmp_path / "old.pt"), str(imported), kind="causal LM")
        return
    with pytest.raises(SystemExit, match=r"^error: .*old.pt is a GPT-2 imported before fairseq's <s>, <pad> and <unk> "
                                         "were masked: .*import the GPT-2 again"):
        load_checkpoint(str(tmp_path / "old.pt"), str(imported), kind="causal LM")
    proc = subprocess.run(["fairseq-alibi-eval-lm", str(imported), "--path", str(tmp_path / "old.pt")],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode != 0 and "imported before fairseq's <s>" in proc.stderr.strip().splitlines()[-1]
