"""A GPT-2 trained with transformers on WikiText-2: the stand-in for a pretrained `gpt2`, which
cannot be downloaded here, in the experiment that imports a GPT-2, gives it ALiBi and recovers it
(docs/hugging-face.md).

    python -m fairseq_alibi_lab.gpt2_standin data-bin/wikitext-2 checkpoints/gpt2/s1 --seed 1

GPT2LMHeadModel (learned positions, n_positions = L), the small preset's dimensions (4 layers, d
128, 8 heads, FFN 512), over the data's own word-level dictionary (hf/tokenizer.py: HF id = fairseq
index, line ends = </s>), trained on blocks of L tokens of the binarized training split with the
small recipe's optimiser (Adam (0.9, 0.98), lr 0.003 after 100 warmup updates decaying linearly to 0,
clip 0.1, 2048 tokens per update, no dropout). OUT holds save_pretrained's folder and the
tokenizer when done; every 100 updates OUT/trainer.pt (model, optimiser, update, generator) is
kept, and the same command resumes from it. A finished OUT is left as it is.
"""
import argparse
import json
import os
import sys
import time

import torch



def training_stream(data, dictionary):
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(os.path.join(data, "train"), dictionary)
    if dataset is None:
        raise SystemExit(f"error: no binarized train split in {data}: run scripts/prepare-wikitext.sh first")
    return torch.cat([dataset[i] for i in range(len(dataset))])


def learning_rate(update, updates, peak=0.003, warmup=100):
    if update < warmup:
        return peak * (update + 1) / warmup
    return peak * max(0.0, (updates - update) / max(1, updates - warmup))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--updates", type=int, default=1400)
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per update")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--stop-after", type=int, help="stop (resumably) after this update (tests)")
    args = parser.parse_args(argv)
    stop_after = args.stop_after
    del args.stop_after  # not an option of the run: a resumed run may drop it

    if os.path.isfile(os.path.join(args.out, "provenance.json")):  # written last
        print(f"{args.out} is already trained: nothing to do")
        return
    from fairseq.data import Dictionary  # after that check: fairseq and transformers take seconds to import
    from transformers import GPT2Config, GPT2LMHeadModel

    from fairseq_alibi.tools import provenance
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi.hf.tokenizer import word_level_tokenizer

    dictionary = Dictionary.load(os.path.join(args.data, "dict.txt"))
    stream = training_stream(args.data, dictionary)
    blocks = stream[: len(stream) // args.length * args.length].view(-1, args.length)
    batch = args.tokens // args.length
    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=len(dictionary), n_positions=args.length, n_embd=args.dim, n_layer=args.layers,
                        n_head=args.heads, n_inner=4 * args.dim, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        bos_token_id=dictionary.eos(), eos_token_id=dictionary.eos(), pad_token_id=dictionary.pad())
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.003, betas=(0.9, 0.98), eps=1e-8)
    generator = torch.Generator().manual_seed(args.seed)
    update, order, position, seconds = 0, torch.randperm(len(blocks), generator=generator), 0, 0.0
    state_path = os.path.join(args.out, "trainer.pt")
    os.makedirs(args.out, exist_ok=True)
    if os.path.isfile(state_path):
        state = torch.load(state_path, weights_only=False)
        if state["args"] != vars(args):
            raise SystemExit(f"error: {args.out} holds a run with other options ({state['args']}): give another OUT")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        update, order, position, seconds = state["update"], state["order"], state["position"], state["seconds"]
        generator.set_state(state["generator"])
        print(f"resuming at update {update}")
    started = time.time()
    model.train()
    while update < args.updates:
        if position + batch > len(order):  # a new epoch
            order, position = torch.randperm(len(blocks), generator=generator), 0
        rows = blocks[order[position:position + batch]]
        position += batch
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(update, args.updates)
        loss = model(input_ids=rows, labels=rows).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        update += 1
        stopping = update == stop_after
        if update % 100 == 0 or update == args.updates or stopping:
            spent = seconds + time.time() - started  # training time over every resumed piece
            print(f"update {update}: loss {loss.item() / 0.6931:.3f} bits ({spent:.0f} s)", flush=True)
            with written_whole(state_path) as partial:
                torch.save({"args": vars(args), "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "update": update, "order": order, "position": position, "seconds": spent,
                            "generator": generator.get_state()}, partial)
        if stopping:
            print(f"stopped at update {update}: run the same command again to continue")
            return
    model.eval()
    model.save_pretrained(args.out)
    word_level_tokenizer(dictionary).save_pretrained(args.out)
    with written_whole(os.path.join(args.out, "provenance.json")) as partial:
        json.dump({"command": "python -m fairseq_alibi_lab.gpt2_standin " + " ".join(sys.argv[1:]),
                   "commit": provenance.commit(), "machine": provenance.machine(), "updates": update,
                   "training_wall_s": round(seconds + time.time() - started, 1)}, open(partial, "w"))


if __name__ == "__main__":
    main()
