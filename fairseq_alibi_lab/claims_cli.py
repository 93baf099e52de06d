"""The command line of the verdict engine (scripts/claims.py; fairseq_alibi_lab/claims.py's docstring is
its --help): the declared experiment whose claims are judged, the rows it may count, and a comparison
asked for. Apart from claims.py, which the declarations import, so that nothing imports them back."""
import argparse
import dataclasses
import functools
import os

from fairseq_alibi_lab.claims import SEEDS, Claim, RELATION_WORDS, audit, read_perplexities, render
from fairseq_alibi_lab.claims import __doc__ as DESCRIPTION
from fairseq_alibi_lab.experiments import EXPERIMENTS
from fairseq_alibi_lab.experiments.base import paired_by_seed
from fairseq_alibi_lab.result_rows import read_rows
from fairseq_alibi_lab.results import one_line_on_disk_faults, written_whole


def allowed_experiments(name):
    """The experiments whose rows `name`'s verdicts may count: its own, those it shares runs with, and
    the one whose checkpoints it uses."""
    declared = EXPERIMENTS.get(name)
    return {name, *(m.shared[0] for m in declared.models if m.shared), declared.checkpoints} if declared else {name}


def rows_problem(paths, experiment):
    """None, or the one line refusing rows the verdicts must not count: rows of another experiment than
    `experiment` (or the ones whose runs it shares), or a model's rows at more than one number of updates
    (another run, which would count as more seeds)."""
    allowed = allowed_experiments(experiment)
    updates = {}
    for path in paths:
        for row in read_rows(path):
            if row.get("model") == "unigram":
                continue
            if row.get("experiment") not in (None, *allowed):
                other = row["experiment"]
                declares = EXPERIMENTS.get(other) and EXPERIMENTS[other].claims
                return (f"{path} holds rows of the {other} experiment (e.g. {row.get('label')!r}), not {experiment}'s: "
                        + (f"give --experiment {other}, or the rows of {experiment}" if declares
                           else f"{other} declares no claims; give the rows of {experiment}"))
            updates.setdefault(row.get("label"), {}).setdefault(row.get("updates"), path)
    for label, runs in updates.items():
        if len(runs) > 1:
            return (f"rows of {label!r} at {' and '.join(map(str, sorted(runs, key=str)))} updates ({', '.join(sorted(set(runs.values())))}): "
                    "another run's rows would count as more seeds; give the rows of one run")
    return None


def named_experiment(paths, judged):
    """The experiment the rows of `paths` name (the one whose verdicts may count all of them), or one line
    asking for --experiment. judged: the experiments that declare claims."""

    named = {row["experiment"] for path in paths for row in read_rows(path) if row.get("experiment")}
    fits = [name for name in judged if named <= allowed_experiments(name) and name in named]
    if len(fits) == 1:
        return fits[0]
    raise SystemExit(f"error: the rows name {'experiments ' + ', '.join(sorted(named)) if named else 'no experiment'}: "
                     f"give --experiment (one of {', '.join(judged)})")


def cell_name(text):
    """"LABEL@K" -> (LABEL, K), K the multiple of L; one line naming the form otherwise."""
    label, _, multiple = text.rpartition("@")
    if not label or not multiple.isdigit() or int(multiple) < 1:
        raise SystemExit(f"error: --compare takes cells as LABEL@K (K a multiple of L, e.g. 'ALiBi@16'), got {text!r}")
    return label, int(multiple)


def asked(found, args, error):
    """The one claim --compare asks: a comparison not declared before the results (exploratory)."""
    if found.compare_cell is None:
        error("--compare is not offered on these rows: this experiment's comparisons are its declared ones")
    (a, k_a), (b, k_b) = map(cell_name, args.compare)
    cell_a, cell_b = found.compare_cell(a, k_a, args.task), found.compare_cell(b, k_b, args.task)
    labels = sorted({str(key[1]) for key in found.found})  # every cell key: (scoring, label, ...)
    for label, cell in ((a, cell_a), (b, cell_b)):
        if not any(found.locate(cell, scoring)[0] in found.found for scoring in found.scorings):
            error(f"no rows of {label!r} at {cell[-1]}L in {', '.join(args.results)}; its labels: {', '.join(labels)}")
    relation = (args.relation or ("higher" if found.higher_is_better else "lower")).replace("-", " ")
    if relation == "higher" and not found.higher_is_better:
        error("--relation higher compares accuracies; a perplexity is better lower")
    where = f" ({args.task})" if args.task else ""
    return [Claim(f"{a} at {k_a}L {RELATION_WORDS[relation]} {b} at {k_b}L{where}", cell_a, cell_b, relation,
                  found.scorings)]


@one_line_on_disk_faults
def main():
    judged = sorted(name for name, experiment in EXPERIMENTS.items() if experiment.claims)
    p = argparse.ArgumentParser(description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="an experiment's results.jsonl (scripts/experiment.py NAME --out DIR)")
    p.add_argument("--out", help="also write the table here (.md)")
    p.add_argument("--experiment", choices=judged, help="whose declared claims (default: the experiment the rows name)")
    p.add_argument("--compare", nargs=2, metavar=("A@K", "B@K"),
                   help="the numbers and test of these two cells (each scoring) instead of the declared claims")
    p.add_argument("--relation", choices=("lower", "at-most", "higher"),
                   help="with --compare: A's perplexity below B's (default), or A's not above B's; "
                        "A's accuracy above B's (the default on accuracy rows)")
    p.add_argument("--task", help="with --compare on rows of several tasks: the task the cells are on")
    p.add_argument("--machine", help="only the rows scored on a machine whose name holds this (e.g. \"AMD EPYC\"): "
                                     "a machine check, both sides of a comparison on one machine")
    p.add_argument("--audit", action="store_true",
                   help="instead of the table: each claim's declaring commit against the first row of its cells, "
                        "from git history (post hoc where the claim came after), and whether its declaration says the same")
    args = p.parse_args()
    name = args.experiment or named_experiment(args.results, judged)
    experiment = EXPERIMENTS[name]
    if args.machine is not None and experiment.stages.claim_cells:
        p.error(f"--machine picks perplexity rows; {name}'s claims read rows of their own")
    read = experiment.stages.claim_cells or functools.partial(read_perplexities, machine=args.machine)
    found = dataclasses.replace(read(list(args.results)), paired=functools.partial(paired_by_seed, experiment))
    if args.task and not args.compare:
        p.error("--task names the task of --compare's cells: give it with --compare")
    claims = asked(found, args, p.error) if args.compare else experiment.claims
    problem = rows_problem(found.read, name)
    if problem:
        raise SystemExit(f"error: {problem}")
    if args.audit:
        # A cell's first rows count where they were retired since (its checkpoint trained again): a claim
        # declared after they were seen is post hoc, whichever training's rows it is scored on now.
        from fairseq_alibi_lab.result_rows import RETIRED

        retired = [p for p in dict.fromkeys(os.path.join(os.path.dirname(r), RETIRED) for r in args.results)
                   if os.path.isfile(p)]
        report, wrong = audit(found, claims, found.read, retired=retired)
        print(report, end="")
        raise SystemExit(1 if wrong else 0)
    text = render(found, claims, experiment.inclusion.wanted if experiment.inclusion else SEEDS)
    if args.out:
        with written_whole(args.out) as partial, open(partial, "w") as f:
            f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
