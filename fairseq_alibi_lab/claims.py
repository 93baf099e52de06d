#!/usr/bin/env python3
"""Verdicts on an experiment's declared claims, and on any two cells asked for.

    python scripts/claims.py RESULTS.jsonl [--experiment NAME] [--out claims.md]       (claims_cli.py: the command line)
    python scripts/claims.py RESULTS.jsonl --compare "LABEL A@K" "LABEL B@K" [--relation lower|at-most|higher] [--task T]

An experiment declares its claims with itself (Experiment.claims, in its own file under
fairseq_alibi_lab/experiments/; --experiment defaults to the experiment its rows name). A cell is
(label, K) at K x L of one scoring over the training seeds (one run, one checkpoint, per seed); the
experiment's stages say what else a cell is (Stages.claim_cells: a task, a size bucket). Each line (a claim on one scoring) gets:
- the seeds' spread, a description: "separated" where the means differ by more than the two sample
  standard deviations together (or, against a floor, by more than the seeds' one); it decides nothing;
- a two-sided test: a paired t test where both cells are the same checkpoints (one model at two
  lengths or scalings) or one seed's two arms (both fine-tuned from that seed's prepared checkpoint:
  base.paired_by_seed), else Welch's t test; a one-sample t test against a floor of the prompts (one
  value, no seeds). Where the values do not spread there is no t test and no verdict;
- its family: "primary" where the claim and its scoring were declared before the first row of their
  cells and the claim is declared primary (Claim.primary), else "exploratory";
- Holm's adjustment over the primary lines with a test (the family), and the verdict: "supported" or
  "refuted" (by the direction of the means) only where the Holm p is below 0.05, else "not shown" (no
  equivalence margin is ever declared, so a large p never shows "no worse"); an exploratory line has
  numbers and its raw p, no verdict word;
- when the claim was declared: the commit that first wrote it (Claim.declared), and "post hoc" where
  that came after the first row of its cells (Claim.after_data, or a scoring added later:
  Claim.scorings_declared). `--audit` recomputes both from git history and the rows' commits (retired
  rows included: a cell seen before its checkpoint was trained again was seen);
  tests/lab/test_rebuild.py checks them for every committed experiment.
Prints the Markdown table (and writes it to --out if given).
"""
import dataclasses
import functools
from typing import Callable, Optional

from fairseq_alibi_lab import results


@dataclasses.dataclass(frozen=True)
class Claim:
    text: str
    a: tuple  # a cell: (label, multiple of L), or what the experiment's Stages.claim_cells reads
    b: tuple
    relation: str  # "lower": a's value is below b's; "at most": not above it; "higher": above it
    strides: tuple = ("0", "L_valid/2")  # the scorings: stride rules, or the name of another scoring
    scoring: str = ""  # the scoring's name where a stride rule's would mislead (the streams)
    declared: str = ""  # the commit that first wrote the claim ("": not yet committed)
    after_data: bool = False  # declared after the first row of its cells: post hoc (--audit checks it)
    # A scoring added after the claim, which dates the claim's lines on it: ((scoring, commit, whether
    # that came after the experiment's first row), ...).
    scorings_declared: tuple = ()
    primary: bool = True  # False: declared exploratory (kept out of the primary family whenever declared)

    def declared_scoring(self, scoring):
        """(commit, after the data) of a scoring added later, or None."""
        return next(((commit, after) for name, commit, after in self.scorings_declared if name == scoring), None)

    def post_hoc(self, scoring):
        later = self.declared_scoring(scoring)
        return not self.declared or self.after_data or bool(later and later[1])


@dataclasses.dataclass(frozen=True)
class Cells:
    """An experiment's rows as the cells its claims name."""
    found: dict  # key -> {checkpoint: value}
    locate: Callable  # locate(cell, scoring) -> (its key in found, its name in the table)
    read: tuple  # every file whose rows were read (--audit dates their commits)
    seeds: dict = dataclasses.field(default_factory=dict)  # checkpoint -> its training seed
    # whether two labels are one seed's arms (paired by seed): the experiment's (main sets it), else never
    paired: Callable = lambda label_a, label_b: False
    higher_is_better: bool = False  # accuracies: --compare's default relation is "higher"
    # compare_cell(label, k, task) -> the cell --compare names; None: --compare is refused
    compare_cell: Optional[Callable] = None
    scorings: tuple = ()  # the scorings the rows hold (what --compare asks on)


SEEDS = 3
ALPHA = 0.05  # a primary verdict's level, after Holm's adjustment over the family


@dataclasses.dataclass(frozen=True)
class Comparison:
    spread: str = ""  # the seeds' spread, described
    test: str = ""  # the test's name and raw p
    p: Optional[float] = None
    difference: float = 0.0  # mean of a - mean of b
    missing: str = ""  # why there is no comparison at all ("": there is one)
    waiting: bool = False  # missing for want of rows still to come (a cell without any, or too few seeds)


# A cell with no rows: its runs are still to come (an experiment in progress; a claim on a cell its experiment
# does not score is refused when declared).
PENDING = "no verdict (pending: a cell has no rows yet)"


def compare(a, b, seeds_of=None, seeds=SEEDS):
    """The comparison of cells a and b, each {checkpoint: value} (one run per seed); b may be a floor of
    the prompts ({FLOOR: value}). seeds_of: {checkpoint: seed} where a and b are one seed's arms
    (paired by seed), else None."""
    if not a or not b:
        return Comparison(missing=PENDING, waiting=True)
    if set(b) == {FLOOR}:  # a floor of the prompts: one value, no seeds
        if len(a) < seeds:
            return Comparison(missing=f"no verdict (n = {len(a)}: the rule asks for {seeds} seeds)", waiting=True)
        mean_a, std_a = results.mean_std(list(a.values()))
        separated = abs(mean_a - b[FLOOR]) > std_a
        spread = "separated from the floor" if separated else "within the seeds' spread of the floor"
        test, p = one_sample_test(a, b[FLOOR])
        return Comparison(spread, test, p, mean_a - b[FLOOR])
    if min(len(a), len(b)) < seeds:
        return Comparison(missing=f"no verdict (n = {len(a)} and {len(b)}: the rule asks for {seeds} seeds a side)",
                          waiting=True)
    (mean_a, std_a), (mean_b, std_b) = results.mean_std(list(a.values())), results.mean_std(list(b.values()))
    spread = "separated" if abs(mean_a - mean_b) > std_a + std_b else "within the seeds' spread"
    test, p = t_test(a, b, seeds_of)
    return Comparison(spread, test, p, mean_a - mean_b)


# Its key in a cell: a floor from the task's own prompts, one value with no seeds.
FLOOR = "(floor)"


def one_sample_test(a, floor):
    """(what, p): the two-sided p of a one-sample t test of a's values against the floor; p None where
    the seeds do not spread (scipy's t is then infinite and its p 0, a certainty no 3 seeds give)."""
    from scipy import stats

    if spreadless(a.values()):
        return "one-sample t: no spread, no test", None
    p = float(stats.ttest_1samp(list(a.values()), floor).pvalue)
    return f"one-sample t, p = {p:.2g}", p


def pairs(a, b, seeds_of):
    """[(a's value, b's value)] of the pairs of a paired test, and what pairs them; None where a and b are
    independent runs: the same checkpoints pair by checkpoint, one seed's arms by seed."""
    if set(a) == set(b):
        return [(a[c], b[c]) for c in sorted(a)], "paired t"
    if seeds_of:
        by_seed = [{seeds_of.get(c): v for c, v in side.items()} for side in (a, b)]
        if set(by_seed[0]) == set(by_seed[1]) and None not in by_seed[0] and len(by_seed[0]) == len(a) == len(b):
            return [(by_seed[0][s], by_seed[1][s]) for s in sorted(by_seed[0])], "paired t (one seed's arms)"
    return None


def t_test(a, b, seeds_of=None):
    """(what, p): the two-sided p of a paired t test where a and b pair (pairs), else of Welch's; p
    None where the values do not spread."""
    from scipy import stats

    paired = pairs(a, b, seeds_of)
    if paired:
        values, name = paired
        if spreadless(x - y for x, y in values):
            return f"{name}: no spread, no test", None
        p = float(stats.ttest_rel([x for x, _ in values], [y for _, y in values]).pvalue)
    else:
        name = "Welch t"
        if spreadless(a.values()) and spreadless(b.values()):
            return f"{name}: no spread, no test", None
        p = float(stats.ttest_ind(list(a.values()), list(b.values()), equal_var=False).pvalue)
    return (f"{name}, p = {p:.2g}", p) if p == p else (f"{name}: no spread, no test", None)


def spreadless(values):
    """True where every value is the same (a t statistic is then 0/0 or infinite: no test)."""
    return len(set(values)) <= 1


def holm(pvalues):
    """Holm's step-down adjustment of the p values (None: no test, left out of the family)."""
    ranked = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    adjusted, running = [None] * len(pvalues), 0.0
    for rank, (p, i) in enumerate(ranked):
        running = max(running, min(1.0, (len(ranked) - rank) * p))
        adjusted[i] = running
    return adjusted


def verdict(relation, comparison, primary, q):
    """The verdict word of one line: none for an exploratory line; for a primary one, the direction of
    the means where its Holm p (q) is below ALPHA, "not shown" where it is not, none without a test."""
    if comparison.missing:
        return comparison.missing
    if not primary:
        return "exploratory (no verdict)"
    if q is None:
        return "no verdict (no test)"
    if q >= ALPHA:
        return "not shown"
    return "supported" if (comparison.difference > 0) == (relation == "higher") else "refuted"


def one_run_per_seed(runs, run, label, seed, checkpoint):
    """Refuses a second checkpoint for one run (a label, a training length) and seed."""
    other = runs.setdefault((run, seed), checkpoint)
    if other != checkpoint:
        raise SystemExit(f"error: the rows hold two runs of {label}, seed {seed} ({other} and {checkpoint}): "
                         "a verdict counts one run per seed; give the rows of one run")


def cells(rows):
    """{(stride rule, label, training length, l_valid): {checkpoint: perplexity}}, split valid; L, the
    shortest length scored; and {checkpoint: seed}. Two runs of one label, training length and seed
    are refused: a seed is one run."""
    length = min(key[-1] for key in rows)
    out, runs, seeds = {}, {}, {}
    for (split, stride, label, train_length, seed, checkpoint, l_valid), ppl in rows.items():
        if split != "valid":
            continue
        train_length = train_length or length
        one_run_per_seed(runs, (label, train_length), label, seed, checkpoint)
        out.setdefault((stride, label, train_length, l_valid), {})[checkpoint] = ppl
        seeds[checkpoint] = seed
    return out, length, seeds


def perplexity_cells(length):
    """A cell (label, K) at K x L of a model trained at L, or (label, K, T) of one trained at T x L:
    its key in cells() for a stride, and its name."""
    def locate(cell, stride):
        label, k, *trained = cell
        t = trained[0] if trained else 1
        name = f"{label} at {k * length}" + (f" (trained at {t * length})" if t != 1 else "")
        return (stride, label, t * length, k * length), name
    return locate


def perplexity_cell(label, k, task):
    """--compare's cell on perplexity rows: (label, K); a task is refused."""
    if task:
        raise SystemExit("error: --task names the task of --compare's cells, and these rows are perplexities of no task")
    return label, k


def perplexity_rows(rows, read):
    """Cells of perplexity rows (results.keyed's): what every causal LM and encoder experiment scores."""
    if not rows:
        raise SystemExit(f"error: no results in {', '.join(read)}")
    found, length, seeds = cells(rows)
    scored = tuple(sorted({key[0] for key in found}, key=lambda stride: stride != "0"))
    return Cells(found, perplexity_cells(length), tuple(read), seeds, compare_cell=perplexity_cell, scorings=scored)


def read_perplexities(paths, machine=None):
    """The default Stages.claim_cells: the perplexity rows of the results files (of one machine:
    results.load's machine)."""
    return perplexity_rows(results.load(paths, machine), paths)


def scoring_name(claim, scoring):
    """A line's scoring as the table names it: a stride rule's, or the scoring's own name (in percent)."""
    if claim.scoring:
        return claim.scoring
    if scoring == "0":
        return "nonoverlapping"
    return f"sliding, stride {scoring}" if scoring[:1].isdigit() or scoring.startswith("L_valid") else f"{scoring} (%)"


def declaration(claim, scoring):
    """The table's "declared" cell of one claim's line: its commit, and "post hoc" where the claim or
    this scoring was declared after the data."""
    if not claim.declared:
        return "not declared (asked after the data)"
    later = claim.declared_scoring(scoring)
    when = f"`{claim.declared}`" + (f", scoring `{later[0]}`" if later else "")
    return when + (", post hoc" if claim.post_hoc(scoring) else ", before the data")


@dataclasses.dataclass(frozen=True)
class Line:
    cells: list  # the table's cells up to the test
    relation: str
    comparison: Comparison
    primary: bool


def lines(found, claim, seeds=SEEDS):
    """The claim's lines, one per scoring (Holm's column and the verdict are filled by render); seeds: the
    included seeds a side a test waits for."""
    out = []
    for scoring in claim.strides:
        sides = [(found.found.get(key, {}), name) for key, name in (found.locate(cell, scoring) for cell in (claim.a, claim.b))]
        shown = [f"{name}: {results.cell(list(values.values()), len(values))} (n={len(values)})" if values
                 else f"{name}: no rows yet" for values, name in sides]
        arms = found.seeds if found.paired(claim.a[0], claim.b[0]) else None
        comparison = compare(sides[0][0], sides[1][0], arms, seeds)
        primary = claim.primary and not claim.post_hoc(scoring)
        family = "primary" if primary else ("exploratory (post hoc)" if claim.post_hoc(scoring) else "exploratory")
        out.append(Line([claim.text, declaration(claim, scoring), family, scoring_name(claim, scoring), *shown,
                         comparison.spread, comparison.test], claim.relation, comparison, primary))
    return out


HEADER = ["| claim | declared | family | scoring | A | B | the seeds' spread (describes) | test (two-sided) | Holm p | verdict |",
          "|---|---|---|---|---|---|---|---|---|---|"]


def render(found, claims, seeds=SEEDS):
    """The claims' table: one line per claim and scoring, Holm's adjustment over the primary lines with a
    test, the verdicts by it; then what was tested and how the verdicts were decided. seeds: the included
    seeds a side every test waits for (an experiment that declares more than the rule's 3, as an inclusion
    rule's `wanted`, is not tested on its first 3: that would be a look before its data are in)."""
    made = [line for claim in claims for line in lines(found, claim, seeds)]
    # A primary line still waiting for rows (a cell without any, or fewer seeds than the rule) leaves the family
    # incomplete: Holm's adjustment over the lines that have a test would be over a smaller family than
    # declared, so no primary verdict is given yet.
    pending = sum(line.primary and line.comparison.waiting for line in made)
    adjusted = holm([line.comparison.p if line.primary and not pending else None for line in made])
    incomplete = f"no verdict (the primary family is incomplete: {lines_of(pending)} pending)"

    def word(line, q):
        if pending and line.primary and not line.comparison.missing:
            return incomplete
        return verdict(line.relation, line.comparison, line.primary, q)

    body = [f"| {' | '.join(line.cells)} | {'' if q is None else f'{q:.2g}'} | {word(line, q)} |"
            for line, q in zip(made, adjusted)]
    primary = sum(line.primary for line in made)
    tested = sum(q is not None for q in adjusted)
    waiting = ["", f"The primary family is incomplete: {lines_of(pending)} of it still {'wait' if pending > 1 else 'waits'} "
               "for rows (an experiment in progress), so no line has a Holm p or a verdict until all of them have their "
               "rows."] if pending else []
    return "\n".join(HEADER + body + waiting + [
        "", f"{lines_of(len(made))} (claim x scoring). The primary family: {lines_of(primary)} of claims declared primary "
        f"before the first row of their cells, {tested} of them with a test; Holm's adjustment is over those {tested}. A primary "
        f"verdict is \"supported\" or \"refuted\" (by the direction of the means) only where its Holm p is below {ALPHA}, "
        "else \"not shown\" (no equivalence margin is declared: a large p never shows \"no worse\"). Exploratory: "
        f"{lines_of(len(made) - primary)}, their numbers and raw p, no verdict. The seeds' spread describes; it decides "
        "nothing."]) + "\n"


def lines_of(n):
    return f"{n} line{'s' * (n != 1)}"


# How --compare names a claim's relation (Claim.relation's values).
RELATION_WORDS = {"lower": "below", "at most": "at most", "higher": "above"}


@functools.lru_cache(maxsize=None)
def git_date(commit):
    """The author date of a commit (a row's "abc1234+changes": its base commit), from git; None where
    the history does not hold it."""
    import subprocess

    done = subprocess.run(["git", "show", "-s", "--format=%aI", commit.split("+")[0]], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def audit(found, claims, paths, date=git_date, retired=()):
    """(report, disagreements): for each claim, the date of its declaring commit against the first moment
    both of its cells had a row (for each cell the earliest commit of any row of the checkpoints it holds,
    in the files `paths`, and of any row `retired` since at its path and length: a cell seen before its
    checkpoint was trained again was seen; the later of the two cells'), post hoc where it came after,
    and whether Claim.after_data says the same; a scoring added later (Claim.scorings_declared) against
    the first row of the whole experiment."""
    from fairseq_alibi_lab.result_rows import read_rows

    undated = date

    def date(commit):  # an audit without the history that dates a commit would read "not post hoc": refused
        when = undated(commit)
        if when is None:
            raise SystemExit(f"error: --audit needs the git history that holds commit {commit} (this is a shallow "
                             "clone or a copy without .git?): run it in a full clone (git fetch --unshallow)")
        return when

    def earliest_rows(paths, key):
        first = {}  # key(row) -> (date, commit) of its earliest row
        for path in paths:
            for row in read_rows(path):
                when = date(row["commit"]) if row.get("commit") else None
                if when and (key(row) not in first or when < first[key(row)][0]):
                    first[key(row)] = (when, row["commit"])
        return first

    first = earliest_rows(paths, lambda row: row.get("checkpoint"))
    seen = earliest_rows(retired, lambda row: (row.get("checkpoint"), row.get("length", row.get("l_valid"))))
    experiment_first = min(first.values(), default=None)
    lines_, wrong = ["| claim | declared | its date | both cells first scored | its date | post hoc | the declaration says |",
                     "|---|---|---|---|---|---|---|"], 0
    def first_seen(claim, cell):
        held = {(c, key[-1]) for scoring in claim.strides for key in [found.locate(cell, scoring)[0]]
                for c in found.found.get(key, {})}  # key[-1]: the cell's length
        return min([first[c] for c, _ in held if c in first] + [seen[h] for h in held if h in seen], default=None)

    for claim in claims:
        # The comparison could first be made when both of its cells had a row: a claim on a new arm against a
        # baseline scored long before is declared before its data if it precedes the new arm's first row.
        # A cell with values but no dated row (a floor of the prompts) was known all along; one with no value at
        # all has no data yet, so neither has the comparison.
        valued = [any(found.found.get(found.locate(cell, scoring)[0]) for scoring in claim.strides)
                  for cell in (claim.a, claim.b)]
        sides = [first_seen(claim, cell) for cell in (claim.a, claim.b)]
        earliest = max((side for side in sides if side), default=None) if all(valued) else None
        declared = date(claim.declared) if claim.declared else None
        after = bool(declared and earliest and declared > earliest[0])
        # Declared post hoc where the audit would allow "before" (the rule once counted a baseline's earlier rows):
        # conservative, kept (a claim never moves into the primary family after its data); the other way is wrong.
        conservative = claim.after_data and not after and earliest is not None
        agrees = after == claim.after_data or earliest is None or conservative
        wrong += not agrees
        said = ("post hoc as declared (conservative)" if conservative else "the same" if agrees
                else f"after_data={claim.after_data}: wrong")
        lines_.append(f"| {claim.text} | {claim.declared or '-'} | {declared or '-'} | {earliest[1] if earliest else '-'} | "
                      f"{earliest[0] if earliest else '-'} | {'yes' if after else 'no'} | {said} |")
    later = {entry for claim in claims for entry in claim.scorings_declared if entry[0] in claim.strides}
    for scoring, commit, after_data in sorted(later):
        if experiment_first:
            after = date(commit) > experiment_first[0]
            wrong += after != after_data
            lines_.append(f"| (the scoring {scoring}) | {commit} | {date(commit)} | {experiment_first[1]} | "
                          f"{experiment_first[0]} | {'yes' if after else 'no'} | "
                          f"{'the same' if after == after_data else 'wrong'} |")
    return "\n".join(lines_) + "\n", wrong
