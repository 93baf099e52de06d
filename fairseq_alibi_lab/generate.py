"""Greedy continuations of one prompt by each checkpoint, past the training length.

    python -m fairseq_alibi_lab.generate DATA CHECKPOINT [CHECKPOINT ...] [--prompt 48 --new 48]

The prompt is the first --prompt words of DATA's validation set (line ends dropped); each model continues it greedily
(fairseq's SequenceGenerator, so incremental decoding) for --new tokens, past L = 64 with the
defaults. A model with position embeddings cannot go past its max positions: it stops there.
Prints Markdown.
"""
import argparse
import os

import torch

import fairseq_alibi.plugin  # noqa: F401  (registers the plugin's models, as --user-dir does)
from fairseq.data import data_utils
from fairseq.models.transformer_lm import TransformerLanguageModel


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="the binarized data directory (for the dictionary and the prompt)")
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--prompt", type=int, default=48, help="prompt length in tokens")
    p.add_argument("--new", type=int, default=48, help="tokens to generate")
    args = p.parse_args()

    prompt = None
    for path in args.checkpoints:
        hub = TransformerLanguageModel.from_pretrained(os.path.dirname(path) or ".", os.path.basename(path),
                                                       data_name_or_path=args.data)
        hub.eval()
        if prompt is None:  # the validation set's first tokens, without end-of-line symbols: fairseq's
            # generator ends a hypothesis at an end-of-sentence, even one forced by the prompt
            valid = data_utils.load_indexed_dataset(os.path.join(args.data, "valid"), hub.src_dict)
            words = torch.cat([valid[i] for i in range(min(len(valid), args.prompt + 1))])
            prompt = words[words.ne(hub.src_dict.eos())][: args.prompt]
            print(f"Prompt ({len(prompt)} tokens):\n\n> {hub.decode(prompt)}\n")
        limit = hub.models[0].max_positions()
        new = min(args.new, limit - len(prompt) - 1)
        # fairseq's length limits count the prompt too: an LM's hypothesis starts with it.
        total = len(prompt) + new
        hypo = hub.generate(prompt, beam=1, max_len_a=0, max_len_b=total, min_len=total)[0]["tokens"]
        generated = hypo[len(prompt):]
        if len(generated) and generated[-1] == hub.src_dict.eos():  # appended at the length limit
            generated = generated[:-1]
        stop = f" (stopped at its {limit} positions)" if new < args.new else ""
        model = hub.cfg.model._name
        print(f"**{path}** ({model}, {len(generated)} tokens{stop}):\n\n> {hub.decode(generated)}\n")


if __name__ == "__main__":
    main()
