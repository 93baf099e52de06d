#!/usr/bin/env python3
"""Where the bloom_small export runs: each engine given the exported folder as it is, its tokenizer's
ids and its log-probabilities at L and 8L set against fairseq's on the same text, and greedy
generation with its cache against fairseq's greedy decoding over its full forward.

    python benchmarks/engines.py CHECKPOINT [--python-transformers4 PY] [--llama-python PY --llama-converter PY]
                                 [--out benchmarks/engines.md]

CHECKPOINT: a bloom_small checkpoint (dict.txt beside it). Engines: transformers (this venv), ONNX
Runtime (fairseq_alibi/hf/onnx.py's graphs), and where their Pythons are given, another transformers
(a venv with transformers 4.x and no package of ours) and llama.cpp (llama-cpp-python, the folder
converted to GGUF by llama.cpp's own convert_hf_to_gguf.py). Each engine outside this venv runs
benchmarks/engine_worker.py. The text: WikiText-2's first validation lines (../shared/data).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from provenance import emit, header  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "engine_worker.py")
VALID = os.path.join(os.path.dirname(HERE), "..", "shared", "data", "wikitext-2", "wiki.valid.tokens")


def fairseq_reference(checkpoint, text, lengths):
    """fairseq's ids of the text (line by line, each ended by </s>), its log-probabilities of
    [</s>] + the first LENGTH - 1 ids, and its greedy continuation of a 16-token prompt."""
    from fairseq_alibi.models.build import load_checkpoint

    model, _, task = load_checkpoint(checkpoint, os.path.dirname(checkpoint), kind="causal LM")
    model.eval()
    dictionary = task.source_dictionary
    ids = torch.cat([dictionary.encode_line(line, add_if_not_exist=False) for line in text.split("\n")]).tolist()[:-1]
    eos = dictionary.eos()
    ref = {"ids": ids}
    with torch.no_grad():
        for length in lengths:
            tokens = torch.tensor([[eos] + ids[:length - 1]])
            ref[f"logp_{length}"] = model.get_normalized_probs(model(tokens), log_probs=True)[0].numpy()
        tokens = torch.tensor([[eos] + ids[:15]])
        for _ in range(48):
            tokens = torch.cat([tokens, model(tokens)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    ref["generated"] = tokens[0].tolist()
    return ref


def compare(engine, got, ref, lengths, ran):
    """One row: the engine's ids, log-probabilities and greedy tokens against fairseq's."""
    row = {"engine": engine, **json.loads(str(got["versions"])), "ran": ran}
    if "ids" in got:
        row["ids_equal"] = got["ids"].tolist() == ref["ids"]
    for length in lengths:
        row[f"max_abs_dlogp_{length}"] = float(np.abs(got[f"logp_{length}"] - ref[f"logp_{length}"]).max())
    if "generated" in got:
        row["greedy_equal"] = got["generated"].tolist() == ref["generated"]
    return row


def onnx_runtime(folder, work, ref, lengths):
    import onnx
    import onnxruntime as ort

    from fairseq_alibi.hf.onnx import cache_names, export_onnx

    export_onnx(folder, os.path.join(work, "onnx"))
    prefill, step = (ort.InferenceSession(os.path.join(work, "onnx", f"{n}.onnx"), providers=["CPUExecutionProvider"])
                     for n in ("prefill", "step"))
    eos, got = ref["generated"][0], {}
    for length in lengths:
        logits = torch.from_numpy(prefill.run(None, {"input_ids": np.array([[eos] + ref["ids"][:length - 1]])})[0])
        got[f"logp_{length}"] = logits.log_softmax(-1)[0].numpy()
    tokens = [eos] + ref["ids"][:15]
    outputs = prefill.run(None, {"input_ids": np.array([tokens])})
    names = cache_names((len(outputs) - 1) // 2)
    for _ in range(48):
        tokens.append(int(outputs[0][0, -1].argmax()))
        outputs = step.run(None, {"input_ids": np.array([tokens[-1:]]), **{f"past_{n}": v for n, v in zip(names, outputs[1:])}})
    got["generated"] = np.array(tokens)
    got["versions"] = np.array(json.dumps({"onnxruntime": ort.__version__, "onnx": onnx.__version__}))
    return got


def gguf_of(folder, converter, python, work):
    """The folder as GGUF (f32) by llama.cpp's own convert_hf_to_gguf.py, its vocabulary check told
    to pass: llama.cpp does not know our word-level tokenizer, so the GGUF is scored from ids."""
    out = os.path.join(work, "model.gguf")
    shim = os.path.join(work, "convert.py")
    with open(shim, "w") as f:
        f.write(f"""import sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(converter))!r})
sys.argv = ["convert_hf_to_gguf.py", {folder!r}, "--outfile", {out!r}, "--outtype", "f32"]
import convert_hf_to_gguf as c
def words(self):  # the word-level vocabulary as llama.cpp's GPT-2-style BPE, one dummy merge
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(self.dir_model)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [w for w, _ in vocab]
    self.gguf_writer.add_tokenizer_model("gpt2")
    self.gguf_writer.add_tokenizer_pre("default")
    self.gguf_writer.add_token_list(tokens)
    self.gguf_writer.add_token_types([1] * len(tokens))
    self.gguf_writer.add_token_merges([f"{{tokens[4]}} {{tokens[5]}}"])  # one, unused: llama.cpp asks for merges
    self.gguf_writer.add_bos_token_id(tok.eos_token_id)
    self.gguf_writer.add_eos_token_id(tok.eos_token_id)
from conversion.base import TextModel
TextModel._set_vocab_gpt2 = words
c.main()
""")
    done = subprocess.run([python, shim], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"error: convert_hf_to_gguf.py failed: {(done.stderr.strip().splitlines() or [''])[-1]}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--lines", type=int, default=200, help="WikiText-2 validation lines scored (from the first)")
    p.add_argument("--length", type=int, default=64, help="L (the log-probabilities at L and 8L)")
    p.add_argument("--python-transformers4", help="a Python with transformers 4.x (and torch), none of our packages")
    p.add_argument("--llama-python", help="a Python with llama-cpp-python, gguf and transformers")
    p.add_argument("--llama-converter", help="llama.cpp's convert_hf_to_gguf.py (llama-cpp-python's sdist has it)")
    p.add_argument("--out")
    args = p.parse_args()
    from fairseq_alibi.hf.export import export

    lengths = [args.length, 8 * args.length]
    rows, started = [], time.time()
    with tempfile.TemporaryDirectory() as work:
        folder = os.path.join(work, "export")
        export(args.checkpoint, folder)
        with open(VALID, encoding="utf-8") as f:
            text = "".join(next(f) for _ in range(args.lines))
        text_file = os.path.join(work, "text.txt")
        with open(text_file, "w", encoding="utf-8") as f:
            f.write(text)
        ref = fairseq_reference(args.checkpoint, text, lengths)
        if len(ref["ids"]) < max(lengths):
            raise SystemExit(f"error: {args.lines} lines give {len(ref['ids'])} tokens, fewer than 8L: give more --lines")
        np.save(os.path.join(work, "ids.npy"), np.array([ref["generated"][0]] + ref["ids"]))
        pythons = [("transformers", sys.executable, "the folder with AutoModelForCausalLM and AutoTokenizer, no code of ours")]
        if args.python_transformers4:
            pythons.append(("transformers", args.python_transformers4,
                            "the same, in a venv with transformers 4.x and no package of ours"))
        for engine, python, ran in pythons:
            out = os.path.join(work, f"{len(rows)}.npz")
            done = subprocess.run([python, WORKER, "transformers", folder, text_file, ",".join(map(str, lengths)), out],
                                  capture_output=True, text=True)
            if done.returncode:
                rows.append({"engine": engine, "ran": ran, "error": (done.stderr.strip().splitlines() or [""])[-1]})
                continue
            rows.append(compare(engine, np.load(out), ref, lengths, ran))
        rows.append(compare("onnxruntime", onnx_runtime(folder, work, ref, lengths), ref, lengths,
                            "fairseq_alibi/hf/onnx.py's graphs (torch.onnx TorchScript); greedy with the step graph's cache"))
        if args.llama_python and args.llama_converter:
            ran = ("llama.cpp's convert_hf_to_gguf.py (f32) with its vocabulary step replaced (it refuses our word-level "
                   "tokenizer), scored from fairseq's ids")
            try:
                gguf = gguf_of(folder, args.llama_converter, args.llama_python, work)
                out = os.path.join(work, "llama.npz")
                ids = os.path.join(work, "ids.npy")
                done = subprocess.run([args.llama_python, WORKER, "llama-cpp", gguf, ids, ",".join(map(str, lengths)), out],
                                      capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(f"error: {(done.stderr.strip().splitlines() or [''])[-1]}")
                rows.append(compare("llama.cpp", np.load(out), ref, lengths, ran))
            except SystemExit as e:
                rows.append({"engine": "llama.cpp", "ran": ran, "error": str(e.code)})
    lines = [header(f"{args.lines} WikiText-2 validation lines, L={args.length}; {time.time() - started:.0f} s"), "",
             "| engine | version | ran | ids = fairseq's | max abs Δ log p at L | at 8L | greedy = fairseq's |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        version = ", ".join(f"{k} {v}" for k, v in r.items() if k in ("transformers", "torch", "onnxruntime", "llama_cpp_python"))
        if "error" in r:
            lines.append(f"| {r['engine']} | {version or '-'} | {r['ran']} | failed: {r['error']} | | | |")
            continue
        lines.append(f"| {r['engine']} | {version} | {r['ran']} | {r.get('ids_equal', 'not asked')} | "
                     f"{r[f'max_abs_dlogp_{lengths[0]}']:.1e} | {r[f'max_abs_dlogp_{lengths[1]}']:.1e} | "
                     f"{r.get('greedy_equal', 'not asked')} |")
    emit("\n".join(lines) + "\n", args.out, rows)


if __name__ == "__main__":
    main()
