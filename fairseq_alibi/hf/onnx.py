"""An exported folder as ONNX, for ONNX Runtime: two graphs through torch.onnx (TorchScript), both of
dynamic length.

    python -m fairseq_alibi.hf.onnx EXPORTED_DIR ONNX_DIR

- ONNX_DIR/prefill.onnx: input_ids (batch, T) -> logits (batch, T, vocab) and each layer's keys and
  values (k0, v0, k1, ...), the cache of those T tokens;
- ONNX_DIR/step.onnx: input_ids (batch, T') and past_k0, past_v0, ... -> the logits of the T' new
  tokens and the cache grown by them: cached decoding, one graph run per step.
The logits are the folder's (fairseq's log-probabilities up to a constant per position; tested at
L and 8L, and decoding with the cache to 8L, in tests/library/test_onnx.py). Any folder transformers loads
(stock BLOOM, or our class with trust_remote_code) whose cache is transformers' DynamicCache.
"""
import argparse
import os

import torch

from fairseq_alibi.tools.files import folder_written_whole, new_folder_problem, one_line_on_disk_faults


def cache_names(layers):
    return [f"{kv}{i}" for i in range(layers) for kv in ("k", "v")]


class Prefill(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        from transformers import DynamicCache

        out = self.model(input_ids=input_ids, use_cache=True, past_key_values=DynamicCache())
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])


class Step(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i in range(len(past) // 2):
            cache.update(past[2 * i], past[2 * i + 1], i)
        mask = torch.ones(input_ids.size(0), past[0].size(-2) + input_ids.size(1), dtype=torch.long)
        out = self.model(input_ids=input_ids, attention_mask=mask, use_cache=True, past_key_values=cache)
        return (out.logits, *[t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)])


def export_onnx(folder, out_dir, trust_remote_code=False):
    """Write prefill.onnx and step.onnx for the transformers folder into the new folder out_dir."""
    import warnings

    from transformers import AutoModelForCausalLM

    if new_folder_problem(out_dir):
        raise SystemExit(f"error: {new_folder_problem(out_dir)}")
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=trust_remote_code).float().eval()
    except Exception as error:  # noqa: BLE001  (a truncated or foreign weights file: safetensors' own error, and others)
        first = (str(error).strip().splitlines() or [""])[0][:200]
        raise SystemExit(f"error: {folder} does not load as a transformers model ({type(error).__name__}: {first}): "
                         "export it again with fairseq-alibi-export-hf") from None
    names = cache_names(model.config.num_hidden_layers)
    example = torch.full((1, 4), model.config.eos_token_id or 0, dtype=torch.long)
    with torch.no_grad():
        cache = Prefill(model)(example)[1:]
    with warnings.catch_warnings(), folder_written_whole(out_dir) as partial:
        warnings.simplefilter("ignore")  # the tracer's notes on Python conditionals it fixes for these shapes
        torch.onnx.export(Prefill(model), (example,), os.path.join(partial, "prefill.onnx"), input_names=["input_ids"],
                          output_names=["logits", *names], dynamo=False,
                          dynamic_axes={"input_ids": {0: "batch", 1: "length"}, "logits": {0: "batch", 1: "length"},
                                        **{n: {0: "batch", 2: "length"} for n in names}})
        torch.onnx.export(Step(model), (example[:, :1], *cache), os.path.join(partial, "step.onnx"),
                          input_names=["input_ids", *[f"past_{n}" for n in names]], output_names=["logits", *names],
                          dynamo=False,
                          dynamic_axes={"input_ids": {0: "batch", 1: "new"}, "logits": {0: "batch", 1: "new"},
                                        **{f"past_{n}": {0: "batch", 2: "past"} for n in names},
                                        **{n: {0: "batch", 2: "length"} for n in names}})


@one_line_on_disk_faults
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a folder fairseq-alibi-export-hf wrote")
    p.add_argument("out_dir", help="a new or empty directory: prefill.onnx and step.onnx")
    p.add_argument("--trust-remote-code", action="store_true", help="for a folder of our class (not stock BLOOM)")
    args = p.parse_args(argv)
    if not os.path.isfile(os.path.join(args.folder, "config.json")):
        p.error(f"{args.folder} is not an exported folder (no config.json)")
    export_onnx(args.folder, args.out_dir, args.trust_remote_code)
    print(f"wrote {args.out_dir}/prefill.onnx and step.onnx")


if __name__ == "__main__":
    main()
