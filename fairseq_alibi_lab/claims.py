#!/usr/bin/env python3
"""The newer methods' own claims, tested on the comparison's seeded rows (issue 22).

    python scripts/claims.py RESULTS.jsonl [--out claims.md]

Each claim compares two cells of the comparison's tables, (label, L_valid), of one stride, over the
cells' training seeds (mean ± sample std, as the tables show them), for models trained at L (the
shortest L_valid scored). The verdict:
- "fewer than 3 seeds": either cell has fewer;
- "not separated": the means differ by no more than the two standard deviations together;
- else "supported" or "refuted", by the direction the claim predicts. A claim that a model is no
  worse ("at most") is supported where the difference is not separated.
Prints the Markdown table (and writes it to --out if given).
"""
import argparse
import dataclasses
import os
from fairseq_alibi_lab import results
from fairseq_alibi_lab.results import written_whole


@dataclasses.dataclass(frozen=True)
class Claim:
    text: str
    a: tuple  # (label, multiple of L)
    b: tuple
    relation: str  # "lower": a's perplexity is below b's; "at most": a's is not above b's
    strides: tuple = ("0", "L_valid/2")


CLAIMS = (
    Claim("KERPLE (log) extrapolates better than ALiBi", ("KERPLE log", 16), ("ALiBi", 16), "lower"),
    Claim("FIRE extrapolates better than ALiBi", ("FIRE", 16), ("ALiBi", 16), "lower"),
    # The same at 8L, the longest the second scale (scale2, L=512) is scored at.
    Claim("KERPLE (log) extrapolates better than ALiBi (8L)", ("KERPLE log", 8), ("ALiBi", 8), "lower"),
    Claim("FIRE extrapolates better than ALiBi (8L)", ("FIRE", 8), ("ALiBi", 8), "lower"),
    Claim("YaRN closes rotary's gap past L (rotary + YaRN at 8L no worse than ALiBi)", ("Rotary + YaRN", 8),
          ("ALiBi", 8), "at most"),
    # With a sliding window every token scored at 16L sees at least 8L tokens before it; at L,
    # at least L/2. Lower at 16L: the model uses context beyond its training length.
    Claim("Sandwich uses context beyond L", ("Sandwich", 16), ("Sandwich", 1), "lower", ("L_valid/2",)),
    Claim("ALiBi uses context beyond L (the paper's claim, for reference)", ("ALiBi", 16), ("ALiBi", 1), "lower",
          ("L_valid/2",)),
    Claim("NoPE generalises in length (2L no worse than L)", ("NoPE", 2), ("NoPE", 1), "at most"),
    Claim("NoPE generalises in length (16L no worse than L)", ("NoPE", 16), ("NoPE", 1), "at most"),
    Claim("YaRN closes rotary's gap past L (rotary + YaRN at 16L no worse than ALiBi)", ("Rotary + YaRN", 16),
          ("ALiBi", 16), "at most"),
    Claim("YaRN improves rotary past L", ("Rotary + YaRN", 16), ("Rotary", 16), "lower"),
    # The paper (section 3) tried trainable slopes and kept fixed ones: learning them does not help.
    Claim("Learned slopes do not help (ALiBi at L no worse than ALiBi with learned slopes)", ("ALiBi", 1),
          ("ALiBi, learned slopes", 1), "at most"),
    Claim("Learned slopes do not help past L (ALiBi at 16L no worse than learned slopes)", ("ALiBi", 16),
          ("ALiBi, learned slopes", 16), "at most"),
    # FoX's paper: the forget gate (data-dependent ALiBi) models language better and extrapolates.
    Claim("FoX's forget gate improves on ALiBi at L", ("FoX (forget gate)", 1), ("ALiBi", 1), "lower"),
    Claim("FoX's forget gate extrapolates better than ALiBi", ("FoX (forget gate)", 16), ("ALiBi", 16), "lower"),
)
SEEDS = 3


def verdict(a, b, relation, seeds=SEEDS):
    """The verdict on "a relation b" from each side's per-seed perplexities."""
    if min(len(a), len(b)) < seeds:
        return f"fewer than {seeds} seeds"
    (mean_a, std_a), (mean_b, std_b) = results.mean_std(a), results.mean_std(b)
    if abs(mean_a - mean_b) <= std_a + std_b:
        return "supported (not separated)" if relation == "at most" else "not separated"
    return "supported" if mean_a < mean_b else "refuted"


def cells(rows):
    """{(stride rule, label, l_valid): [perplexity of each seed]} of the models trained at the
    shortest length scored (L), split valid; and L."""
    tables = results.tables(rows)
    length = min(lv for (split, _), (l_valids, _) in tables.items() for lv in l_valids)
    out = {}
    for (split, stride), (_, lines) in tables.items():
        for (label, train_length), line in lines.items():
            if split == "valid" and train_length in (None, length):
                for l_valid, values in line.items():
                    out[(stride, label, l_valid)] = values
    return out, length


def table(rows, claims=CLAIMS):
    found, length = cells(rows)
    lines = ["| claim | scoring | A | B | verdict |", "|---|---|---|---|---|"]
    for claim in claims:
        for stride in claim.strides:
            a, b = ((found.get((stride, label, k * length), []), f"{label} at {k * length}")
                    for label, k in (claim.a, claim.b))
            shown = [f"{name}: {results.cell(values, len(values))} (n={len(values)})" if values else f"{name}: not scored"
                     for values, name in (a, b)]
            scoring = "nonoverlapping" if stride == "0" else f"sliding, stride {stride}"
            lines.append(f"| {claim.text} | {scoring} | {shown[0]} | {shown[1]} | {verdict(a[0], b[0], claim.relation)} |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="the comparison's results.jsonl (scripts/experiment.py comparison)")
    p.add_argument("--out", help="also write the table here (.md)")
    args = p.parse_args()
    rows = results.load(args.results)
    if not rows:
        p.error(f"no results in {', '.join(args.results)}")
    text = table(rows)
    if args.out:
        with written_whole(args.out) as partial, open(partial, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
