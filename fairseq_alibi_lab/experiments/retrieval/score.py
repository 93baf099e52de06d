"""Scoring: each prompt's answer greedily decoded (behind fairseq's </s>, as a text starts) with the
checkpoint as the exported class (DECODERS: "hf", retrieval's) or by the fairseq model itself ("fairseq": any
of the plugin's models, a length temperature's too, on its own attention kernel), one row per (task, length,
depth): exact matches of the whole key (the count, the accuracy) and of its first word alone (a model that
has learned to find the key but not to copy both words shows there), provenance; and the runner's scoring
stage (score_model)."""
import functools
import json
import os
import sys

from fairseq_alibi_lab.experiments.retrieval.data import test_sets
from fairseq_alibi_lab.experiments.retrieval.prompts import LONG_TESTS, MULTIPLES, read_tests


def group_key(row):
    """What one scored group is (a results row of score() is found by it)."""
    return (row.get("label"), row["checkpoint"], row.get("updates"), row.get("scaling", "none"), row["task"],
            row["length"], row["depth"])


DECODERS = ("hf", "fairseq")


def teacher_forced(model, prompts, answers):
    """Each answer word's argmax behind its prompt and the answer's words before it, by a fairseq LM, in one
    forward (a batch of equal lengths): a greedy decoding matches the whole answer exactly when every one of
    these is its word, and its first word when the first is, so the counts are greedy decoding's at the cost of
    one forward; the last positions' scores only (an adaptive softmax's whole vocabulary at 8,192 positions
    would take gigabytes)."""
    import torch

    features, _ = model.decoder(torch.cat([prompts, answers[:, :-1]], dim=1), features_only=True)
    last = features[:, -answers.size(1):]
    adaptive = getattr(model.decoder, "adaptive_softmax", None)
    scores = adaptive.get_log_prob(last, None) if adaptive is not None else model.decoder.output_layer(last)
    return scores.argmax(-1)


def score(checkpoint, data, tests_path, out, label="", scalings=("none",), lengths=None, fields=None, decoder="hf"):
    """Append to `out` a row per (scaling, task, length, depth) it lacks for this checkpoint: a
    scaling (ALiBi's or rotary's, as scripts/eval.sh applies them, factor length / L, or a length
    temperature) is scored past the training length only; decoder: DECODERS."""
    import torch

    from fairseq_alibi.tools import provenance
    from fairseq_alibi.models.build import load_checkpoint
    from fairseq_alibi.tools.checkpoints import identity, learned_positions_end, read_state
    from fairseq_alibi_lab.evaluate import check_scalings, scaling_overrides, trained
    from fairseq_alibi.tools.files import data_fingerprint, fingerprint
    from fairseq_alibi_lab.result_rows import append_lines, read_rows
    from fairseq_alibi.hf.export import hf_model_of

    tests = read_tests(tests_path)
    groups = {}
    for t in tests:
        if not lengths or t["length"] in lengths:
            groups.setdefault((t["task"], t["length"], t["depth"]), []).append(t)
    if not groups:
        raise SystemExit(f"error: no test prompt of {tests_path} has a length of {' '.join(map(str, lengths or []))}: "
                         f"its lengths are {' '.join(map(str, sorted({t['length'] for t in tests})))}")
    if not os.path.isfile(checkpoint):
        raise SystemExit(f"error: no checkpoint at {checkpoint}")
    state = read_state(checkpoint)
    scored = identity(checkpoint, state)
    # What each row was scored with: the checkpoint file, the test prompts, the training text (the mixture).
    fingerprints = {"checkpoint_sha256": fingerprint(checkpoint), "prompts_sha256": fingerprint(tests_path),
                    "mixture_sha256": data_fingerprint(data, "train") if os.path.isfile(os.path.join(data, "train.idx")) else None}
    train_length, updates = scored["train_length"], scored["updates"]
    name, _, has_scaling, _, _, _, _, kernel = trained(checkpoint, "{}")
    method = name.split("_transformer_lm")[0]
    # a scaling the model has no field for would be ignored, and its rows labelled with it
    check_scalings(checkpoint, name, has_scaling[0], scalings, has_scaling[1])
    asked_lengths = {length for _, length, _ in groups}
    # a learned position table has no row past its end: </s>, the prompt and all but the answer's last word take `length`
    end = learned_positions_end(state)
    if end and max(asked_lengths) > end:
        raise SystemExit(f"error: {checkpoint} learned {end} positions, prompts of {max(asked_lengths)} tokens are past "
                         f"them: score lengths up to {end} (--lengths), or a model without learned positions")
    for name, value in fingerprints.items():  # rows of this checkpoint scored on other prompts or data: refused
        held = {r.get(name) for r in read_rows(out) if r.get("checkpoint") == checkpoint and r.get(name) and
                (name != "prompts_sha256" or r.get("length") in asked_lengths)} - {value}  # a length is in one prompts file
        if held:
            raise SystemExit(f"error: {out} holds rows of {checkpoint} with another {name} ({', '.join(sorted(held))}, "
                             f"now {value}): other test prompts or data; give another OUT")
    # A row without the first word's count (scored before it was kept) is scored again; the last wins.
    done = {group_key(r) for r in read_rows(out) if "first_correct" in r} if os.path.exists(out) else set()
    for scaling in scalings:
        for length in sorted({length for _, length, _ in groups}):
            if scaling != "none" and length <= train_length:
                continue
            todo = {k: g for k, g in groups.items() if k[1] == length and
                    (label or None, checkpoint, updates, scaling, *k) not in done}
            if not todo:
                continue
            overrides = {} if scaling == "none" else scaling_overrides(
                method, scaling, train_length, 1.0 if scaling == "dynamic_ntk" else length / train_length, kernel)
            model, _, task = load_checkpoint(checkpoint, data, kind="causal LM", overrides=overrides)
            model.eval()
            dictionary = task.source_dictionary
            if decoder == "hf":
                hf = hf_model_of(model, dictionary, {}).eval()
                decode = lambda prompts, answers: hf.generate(  # noqa: E731
                    prompts, max_new_tokens=answers.size(1), do_sample=False, pad_token_id=dictionary.pad())[:, prompts.size(1):]
            else:  # the words greedy decoding is counted by (teacher_forced: the same counts)
                decode = functools.partial(teacher_forced, model)
            # The dense path's bias is batch x heads x T x S floats: prompts go in batches under MASK_BYTES
            # (a whole group of 20 to 16L at L = 64, as always; one at a time at 8,192 tokens).
            batch = max(1, MASK_BYTES // (4 * model.decoder.layers[0].self_attn.num_heads * (length + 1) ** 2))
            for (name, _, depth), group in todo.items():
                decoded, answers = [], [[dictionary.index(w) for w in t["answer"].split()] for t in group]
                for start in range(0, len(group), batch):
                    prompts = torch.tensor([[dictionary.eos()] + [dictionary.index(w) for w in t["prompt"].split()]
                                            for t in group[start:start + batch]])
                    with torch.no_grad():
                        decoded += decode(prompts, torch.tensor(answers[start:start + batch])).tolist()
                correct = sum(decoded[i] == answers[i] for i in range(len(group)))
                first = sum(decoded[i][0] == answers[i][0] for i in range(len(group)))
                row = {"label": label or None, **scored, "scaling": scaling, "task": name, "length": length, "depth": depth,
                       "n": len(group), "correct": correct, "accuracy": correct / len(group), "first_correct": first,
                       "first_accuracy": first / len(group), **({"decoder": decoder} if decoder != "hf" else {}),
                       **fingerprints, "commit": provenance.commit(),
                       "machine": provenance.machine(), **(fields or {})}
                # each group written as it is scored: a cut at 8,192 tokens (an hour a length) loses one group
                append_lines(out, [json.dumps(row)])
                print(f"{label or row['model']}{'' if scaling == 'none' else ' + ' + scaling}: {name} at {length} "
                      f"tokens, depth {depth:.0%}: {correct}/{len(group)} (first word {first})", flush=True)


MASK_BYTES = 2 ** 30  # score's batches: at most this much dense bias at once


ROWS = "retrieval.jsonl"  # under the runner's OUT: what score_model appends to (the runner merges parallel parts' by it)


# The loss along the same axis: a model scored past 16L also gets its perplexity at each position of a
# window of its longest length (by_position.py, blocks from BY_POSITION_OFFSETS offsets: about 50
# validation tokens at each position at 8,192), unscaled.
BY_POSITION_ROWS, BY_POSITION_OFFSETS = "by_position.jsonl", 2


def score_model(context, job, decoder="hf"):
    """The model's retrieval accuracy into OUT/retrieval.jsonl (what it lacks), in a process of its
    own (the runner imports no fairseq), and past 16L its loss by position (OUT/by_position.jsonl);
    True if it scored any retrieval."""
    from fairseq_alibi_lab.result_rows import read_rows

    model, checkpoint = job.model, job.checkpoint

    out = os.path.join(context.out, ROWS)
    before = os.path.getsize(out) if os.path.exists(out) else 0
    wanted, sets = job.lengths, test_sets(context.data, context.length)
    missing = sorted(set(wanted) - {length for _, lengths in sets for length in lengths})
    if missing:
        raise SystemExit(f"error: no test prompts of {' '.join(map(str, missing))} tokens beside {context.data} "
                         f"(test.jsonl: L..16L; {LONG_TESTS}: 32L..128L): leave --data out, and the set is completed")
    for tests, lengths in sets:
        asked = [length for length in wanted if length in lengths]
        if not asked:
            continue
        long = os.path.basename(tests) == LONG_TESTS
        scalings = model.long_scalings if long and model.long_scalings else ("none", *model.scalings)
        in_process_of_its_own(["fairseq_alibi_lab.experiments.retrieval.cli", "score", checkpoint, context.data, tests, out, "--label",
                               model.label, "--scalings", *scalings, "--lengths", *map(str, asked),
                               "--fields", context.row_fields(checkpoint), "--decoder", decoder],
                              f"scoring {model.label}'s retrieval")
    window = max(wanted)
    if window > max(MULTIPLES) * context.length and not any(
            r.get("checkpoint") == checkpoint and r.get("length") == window for r in read_rows(os.path.join(context.out, BY_POSITION_ROWS))):
        in_process_of_its_own(["fairseq_alibi_lab.by_position", checkpoint, context.data, "--length", str(window),
                               "--offsets", str(BY_POSITION_OFFSETS), "--batch", "1", "--out",
                               os.path.join(context.out, BY_POSITION_ROWS), "--label", model.label, "--fields",
                               context.row_fields(checkpoint)], f"{model.label}'s loss by position")
    return (os.path.getsize(out) if os.path.exists(out) else 0) > before


def in_process_of_its_own(module_and_args, what):
    """python -m MODULE ARGS (the runner imports no fairseq); its last error line if it fails."""
    import subprocess

    done = subprocess.run([sys.executable, "-m", *module_and_args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode:
        raise SystemExit((done.stderr.strip().splitlines() or [f"error: {what} failed"])[-1])


def at_l(task, metric, context, job):
    """An inclusion rule's measure (base.Inclusion): the job's `metric` (a row's accuracy or first_accuracy) on
    `task` at L, unscaled, the mean over the depths (a depth scored twice: its last row); None if unscored."""
    from fairseq_alibi_lab.result_rows import read_rows

    by_depth = {r["depth"]: r[metric] for r in read_rows(os.path.join(context.out, ROWS))
                if r.get("checkpoint") == job.checkpoint and r.get("task") == task and r.get("length") == context.length
                and r.get("scaling", "none") == "none"}
    return sum(by_depth.values()) / len(by_depth) if by_depth else None
