"""Hugging Face export: the exported folder, loaded by transformers alone, computes what fairseq
computes (log-probabilities at L and 8L, padded batches, greedy generation with the cache), its
tokenizer gives fairseq's ids, and bad input is refused in one line with nothing written."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, TINY, build_model, find_wikitext2, random_tokens, run, snapshot
from test_position_methods import METHODS, perturb

pytest.importorskip("transformers")

from fairseq_alibi.hf.export import (bloom_layout_problem, bloom_model_of, hf_model_of, refuse_unsupported,  # noqa: E402
                                     write_folder)
from fairseq_alibi.hf.tokenizer import word_level_tokenizer  # noqa: E402

SMALL_TINY = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-input-dim", "32",
              "--decoder-output-dim", "32", "--decoder-ffn-embed-dim", "64", "--adaptive-input-cutoff", "20,40",
              "--adaptive-softmax-cutoff", "20,40"]
# Layouts beyond the method: fairseq's own position embeddings (the sinusoidal and learned twins),
# the _small presets' adaptive input and softmax (tied and not), post-norm, fairseq's other activations.
LAYOUTS = {
    "sinusoidal": ("transformer_lm", TINY),
    "learned": ("transformer_lm", [*TINY, "--decoder-learned-pos"]),
    "postnorm_gelu_accurate": ("alibi_transformer_lm", ["--decoder-layers", "2", "--decoder-embed-dim", "32",
                                                        "--decoder-ffn-embed-dim", "64", "--activation-fn", "gelu_accurate"]),
    "alibi_small_adaptive": ("alibi_transformer_lm_small", SMALL_TINY),
    "rotary_adaptive_untied_proj_gelu": ("rotary_transformer_lm", [
        *SMALL_TINY, "--activation-fn", "gelu", "--adaptive-input", "--tie-adaptive-weights",
        "--adaptive-softmax-factor", "2", "--adaptive-input-factor", "2"]),
    "sinusoidal_small_adaptive": ("transformer_lm", [*SMALL_TINY, "--decoder-normalize-before", "--adaptive-input",
                                                     "--tie-adaptive-weights", "--tie-adaptive-proj", "--no-scale-embedding"]),
    "nope_untied_adaptive_softmax": ("nope_transformer_lm", [*TINY[:-1], "--adaptive-softmax-cutoff", "20,40"]),
    # The attention options the export carries (attention_options/): the gate and the sink logit, stick-breaking.
    "alibi_gate_sink": ("alibi_transformer_lm", [*TINY, "--output-gate", "elementwise", "--sink-logit"]),
    # A length temperature (length_temperature.py): SSMax's learned one on the whole logit, LogN's on q.k.
    "alibi_ssmax_logit": ("alibi_transformer_lm", [*TINY, "--length-temperature", "ssmax", "--length-temperature-form",
                                                   "logit", "--length-temperature-length", "8"]),
    "rotary_logn": ("rotary_transformer_lm", [*TINY, "--length-temperature", "logn", "--length-temperature-length", "8"]),
    "rotary_headwise_gate": ("rotary_transformer_lm", [*TINY, "--output-gate", "headwise"]),
    "nope_stick_breaking": ("nope_transformer_lm", [*TINY, "--stick-breaking"]),
    # The preset in BLOOM's layout, exported to stock BLOOM (6 heads: BLOOM's slopes for a head
    # count that is not a power of 2 must be the paper's too).
    "bloom": ("alibi_transformer_lm_bloom_small", ["--decoder-layers", "2", "--decoder-embed-dim", "36",
                                                   "--decoder-attention-heads", "6"]),
}
KINDS = [*METHODS, *LAYOUTS]


def fairseq_model(kind, seed=0):
    torch.manual_seed(seed)
    if kind in LAYOUTS:
        arch, flags = LAYOUTS[kind]
        m, d = build_model(arch, extra=flags)
        if arch != "transformer_lm":
            perturb(m)
        with torch.no_grad():  # sinks, gates and learned temperatures away from their start, as trained ones are
            for name, p in m.named_parameters():
                if ".options." in name or "log_scale" in name:
                    p.add_(0.5 * torch.randn_like(p))
        return m, d
    arch = kind.split("_")[0] if kind.startswith("kerple") else kind
    m, d = build_model(f"{arch}_transformer_lm", extra=[*TINY, *METHODS[kind]])
    return perturb(m), d


def fairseq_log_probs(model, tokens):
    with torch.no_grad():
        return model.get_normalized_probs(model(tokens), log_probs=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """kind -> (fairseq model, dictionary, the folder loaded back by transformers)."""
    from transformers import AutoModelForCausalLM

    cache = {}

    def get(kind):
        if kind not in cache:
            model, dictionary = fairseq_model(kind)
            out = tmp_path_factory.mktemp("hf") / kind
            hf = hf_model_of(model, dictionary, {"source": kind})
            assert (bloom_layout_problem(hf.config) is None) == (kind == "bloom"), bloom_layout_problem(hf.config)
            write_folder(bloom_model_of(hf) if kind == "bloom" else hf, word_level_tokenizer(dictionary), str(out))
            cache[kind] = model, dictionary, AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval(), out
        return cache[kind]
    return get


@pytest.mark.parametrize("kind", KINDS)
def test_exported_logits_are_fairseqs_log_probabilities_at_L_and_8L(kind, exported):
    model, dictionary, hf, _ = exported(kind)
    for length in (16, 128):
        tokens = random_tokens(len(dictionary), 2, length, seed=length)
        with torch.no_grad():
            logits = hf(tokens).logits
        torch.testing.assert_close(logits.log_softmax(-1), fairseq_log_probs(model, tokens), rtol=1e-5, atol=2e-5)
    if model.decoder.adaptive_softmax is not None:  # the adaptive softmax's log-probabilities are the logits
        torch.testing.assert_close(logits, fairseq_log_probs(model, tokens), rtol=1e-5, atol=2e-5)


def test_the_parity_check_sees_a_wrong_bias(exported):
    """The comparison above is not vacuous: the same weights without ALiBi's bias differ."""
    model, dictionary, hf, _ = exported("alibi")
    tokens = random_tokens(len(dictionary), 1, 32)
    with torch.no_grad():
        hf.decoder.positions.slopes.mul_(0.5)
        changed = hf(tokens).logits.log_softmax(-1)
        hf.decoder.positions.slopes.mul_(2)
    assert (changed - fairseq_log_probs(model, tokens)).abs().max() > 1e-3


@pytest.mark.parametrize("kind", ["alibi", "rotary", "t5_bias", "fire", "fox", "sinusoidal", "learned", "alibi_small_adaptive",
                                  "bloom", "alibi_gate_sink", "nope_stick_breaking"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_a_padded_batch_gives_each_row_what_the_row_alone_gives(kind, side, exported):
    model, dictionary, hf, _ = exported(kind)
    lengths = [20, 13, 7]
    rows = [random_tokens(len(dictionary), 1, n, seed=n)[0] for n in lengths]
    batch = torch.full((3, 20), dictionary.pad())
    mask = torch.zeros(3, 20, dtype=torch.long)
    for i, row in enumerate(rows):
        where = slice(20 - len(row), 20) if side == "left" else slice(0, len(row))
        batch[i, where], mask[i, where] = row, 1
    with torch.no_grad():
        logits = hf(batch, attention_mask=mask).logits.log_softmax(-1)
    for i, row in enumerate(rows):
        where = slice(20 - len(row), 20) if side == "left" else slice(0, len(row))
        torch.testing.assert_close(logits[i, where], fairseq_log_probs(model, row[None])[0], rtol=1e-5, atol=2e-5)


def test_fox_exported_gives_the_same_logits_with_its_bias_in_blocks_of_rows(exported, monkeypatch):
    """Long inputs make FoX's bias in blocks of rows (positions/fox.py), past each block's diagonal
    -inf: the Hugging Face form gives the very logits of one piece, padded rows and cache included."""
    _, dictionary, hf, _ = exported("fox")
    gates = {type(m) for m in hf.modules() if hasattr(m, "CHUNK_PAIRS")}  # the folder's own copy of the code
    assert len(gates) == 1
    ForgetGate = gates.pop()
    tokens = random_tokens(len(dictionary), 2, 30)
    mask = torch.ones_like(tokens)
    mask[1, :4] = 0
    with torch.no_grad():
        whole = hf(tokens, attention_mask=mask).logits
        first = hf(tokens[:, :12], attention_mask=mask[:, :12], use_cache=True)
        rest = hf(tokens[:, 12:], attention_mask=mask, past_key_values=first.past_key_values).logits
        monkeypatch.setattr(ForgetGate, "CHUNK_PAIRS", 30 * 7)  # blocks of 7 rows
        assert torch.equal(hf(tokens, attention_mask=mask).logits, whole)
        first_blocks = hf(tokens[:, :12], attention_mask=mask[:, :12], use_cache=True)
        assert torch.equal(first_blocks.logits, first.logits)
        assert torch.equal(hf(tokens[:, 12:], attention_mask=mask, past_key_values=first_blocks.past_key_values).logits,
                           rest)


def greedy_without_cache(model, prompt, steps):
    """The reference: argmax of fairseq's full forward over everything so far, step by step."""
    tokens = prompt
    for _ in range(steps):
        following = fairseq_log_probs(model, tokens)[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, following], dim=1)
    return tokens


@pytest.mark.parametrize("kind", ["alibi", "rotary", "kerple_log", "fire", "fox", "sinusoidal", "learned",
                                  "alibi_small_adaptive", "bloom", "alibi_gate_sink", "nope_stick_breaking"])
def test_greedy_generation_with_the_cache_gives_fairseqs_tokens(kind, exported):
    model, dictionary, hf, _ = exported(kind)
    prompt = torch.cat([torch.full((2, 1), dictionary.eos()), random_tokens(len(dictionary), 2, 5)], dim=1)
    with torch.no_grad():
        generated = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False,
                                min_new_tokens=24)
    torch.testing.assert_close(generated, greedy_without_cache(model, prompt, 24))


@pytest.mark.parametrize("kind", ["alibi", "fox", "rotary"])
def test_beam_search_reorders_the_cache_as_the_full_forward_would(kind, exported):
    """Beam search reorders the cache between steps (FoX's gate state rides in it as key channels):
    the same search without a cache, every step a full forward, finds the same beams."""
    _, dictionary, hf, _ = exported(kind)
    prompt = random_tokens(len(dictionary), 2, 6)
    options = dict(max_new_tokens=12, min_new_tokens=12, num_beams=3, num_return_sequences=3, do_sample=False)
    with torch.no_grad():
        cached = hf.generate(prompt, attention_mask=torch.ones_like(prompt), **options)
        uncached = hf.generate(prompt, attention_mask=torch.ones_like(prompt), use_cache=False, **options)
    torch.testing.assert_close(cached, uncached)


def test_the_tokenizer_gives_fairseqs_ids_for_raw_wikitext(tmp_path):
    from fairseq.data import Dictionary
    from transformers import AutoTokenizer

    from fairseq_alibi.hf.tokenizer import word_level_tokenizer

    with open(os.path.join(find_wikitext2(), "wiki.valid.tokens"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(300)]
    dictionary = Dictionary()
    for line in lines[:150]:  # the rest has words the dictionary lacks: <unk>
        for word in line.split():
            dictionary.add_symbol(word)
    word_level_tokenizer(dictionary).save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    expected = torch.cat([dictionary.encode_line(line, add_if_not_exist=False) for line in lines]).tolist()
    assert dictionary.unk() in expected
    assert tokenizer("".join(lines), add_special_tokens=False)["input_ids"] == expected
    assert tokenizer.eos_token_id == dictionary.eos() and tokenizer.pad_token_id == dictionary.pad()


def test_the_folder_loads_without_fairseq_or_this_package(exported):
    """A machine with torch and transformers only: both packages made unimportable in a fresh process."""
    model, dictionary, _, out = exported("kerple_log")
    tokens = random_tokens(len(dictionary), 1, 12)
    script = f"""
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('fairseq', 'fairseq_alibi', 'fairseq_cli'):
            raise ImportError('no ' + name + ' on this machine')
sys.meta_path.insert(0, Refuse())
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
model = AutoModelForCausalLM.from_pretrained({str(out)!r}, trust_remote_code=True).eval()
AutoTokenizer.from_pretrained({str(out)!r})  # without trust_remote_code: it asks (stdin is closed), then loads
with torch.no_grad():
    print("LOGITS", model(torch.tensor({tokens.tolist()!r})).logits.log_softmax(-1).tolist())
    cache = model.sink_cache(4, 20)  # the bundled file streams too: nothing evicted here, so the same
    print("STREAMED", model(torch.tensor({tokens.tolist()!r}), cache=cache).logits.log_softmax(-1).tolist())
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd="/", stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = torch.tensor(json.loads(proc.stdout.rpartition("LOGITS ")[2].partition("\n")[0]))
    torch.testing.assert_close(got, fairseq_log_probs(model, tokens), rtol=1e-5, atol=2e-5)
    streamed = torch.tensor(json.loads(proc.stdout.rpartition("STREAMED ")[2]))
    torch.testing.assert_close(streamed, got, rtol=1e-5, atol=2e-5)


def test_the_bloom_preset_exports_to_stock_bloom_without_code_of_ours(exported):
    _, _, hf, out = exported("bloom")
    assert type(hf).__name__ == "BloomForCausalLM" and json.load(open(out / "config.json"))["model_type"] == "bloom"
    assert not (out / "modeling_fairseq_alibi.py").exists()
    # BLOOM's exact layout: one matrix, tied, no embedding scale (what engines that always tie it compute)
    from safetensors import safe_open

    assert json.load(open(out / "config.json"))["tie_word_embeddings"] is True
    assert hf.lm_head.weight.data_ptr() == hf.transformer.word_embeddings.weight.data_ptr()
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys()


def test_a_scaled_model_in_blooms_layout_exports_untied_as_before(tmp_path):
    """A bloom_small checkpoint from before the preset dropped its embedding scale: stock BLOOM with
    the scale folded into untied input embeddings, fairseq's log-probabilities still."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model, dictionary = build_model("alibi_transformer_lm_bloom_small", extra=[
        "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-attention-heads", "4"])
    model.decoder.embed_scale = 32 ** 0.5  # the preset as it was (the config of such a checkpoint says so)
    perturb(model)
    hf = hf_model_of(model, dictionary, {"source": "old"})
    assert bloom_layout_problem(hf.config) is None
    write_folder(bloom_model_of(hf), word_level_tokenizer(dictionary), str(tmp_path / "old"))
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "old").eval()
    assert json.load(open(tmp_path / "old" / "config.json"))["tie_word_embeddings"] is False
    tokens = random_tokens(len(dictionary), 1, 40)
    with torch.no_grad():
        torch.testing.assert_close(back(tokens).logits.log_softmax(-1), fairseq_log_probs(model, tokens), rtol=1e-5, atol=2e-5)


def test_the_config_says_where_the_model_came_from(exported):
    _, _, hf, out = exported("alibi")
    config = json.load(open(out / "config.json"))
    assert config["positions"] == "alibi" and config["fairseq_alibi"] == {"source": "alibi"}
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_fairseq_alibi.FairseqAlibiForCausalLM"
    from transformers.dynamic_module_utils import get_imports

    assert set(get_imports(out / "modeling_fairseq_alibi.py")) <= {"dataclasses", "math", "torch", "transformers", "typing"}


@pytest.mark.slow
def test_export_cli_on_a_trained_checkpoint(toy_checkpoint, wt2_slice, tmp_path):
    """fairseq-alibi-export-hf on scripts/train.sh's checkpoint: the folder's logits on WikiText-2 text
    are the checkpoint's log-probabilities, and its provenance names the training length."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fairseq_alibi.models.build import load_checkpoint

    out = tmp_path / "exported"
    proc = subprocess.run(["fairseq-alibi-export-hf", toy_checkpoint, str(out)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.load(open(out / "config.json"))
    assert config["fairseq_alibi"]["train_length"] == 32 and config["fairseq_alibi"]["updates"] == 30
    model, _, task = load_checkpoint(toy_checkpoint, wt2_slice)
    hf = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with open(os.path.join(find_wikitext2(), "wiki.valid.tokens"), encoding="utf-8") as f:
        text = "".join(next(f) for _ in range(12))
    ids = torch.tensor([[task.source_dictionary.eos()] + tokenizer(text)["input_ids"][:255]])
    assert ids.size(1) == 256  # 8x the training length
    expected = torch.cat([task.source_dictionary.encode_line(line, add_if_not_exist=False) for line in text.splitlines(True)])
    assert ids[0, 1:].tolist() == expected[:255].tolist()
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, fairseq_log_probs(model, ids), rtol=1e-5, atol=2e-5)


@pytest.mark.slow
def test_bad_input_is_one_line_and_writes_nothing(toy_checkpoint, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me")
    masked = tmp_path / "masked.pt"
    torch.save({"cfg": {"model": {"_name": "roberta"}, "task": {"_name": "masked_lm"}}, "model": {}}, masked)
    other_dictionary = tmp_path / "other"
    other_dictionary.mkdir()
    (other_dictionary / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(10)))
    not_a_checkpoint = tmp_path / "notes.pt"
    not_a_checkpoint.write_text("hello")
    cases = [
        ([toy_checkpoint, str(full)], "not an empty directory"),
        ([str(masked), str(tmp_path / "a"), "--data", os.path.dirname(toy_checkpoint)], "masked LM"),
        ([toy_checkpoint, str(tmp_path / "b"), "--data", str(other_dictionary)], "another dictionary"),
        ([str(not_a_checkpoint), str(tmp_path / "c"), "--data", os.path.dirname(toy_checkpoint)], "not be loaded"),
        ([str(tmp_path / "missing.pt"), str(tmp_path / "d")], "no checkpoint"),
        ([toy_checkpoint, str(tmp_path / "e"), "--data", str(tmp_path)], "no dict.txt"),
    ]
    before = snapshot(tmp_path)
    for argv, message in cases:
        proc = subprocess.run(["fairseq-alibi-export-hf", *argv], capture_output=True, text=True, cwd=REPO)
        assert proc.returncode != 0 and message in proc.stderr, (argv, proc.stderr[-1500:])
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert snapshot(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == sorted(["full", "masked.pt", "other", "notes.pt"])


@pytest.mark.parametrize("model", ["alibi_gate_sink", "alibi_ssmax_logit"])
def test_the_attention_options_stream_through_a_sink_cache_as_the_full_forward(exported, model):
    """The stream path takes the options too (a sink logit and gate; a learned temperature, whose n is a query's
    slot + 1 in the stream and its position + 1 in the full forward): with nothing evicted (a cache longer than
    the text) the streamed log-probabilities are the full forward's, chunk by chunk."""
    _, dictionary, hf, _ = exported(model)
    tokens = random_tokens(len(dictionary), 1, 30, seed=3)
    with torch.no_grad():
        cache, streamed, start = hf.sink_cache(2, 40), [], 0
        for size in (7, 1, 22):
            streamed.append(hf(tokens[:, start:start + size], cache=cache).logits.log_softmax(-1))
            start += size
        torch.testing.assert_close(torch.cat(streamed, dim=1), hf(tokens).logits.log_softmax(-1), rtol=1e-5, atol=2e-5)


def test_export_refuses_selective_attention_in_one_line():
    model, _ = build_model("alibi_transformer_lm", extra=[*TINY, "--selective-attention"])
    with pytest.raises(SystemExit, match="--selective-attention, whose accumulation per key") as error:
        refuse_unsupported(model.decoder, "x.pt")
    assert "\n" not in str(error.value)


def test_export_refuses_packed_documents_in_one_line():
    model, dictionary = build_model("alibi_transformer_lm", extra=TINY)
    model.decoder.document_separator = 5
    with pytest.raises(SystemExit, match="packed documents"):
        refuse_unsupported(model.decoder, "x.pt")


# ---- GPT-2 in: fairseq-alibi-import-hf ----

@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    """A random GPT2LMHeadModel (2 layers, d 32, 64 positions) with a byte-level BPE of 300 tokens
    trained on WikiText-2's first lines, saved as save_pretrained saves them."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    with open(os.path.join(find_wikitext2(), "wiki.valid.tokens"), encoding="utf-8") as f:
        text = "".join(next(f) for _ in range(400))
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator([text], vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                        bos_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id)
    model = GPT2LMHeadModel(config).eval()
    out = tmp_path_factory.mktemp("gpt2") / "hf"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return model, tokenizer, out, text


@pytest.fixture(scope="module")
def imported(tiny_gpt2, tmp_path_factory):
    from fairseq_alibi.hf.import_gpt2 import import_gpt2

    out = tmp_path_factory.mktemp("imported") / "fairseq"
    import_gpt2(str(tiny_gpt2[2]), str(out))
    return out


def test_import_refuses_what_is_not_a_gpt2_in_one_line_and_writes_nothing(tiny_gpt2, tmp_path):
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert"}))
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep me")
    cases = [([str(tmp_path / "nothing"), str(tmp_path / "a")], "no config.json"),
             ([str(bert), str(tmp_path / "b")], "not GPT-2"),
             ([str(tiny_gpt2[2]), str(full)], "not an empty directory")]
    before = snapshot(tmp_path)
    for argv, message in cases:
        proc = subprocess.run(["fairseq-alibi-import-hf", *argv], capture_output=True, text=True, cwd=REPO)
        assert proc.returncode != 0 and message in proc.stderr, (argv, proc.stderr[-1500:])
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert snapshot(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["bert", "full"]


@pytest.mark.slow
def test_lm_eval_on_an_exported_model_and_on_the_checkpoint_gives_fairseq_eval_lms_perplexity(toy_checkpoint, wt2_slice,
                                                                                               tmp_path):
    """The shipped task file (examples/wikitext2/lm_eval), pointed at the WikiText-2 slice: lm-eval's
    token perplexity at max_length=L is fairseq-eval-lm's nonoverlapping perplexity at L (up to the last window,
    which lm-eval feeds L tokens: on the slice, 1 token past the last block)."""
    import re

    pytest.importorskip("lm_eval")
    subprocess.run(["fairseq-alibi-export-hf", toy_checkpoint, str(tmp_path / "model")], check=True, capture_output=True)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    source = os.path.join(REPO, "examples", "wikitext2", "lm_eval")
    valid = os.path.join(os.path.dirname(wt2_slice), "valid.tokens")
    task = open(os.path.join(source, "wikitext2_fairseq.yaml")).read()
    assert "../shared/data/wikitext-2/wiki.valid.tokens" in task
    (tasks / "wikitext2_fairseq.yaml").write_text(task.replace("../shared/data/wikitext-2/wiki.valid.tokens", valid))
    (tasks / "metrics.py").write_text(open(os.path.join(source, "metrics.py")).read())
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    lm_eval = subprocess.run(
        ["lm_eval", "--model", "hf", "--model_args", f"pretrained={tmp_path / 'model'},trust_remote_code=True,max_length=32",
         "--tasks", "wikitext2_fairseq", "--include_path", str(tasks), "--batch_size", "16", "--device", "cpu",
         "--output_path", str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert lm_eval.returncode == 0, lm_eval.stderr[-3000:]
    results = json.load(open(next((tmp_path / "out").rglob("results_*.json"))))["results"]["wikitext2_fairseq"]
    fairseq = run(["fairseq-alibi-eval-lm", wt2_slice, "--path", toy_checkpoint, "--tokens-per-sample", "32",
                   "--gen-subset", "valid", "--max-tokens", "4096"])
    loss = float(re.search(r"Loss \(base 2\): ([0-9.]+)", fairseq).group(1))
    # fairseq prints 4 decimals of the loss (3.5e-5 of the perplexity); the last window's context
    # differs (above), over the slice's 5.4k validation tokens: 9.7e-5 measured
    assert results["token_perplexity,none"] == pytest.approx(2 ** loss, rel=4e-4)
    assert results["word_perplexity,none"] > results["token_perplexity,none"]

    # lm-eval's backend for checkpoints (fairseq-alibi-lm-eval --model fairseq_alibi): the checkpoint
    # itself, no export, gives the export's numbers
    backend = subprocess.run(
        [sys.executable, "-m", "fairseq_alibi.hf.lm_eval_backend", "--model", "fairseq_alibi", "--model_args",
         f"checkpoint={toy_checkpoint},max_length=32", "--tasks", "wikitext2_fairseq", "--include_path", str(tasks),
         "--batch_size", "16", "--device", "cpu", "--output_path", str(tmp_path / "backend")],
        capture_output=True, text=True, cwd=tmp_path, env=dict(env, PYTHONPATH=REPO))
    assert backend.returncode == 0, backend.stderr[-3000:]
    direct = json.load(open(next((tmp_path / "backend").rglob("results_*.json"))))["results"]["wikitext2_fairseq"]
    for metric in ("token_perplexity,none", "word_perplexity,none"):
        assert direct[metric] == pytest.approx(results[metric], rel=1e-6), metric


def test_a_gpt2_on_a_fairseq_dictionary_keeps_its_ids(tmp_path):
    """A GPT-2 whose tokenizer is a fairseq dictionary (hf/tokenizer.py's, as gpt2_standin.py trains
    it) imports with its ids kept: fairseq's logits on the dictionary's own ids are GPT-2's."""
    from fairseq.data import Dictionary
    from fairseq.models.transformer_lm import TransformerLanguageModel
    from transformers import GPT2Config, GPT2LMHeadModel

    from fairseq_alibi.hf.import_gpt2 import import_gpt2
    from fairseq_alibi.hf.tokenizer import word_level_tokenizer

    dictionary = Dictionary()
    for i in range(40):
        dictionary.add_symbol(f"w{i}")
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(dictionary), n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                      eos_token_id=2, bos_token_id=2, pad_token_id=1)).eval()
    gpt2.save_pretrained(tmp_path / "hf")
    word_level_tokenizer(dictionary).save_pretrained(tmp_path / "hf")
    import_gpt2(str(tmp_path / "hf"), str(tmp_path / "fairseq"))
    assert (tmp_path / "fairseq" / "dict.txt").read_text().split()[::2] == dictionary.symbols[4:]
    from fairseq_alibi.tools import dictionaries  # the import records its dictionary inside the checkpoint
    assert torch.load(tmp_path / "fairseq" / "checkpoint.pt", weights_only=False)["dictionary_sha256"] == \
        dictionaries.dictionary_fingerprint(str(tmp_path / "fairseq"))
    hub = TransformerLanguageModel.from_pretrained(str(tmp_path / "fairseq"), "checkpoint.pt").eval()
    tokens = torch.cat([torch.tensor([[2]]), random_tokens(len(dictionary), 1, 31)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(hub.models[0](tokens)[0], gpt2(tokens).logits, rtol=1e-5, atol=1e-5)
    assert hub.encode("w3 w7").tolist() == [dictionary.index("w3"), dictionary.index("w7"), 2]


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_the_lm_eval_backends_help_says_what_it_takes():
    """fairseq-alibi-lm-eval --help once showed lm-eval's help alone (nothing of checkpoint=, data=)."""
    lm_eval = subprocess.run(["fairseq-alibi-lm-eval", "--help"], capture_output=True, text=True, cwd=REPO)
    assert lm_eval.returncode == 0 and "--model fairseq_alibi --model_args checkpoint=CKPT[,data=DIR]" in lm_eval.stdout
