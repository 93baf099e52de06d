"""Where lm-eval's token perplexity and fairseq-eval-lm's part: one model, the validation stream in
fairseq's nonoverlapping blocks of L, scored by the fairseq checkpoint and by its export (each
summed in fp64), and the export's last window as lm-eval feeds it (L tokens of input, so the last
partial block sees the tokens before it as context, where fairseq's sees its own only).

    python examples/wikitext2/lm_eval/windows.py CHECKPOINT EXPORTED_DIR [--data data-bin/wikitext-2] [--length 64]
"""
import argparse
import math

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("exported")
    parser.add_argument("--data", default="data-bin/wikitext-2")
    parser.add_argument("--length", type=int, default=64)
    args = parser.parse_args()

    from fairseq.data import data_utils
    from transformers import AutoModelForCausalLM

    from fairseq_alibi.models.build import load_checkpoint

    model, _, task = load_checkpoint(args.checkpoint, args.data, kind="causal LM")
    dataset = data_utils.load_indexed_dataset(f"{args.data}/valid", task.source_dictionary)
    stream = torch.cat([dataset[i] for i in range(len(dataset))])
    hf = AutoModelForCausalLM.from_pretrained(args.exported, trust_remote_code=True).eval()
    n, length = len(stream), args.length
    source = torch.cat([stream.new_tensor([task.source_dictionary.eos()]), stream[:-1]])
    totals = {"fairseq": 0.0, "export": 0.0}
    with torch.no_grad():
        for start in range(0, n, 32 * length):  # 32 blocks at a time; the last partial block alone
            end = min(n, start + 32 * length)
            full = (end - start) // length * length
            pieces = [(source[start:start + full].view(-1, length), stream[start:start + full].view(-1, length))]
            if full < end - start:
                pieces.append((source[start + full:end][None], stream[start + full:end][None]))
            for x, y in pieces:
                if x.numel() == 0:
                    continue
                totals["fairseq"] += model.get_normalized_probs(model(x), log_probs=True).gather(
                    -1, y[..., None]).double().sum().item()
                totals["export"] += hf(x).logits.log_softmax(-1).gather(-1, y[..., None]).double().sum().item()
        last = n % length
        window_gain = 0.0
        if last:  # lm-eval's last window: L tokens of input, its last `last` scored
            window = hf(source[n - length:][None]).logits.log_softmax(-1)[0, -last:]
            block = hf(source[n - last:][None]).logits.log_softmax(-1)[0]
            target = stream[n - last:, None]
            window_gain = (window.gather(-1, target).double().sum() - block.gather(-1, target).double().sum()).item()
    for name, total in totals.items():
        print(f"{name} on fairseq's blocks of {length}: perplexity {math.exp(-total / n):.4f}")
    print(f"the export with lm-eval's last window ({last} tokens with {length - last} more of context): "
          f"perplexity {math.exp(-(totals['export'] + window_gain) / n):.4f}")


if __name__ == "__main__":
    main()
