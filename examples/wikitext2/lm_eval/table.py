"""The lm-eval comparison table: one exported model's perplexity from lm-eval (wikitext2_fairseq.yaml,
one results file per max_length) beside fairseq-eval-lm's on the same checkpoint (nonoverlapping
rows of the experiment runner's results.jsonl).

    python examples/wikitext2/lm_eval/table.py examples/wikitext2/results/hf

reads DIR/fairseq.jsonl and DIR/lm_eval/*/results_*.json, writes DIR/table.md.
"""
import glob
import json
import os
import sys


def lm_eval_rows(directory):
    """max_length -> lm-eval's results for wikitext2_fairseq."""
    rows = {}
    for path in sorted(glob.glob(os.path.join(directory, "lm_eval", "**", "results_*.json"), recursive=True)):
        record = json.load(open(path))
        args = dict(a.split("=", 1) for a in record["config"]["model_args"].split(",")) if isinstance(
            record["config"]["model_args"], str) else record["config"]["model_args"]
        rows[int(args["max_length"])] = record["results"]["wikitext2_fairseq"]
    return rows


def main(directory):
    fairseq = {}
    for line in open(os.path.join(directory, "fairseq.jsonl")):
        row = json.loads(line)
        if row["model"] != "unigram" and row["stride"] == 0 and row["scaling"] == "none" and row["split"] == "valid":
            fairseq[int(row["l_valid"])] = row
    lm_eval = lm_eval_rows(directory)
    lines = ["| L_valid | fairseq-eval-lm perplexity | lm-eval token_perplexity | relative difference | lm-eval word_perplexity |",
             "|---|---|---|---|---|"]
    for length in sorted(set(fairseq) & set(lm_eval)):
        ours = fairseq[length]["perplexity"]
        theirs = lm_eval[length]["token_perplexity,none"]
        lines.append(f"| {length} | {ours:.2f} | {theirs:.2f} | {(theirs - ours) / ours:+.1e} | "
                     f"{lm_eval[length]['word_perplexity,none']:.2f} |")
    missing = sorted(set(fairseq) ^ set(lm_eval))
    with open(os.path.join(directory, "table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
        if missing:
            f.write(f"\nMeasured by one tool only (not tabulated): L_valid {', '.join(map(str, missing))}.\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/wikitext2/lm_eval/table.py DIR")
    main(sys.argv[1])
