"""Run by another Python (another transformers, or llama.cpp's bindings) with no package of ours:
what an engine computes on an exported folder, for benchmarks/engines.py to compare with fairseq.

    PYTHON benchmarks/engine_worker.py transformers FOLDER TEXT_FILE LENGTHS OUT.npz
    PYTHON benchmarks/engine_worker.py llama-cpp MODEL.gguf IDS.npy LENGTHS OUT.npz

transformers: the folder's tokenizer encodes the text, the model scores its first LENGTH tokens
(after </s>, as fairseq starts a context) for each LENGTH, and greedy generation with the cache
continues a prompt; llama-cpp: the GGUF scores the given ids (its tokenizer is not used).
"""
import json
import sys

import numpy as np


def transformers_engine(folder, text_file, lengths, out):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).float().eval()
    with open(text_file, encoding="utf-8") as f:
        ids = tokenizer(f.read())["input_ids"]
    eos = model.config.eos_token_id
    arrays = {"ids": np.array(ids, dtype=np.int64)}
    with torch.no_grad():
        for length in lengths:
            tokens = torch.tensor([[eos] + ids[:length - 1]])
            arrays[f"logp_{length}"] = model(tokens).logits.log_softmax(-1)[0].numpy()
        prompt = torch.tensor([[eos] + ids[:15]])
        generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=48, do_sample=False,
                                   pad_token_id=eos)
    arrays["generated"] = generated[0].numpy()
    arrays["versions"] = np.array(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__}))
    np.savez(out, **arrays)


def llama_cpp_engine(gguf, ids_file, lengths, out):
    import llama_cpp

    ids = np.load(ids_file).tolist()
    model = llama_cpp.Llama(model_path=gguf, n_ctx=max(lengths), logits_all=True, verbose=False, n_threads=2)
    arrays = {}
    for length in lengths:
        model.reset()
        model.eval(ids[:length])
        logits = np.array(model.scores[:length], dtype=np.float64)
        arrays[f"logp_{length}"] = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - logits.max(-1, keepdims=True)
    arrays["versions"] = np.array(json.dumps({"llama_cpp_python": llama_cpp.__version__}))
    np.savez(out, **arrays)


if __name__ == "__main__":
    engine, source, data, lengths, out = sys.argv[1:6]
    lengths = [int(x) for x in lengths.split(",")]
    {"transformers": transformers_engine, "llama-cpp": llama_cpp_engine}[engine](source, data, lengths, out)
