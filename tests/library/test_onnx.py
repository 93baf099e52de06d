"""ONNX Runtime runs our export: the bloom_small preset's stock BLOOM folder (and our own class, for
ALiBi at another layout) as ONNX (fairseq_alibi/hf/onnx.py), scored at L and 8L against fairseq's
log-probabilities, and decoded greedily with its cache to 8L, token for token fairseq's greedy
decoding over its full forward."""
import pytest
import torch

from conftest import build_model, random_tokens
from test_position_methods import perturb

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("transformers")

L = 16


@pytest.mark.parametrize("arch, flags, remote", [
    ("alibi_transformer_lm_bloom_small", ["--decoder-embed-dim", "32", "--decoder-attention-heads", "4"], False),
    ("alibi_transformer_lm", ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4"], True),
    # the methods without an attention bias (their mask is causal alone) and fairseq's own positions
    *[(arch, ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "4", *more], True)
      for arch, more in (("nope_transformer_lm", []), ("rotary_transformer_lm", []),
                         ("transformer_lm", ["--decoder-learned-pos"]), ("transformer_lm", []))]],
    ids=["stock-bloom", "our-class", "nope", "rotary", "learned", "sinusoidal"])
def test_onnx_runtime_gives_fairseqs_log_probabilities_and_greedy_tokens_with_its_cache(arch, flags, remote, tmp_path):
    from fairseq_alibi.hf.export import bloom_layout_problem, bloom_model_of, hf_model_of, write_folder
    from fairseq_alibi.hf.onnx import cache_names, export_onnx
    from fairseq_alibi.hf.tokenizer import word_level_tokenizer

    torch.manual_seed(0)
    model, dictionary = build_model(arch, extra=["--decoder-layers", "2", *flags])
    if arch != "transformer_lm":  # fairseq's own positions have no method to perturb
        perturb(model)
    hf = hf_model_of(model, dictionary, {"source": arch})
    assert (bloom_layout_problem(hf.config) is None) != remote
    write_folder(hf if remote else bloom_model_of(hf), word_level_tokenizer(dictionary), str(tmp_path / "hf"))
    export_onnx(str(tmp_path / "hf"), str(tmp_path / "onnx"), trust_remote_code=remote)
    prefill, step = (ort.InferenceSession(str(tmp_path / "onnx" / f"{n}.onnx"), providers=["CPUExecutionProvider"])
                     for n in ("prefill", "step"))

    def fairseq(tokens):
        with torch.no_grad():
            return model.get_normalized_probs(model(tokens), log_probs=True)

    for length in (L, 8 * L):  # no cache: the whole text at once, two rows
        tokens = random_tokens(len(dictionary), 2, length, seed=length)
        logits = torch.from_numpy(prefill.run(None, {"input_ids": tokens.numpy()})[0])
        torch.testing.assert_close(logits.log_softmax(-1), fairseq(tokens), rtol=1e-5, atol=2e-5)

    names = cache_names(2)
    tokens = random_tokens(len(dictionary), 1, L, seed=1)[0].tolist()
    outputs = prefill.run(None, {"input_ids": torch.tensor([tokens]).numpy()})
    while len(tokens) < 8 * L:  # greedy, one step graph run per token, the cache carried
        expected = fairseq(torch.tensor([tokens]))[0, -1]
        torch.testing.assert_close(torch.from_numpy(outputs[0][0, -1]).log_softmax(-1), expected, rtol=1e-5, atol=2e-5)
        tokens.append(int(expected.argmax()))
        outputs = step.run(None, {"input_ids": torch.tensor([tokens[-1:]]).numpy(),
                                  **{f"past_{n}": v for n, v in zip(names, outputs[1:])}})
    assert outputs[1].shape[2] == 8 * L  # the cache holds every token


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_a_truncated_weights_file_is_refused_in_one_line_and_nothing_written(tmp_path):
    import subprocess
    import sys

    from conftest import REPO
    from fairseq_alibi.hf.export import hf_model_of, write_folder
    from fairseq_alibi.hf.tokenizer import word_level_tokenizer

    model, dictionary = build_model("alibi_transformer_lm", extra=["--decoder-layers", "1", "--decoder-embed-dim", "16",
                                                                   "--decoder-attention-heads", "2", "--decoder-ffn-embed-dim", "32"])
    write_folder(hf_model_of(model, dictionary, {}), word_level_tokenizer(dictionary), str(tmp_path / "hf"))
    weights = tmp_path / "hf" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    proc = subprocess.run([sys.executable, "-m", "fairseq_alibi.hf.onnx", str(tmp_path / "hf"), str(tmp_path / "onnx"),
                           "--trust-remote-code"], capture_output=True, text=True, cwd=REPO)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("error: ") and "does not load as a transformers model" in last
    assert "Traceback" not in proc.stderr and not (tmp_path / "onnx").exists()
