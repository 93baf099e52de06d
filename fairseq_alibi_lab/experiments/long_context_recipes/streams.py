"""The experiment's streaming stage (its rule, in the package's docstring, written before any arm had its seeds):
the two trained arms with the highest mean passkey first word past the field at 32L, once every trained arm
has its included seeds, streamed through a sink cache of their last training length with 0, 1 and 4 sinks on
the validation and test splits (the streaming experiment's scorer and rows).

Which two arms is known only at the end, and a fresh machine keeps the rows but not the checkpoints, so
every included seed of every trained arm is streamed once it is scored (`stream`, a Model.records entry);
streaming.md shows the rule's two arms, and the others' streams apart, as streamed beyond the rule."""
import os

from fairseq_alibi_lab.experiments.streaming import stages as streaming

ROWS = streaming.ROWS
CHOSEN = 2
AT = 32  # the rule's multiple of L


def stream(context, job):
    """A Model.records entry: the included seed's streams (an excluded seed is scored at L only, not streamed)."""
    from fairseq_alibi_lab import inclusion

    if job.checkpoint in inclusion.excluded(context.out):
        return False
    return streaming.stream(context, job)


def passkey_past_the_field(rows, out):
    """{arm: {checkpoint: passkey first word past the field at 32L}} of the included seeds' retrieval rows
    (rows: their perplexity rows, which name the included checkpoints)."""
    from fairseq_alibi_lab.experiments.long_context_recipes.summary import past_the_field

    scored, _, _, found = past_the_field(rows, out)
    length = min((r["length"] for r in scored), default=None)
    return {arm: runs for (task, arm, lv), runs in found.items() if task == "passkey" and lv == AT * length}


def chosen(found, trained, wanted):
    """The rule's arms: the CHOSEN trained arms with the highest mean, once each has `wanted` included seeds
    (ties: the declared order); None before, with the arms still short."""
    short = [arm for arm in trained if len(found.get(arm, {})) < wanted]
    if short:
        return None, short
    mean = {arm: sum(found[arm].values()) / len(found[arm]) for arm in trained}
    return sorted(trained, key=lambda arm: -mean[arm])[:CHOSEN], []


def report(rows, out, trained, wanted):
    """OUT/streaming.md, or None before any stream: each streamed arm's perplexity streamed with 0, 1 and 4
    sinks on each split, beside its blocks of the cache's length, mean ± std over the included seeds, the
    rule's two arms first, then each seed's values. trained: the trained arms' labels in the declared order."""
    from fairseq_alibi.tools.files import written_whole
    from fairseq_alibi_lab.result_rows import read_rows
    from fairseq_alibi_lab.results import method_name, per_run
    from fairseq_alibi_lab.experiments.long_context_recipes.summary import shown

    path = os.path.join(out, ROWS)
    checkpoints = {r["checkpoint"] for r in rows if r.get("checkpoint")}
    streamed = [r for r in (read_rows(path) if os.path.exists(path) else []) if r["checkpoint"] in checkpoints]
    if not streamed:
        return None
    streams = per_run(streamed, lambda r: (r["label"], r["split"], r["sinks"]))
    cache = {r["label"]: r["cache"] for r in streamed}
    in_blocks = [r for r in rows if r.get("checkpoint") and r.get("stride") == 0 and r.get("split") == "valid"
                 and r.get("scaling", "none") == "none" and r["l_valid"] == cache.get(r["label"])]
    blocks = per_run(in_blocks, lambda r: method_name(r))
    found = passkey_past_the_field(rows, out)
    rule, short = chosen(found, trained, wanted)
    splits = [s for s in streaming.SPLITS if any(r["split"] == s for r in streamed)]
    head = ["arm", "cache", "blocks of the cache (valid)",
            *(f"{split}: {'window only' if s == 0 else f'{s} sink' + 's' * (s != 1)}" for split in splits for s in streaming.SINKS)]

    def line(arm):
        n = len(blocks.get(arm, [])) or None
        return "| " + " | ".join([arm, str(cache[arm]), shown(blocks.get(arm, []), 2, n),
                                  *(shown(streams.get((arm, split, s), []), 2, n) for split in splits for s in streaming.SINKS)]) + " |"

    table = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    arms = [arm for arm in trained if arm in cache]
    if rule:
        means = ", ".join(f"{arm} {100 * sum(found[arm].values()) / len(found[arm]):.1f}%" for arm in rule)
        said = (f"The rule's two arms (the highest mean passkey first word past the field at {AT}L over their "
                f"{wanted} included seeds: {means}):")
        lines = [said, "", *table, *(line(arm) for arm in rule if arm in cache)]
        others = [arm for arm in arms if arm not in rule]
    else:
        lines = [f"The rule's two arms are not decided yet: {', '.join(short)} lack{'s' * (len(short) == 1)} "
                 f"{wanted} included seeds scored at {AT}L."]
        others = arms
    if others:
        lines += ["", "Streamed beyond the rule (every included seed is streamed once scored: exploratory):", "",
                  *table, *(line(arm) for arm in others)]
    # each seed's values, which the means above are made of
    by_checkpoint = {(r["checkpoint"], r["split"], r["sinks"]): r["perplexity"] for r in streamed}
    blocks_of = {r["checkpoint"]: r["perplexity"] for r in in_blocks}
    seeds = sorted({(arms.index(r["label"]), r.get("seed") or 0, r["checkpoint"], r["label"]) for r in streamed})
    cell = lambda value: "-" if value is None else f"{value:.2f}"  # noqa: E731
    lines += ["", "Each seed:", "", "| arm | seed | " + " | ".join(head[1:]) + " |", "|---" * (len(head) + 1) + "|",
              *("| " + " | ".join([label, str(seed), str(cache[label]), cell(blocks_of.get(checkpoint)),
                                   *(cell(by_checkpoint.get((checkpoint, split, s))) for split in splits for s in streaming.SINKS)]) + " |"
                for _, seed, checkpoint, label in seeds)]
    text = ("# Streaming through a sink cache of the arm's last training length (perplexity, mean ± std over the "
            "included seeds; descriptive, no claim)\n\n" + "\n".join(lines) + "\n")
    with written_whole(os.path.join(out, "streaming.md")) as partial, open(partial, "w") as f:
        f.write(text)
    return text
