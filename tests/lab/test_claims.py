"""The verdict engine (fairseq_alibi_lab/claims.py): the tests written out, the primary family and
Holm's adjustment deciding each verdict, pairing, and claims declared with the experiments they judge."""
import dataclasses
import functools
import glob
import json
import os
import re
import subprocess
import sys

import pytest
from scipy import stats

from conftest import REPO

from fairseq_alibi_lab import claims, results  # noqa: E402
from fairseq_alibi_lab.experiments import EXPERIMENTS, Experiment, Model, register  # noqa: E402
from fairseq_alibi_lab.experiments.base import paired_by_seed  # noqa: E402


def seeds(*values, run="x"):
    return {f"{run}-s{i}": v for i, v in enumerate(values, 1)}


def test_the_tests_written_out():
    """Welch's t for independent runs, a paired t for the same checkpoints and for one seed's arms,
    against their formulas written out; the seeds' spread described beside them."""
    a, b = [200.1, 201.3, 199.8], [205.2, 205.9, 204.1]
    ma, mb = sum(a) / 3, sum(b) / 3
    va, vb = (sum((x - ma) ** 2 for x in a) / 2), (sum((x - mb) ** 2 for x in b) / 2)
    t = (ma - mb) / ((va / 3 + vb / 3) ** 0.5)
    df = (va / 3 + vb / 3) ** 2 / ((va / 3) ** 2 / 2 + (vb / 3) ** 2 / 2)  # Welch-Satterthwaite
    welch = claims.compare(seeds(*a, run="a"), seeds(*b, run="b"))
    assert welch.test == f"Welch t, p = {2 * stats.t.sf(abs(t), df):.2g}" and welch.difference == pytest.approx(ma - mb)
    assert welch.spread == "separated"  # 5.0 apart, stds 0.8 and 0.9
    d = [x - y for x, y in zip(a, b)]
    md = sum(d) / 3
    t = md / ((sum((x - md) ** 2 for x in d) / 2) ** 0.5 / 3 ** 0.5)
    paired = f"p = {2 * stats.t.sf(abs(t), 2):.2g}"
    assert claims.compare(seeds(*a), seeds(*b)).test == f"paired t, {paired}"  # one model at two lengths
    arms = {"a-s1": 1, "a-s2": 2, "a-s3": 3, "b-s1": 1, "b-s2": 2, "b-s3": 3}
    assert claims.compare(seeds(*a, run="a"), seeds(*b, run="b"), arms).test == f"paired t (one seed's arms), {paired}"
    assert claims.compare(seeds(1, 2, 3, run="a"), seeds(3.1, 3.2, 3.3, run="b")).spread == "separated"
    assert claims.compare(seeds(1, 2, 3, run="a"), seeds(2.9, 3.0, 3.1, run="b")).spread == "within the seeds' spread"
    assert claims.compare(seeds(1, 2, run="a"), seeds(1, 2, 3, run="b")).missing.startswith("no verdict (n = 2 and 3")
    adjusted = claims.holm([0.01, 0.04, 0.03, None])  # sorted 0.01, 0.03, 0.04 times 3, 2, 1, kept monotone
    assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06]) and adjusted[3] is None
    assert claims.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def row(label, seed, l_valid, ppl, stride="0", checkpoint=None):
    return {"model": "m", "label": label, "split": "valid", "train_length": 64, "seed": seed,
            "checkpoint": checkpoint or f"{label}-s{seed}", "l_valid": l_valid, "perplexity": ppl, "stride_rule": stride,
            "stride": 0, "scaling": "none"}


def verdicts(text):
    """{claim: (family, Holm p, verdict)} of a rendered table's lines."""
    out = {}
    for line in text.splitlines()[2:]:
        if line.startswith("| "):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            out[cells[0]] = (cells[2], cells[8], cells[9])
    return out


def test_the_corrected_test_decides_and_the_spread_only_describes():
    """A primary verdict is the Holm-corrected test's: "supported" where it is below 0.05 in the claim's
    direction, "refuted" against it, "not shown" where it is not below (a raw p of 0.03 with Holm's
    0.06 included); means apart by more than the seeds' spread decide nothing, and a paired effect
    within the spread is shown; a claim declared after its data is exploratory: no verdict, out of the family."""
    rows = [row("A", s, lv, 100 + s + (0.5 if lv == 1024 else 0)) for s in (1, 2, 3) for lv in (64, 1024)]  # paired 0.5 apart
    rows[1]["perplexity"] += 0.001  # the paired differences spread a little: a test
    rows += [row("B", s, 64, v) for s, v in ((1, 90), (2, 95), (3, 100))]
    rows += [row("C", s, 64, v) for s, v in ((1, 101), (2, 102), (3, 103))]
    rows += [row("D", s, 64, v) for s, v in ((1, 150), (2, 151), (3, 152))]
    claim = claims.Claim
    declared = [
        claim("A at 16L is above A at L (paired, within the spread)", ("A", 16), ("A", 1), "higher", ("0",), declared="abc1234"),
        claim("C below B", ("C", 1), ("B", 1), "lower", ("0",), declared="abc1234"),
        claim("D below C", ("D", 1), ("C", 1), "lower", ("0",), declared="abc1234"),
        claim("C below D, asked after the data", ("C", 1), ("D", 1), "lower", ("0",), declared="abc1234", after_data=True),
    ]
    found = claims.perplexity_rows(results.keyed(rows), ["r.jsonl"])
    table = verdicts(claims.render(found, declared))
    p = {c.text: claims.compare(*[found.found[found.locate(cell, "0")[0]] for cell in (c.a, c.b)]).p for c in declared}
    paired = table["A at 16L is above A at L (paired, within the spread)"]
    assert paired[0] == "primary" and float(paired[1]) < 0.05 and paired[2] == "supported"
    assert table["D below C"][2] == "refuted"  # the test in the other direction
    b_c = table["C below B"]
    assert p["C below B"] > 0.05 and b_c[2] == "not shown"  # the means 6 apart, the spreads 5 and 1: not shown
    assert table["C below D, asked after the data"] == ("exploratory (post hoc)", "", "exploratory (no verdict)")
    # Holm's family is the 3 primary lines: the exploratory one's p is not in it.
    for c, q in zip(declared[:3], claims.holm([p[c.text] for c in declared[:3]])):
        assert table[c.text][1] == f"{q:.2g}"
    # A raw p below 0.05 that Holm lifts above it: not shown.
    assert claims.verdict("lower", claims.Comparison(p=0.03, difference=-1.0), True, 0.06) == "not shown"
    assert claims.verdict("lower", claims.Comparison(p=0.03, difference=-1.0), True, 0.03) == "supported"
    assert claims.verdict("at most", claims.Comparison(p=0.01, difference=2.0), True, 0.02) == "refuted"
    assert claims.verdict("at most", claims.Comparison(p=0.5, difference=0.0), True, 0.5) == "not shown"  # no margin


def test_a_primary_family_with_a_line_still_waiting_for_rows_gives_no_verdict():
    """An experiment in progress: a primary line whose cell has no rows yet (or fewer seeds than the rule) is
    pending, and while one is,
    no primary line gets a Holm p or a verdict (Holm over the lines that have rows would be over a smaller
    family than declared); exploratory lines keep their numbers. With every row in, the verdicts come."""
    rows = [row("C", s, 64, v) for s, v in ((1, 101), (2, 102), (3, 103))]
    rows += [row("D", s, 64, v) for s, v in ((1, 150), (2, 151), (3, 152))]
    declared = [claims.Claim("D below C", ("D", 1), ("C", 1), "lower", ("0",), declared="abc1234"),
                claims.Claim("E below C", ("E", 1), ("C", 1), "lower", ("0",), declared="abc1234"),
                claims.Claim("C below D, exploratory", ("C", 1), ("D", 1), "lower", ("0",), declared="abc1234", primary=False)]
    text = claims.render(claims.perplexity_rows(results.keyed(rows), ["r.jsonl"]), declared)
    table = verdicts(text)
    assert table["D below C"] == ("primary", "", "no verdict (the primary family is incomplete: 1 line pending)")
    assert table["E below C"] == ("primary", "", claims.PENDING)
    assert "| E at 64: no rows yet | C at 64: 102.00 ± 1.00 (n=3) |" in text
    assert table["C below D, exploratory"][2] == "exploratory (no verdict)"
    assert "The primary family is incomplete: 1 line of it still waits for rows" in text
    rows += [row("E", s, 64, v) for s, v in ((1, 160), (2, 161))]  # two of its three seeds: still waiting
    two = verdicts(claims.render(claims.perplexity_rows(results.keyed(rows), ["r.jsonl"]), declared))
    assert two["D below C"][2] == "no verdict (the primary family is incomplete: 1 line pending)"
    rows.append(row("E", 3, 64, 162))
    complete = verdicts(claims.render(claims.perplexity_rows(results.keyed(rows), ["r.jsonl"]), declared))
    assert complete["D below C"][2] == "refuted" and complete["E below C"][2] == "refuted"
    # an experiment that declares more included seeds (an inclusion rule's `wanted`: long-context-recipes' 5,
    # claims_cli passes it) is not tested on its first 3: the family waits
    text = claims.render(claims.perplexity_rows(results.keyed(rows), ["r.jsonl"]), declared, seeds=4)
    assert verdicts(text)["D below C"] == ("primary", "", "no verdict (n = 3 and 3: the rule asks for 4 seeds a side)")
    assert "no line has a Holm p" in text


def test_one_seeds_arms_pair_by_seed_and_independent_runs_do_not():
    """Two models fine-tuned from each seed's prepared checkpoint (Model.start) are paired by seed;
    a model trained from scratch beside them is not."""
    experiment = Experiment("arms", (Model("CE", "alibi", start="converted"), Model("KD", "alibi", start="converted"),
                                     Model("Scratch", "alibi")), multiples=(1,))
    rows = [row(label, s, 64, v + s * 10, checkpoint=f"{label}-s{s}") for label, v in (("CE", 100.2), ("KD", 100.0), ("Scratch", 99))
            for s in (1, 2, 3)]
    rows[0]["perplexity"] += 0.05
    found = dataclasses.replace(claims.perplexity_rows(results.keyed(rows), ["r.jsonl"]),
                                paired=functools.partial(paired_by_seed, experiment))
    text = claims.render(found, [claims.Claim("KD below CE", ("KD", 1), ("CE", 1), "lower", ("0",), declared="abc1234"),
                                 claims.Claim("Scratch below KD", ("Scratch", 1), ("KD", 1), "lower", ("0",), declared="abc1234")])
    kd, scratch = text.splitlines()[2:4]
    assert "| paired t (one seed's arms), p = " in kd and kd.endswith("| supported |")  # 0.2 apart in every seed
    assert "| Welch t, p = " in scratch and scratch.endswith("| not shown |")  # 1 apart, seeds 10 apart


def test_an_experiment_refuses_a_claim_on_cells_it_does_not_score():
    """scale2 is scored to 8L: a claim at 16L is refused when it is declared, not left "not scored"."""
    alibi, fire = Model("ALiBi", "alibi", scalings=("ntk",)), Model("FIRE", "fire")
    at_16l = claims.Claim("FIRE beats ALiBi at 16L", ("FIRE", 16), ("ALiBi", 16), "lower")
    with pytest.raises(ValueError, match=r"names \('FIRE', 16\), a cell it does not score"):
        register("test-refused", Experiment("x", (alibi, fire), multiples=(1, 2, 4, 8), claims=(at_16l,)))
    assert "test-refused" not in EXPERIMENTS
    scaled = claims.Claim("NTK", ("ALiBi + NTK", 8), ("ALiBi + YaRN", 8), "lower")
    with pytest.raises(ValueError, match="ALiBi \\+ YaRN"):
        register("test-refused", Experiment("x", (alibi, fire), multiples=(1, 8), claims=(scaled,)))
    assert {c.a[1] for c in EXPERIMENTS["scale2"].claims} | {c.b[1] for c in EXPERIMENTS["scale2"].claims} <= {1, 2, 4, 8}


def test_the_verdict_engine_names_no_experiment():
    """claims.py is the engine (compare, tests, Holm, render, audit); every experiment's claims are
    declared in its own file."""
    with open(os.path.join(REPO, "fairseq_alibi_lab", "claims.py")) as f:
        source = f.read()
    named = [name for name in EXPERIMENTS if re.search(rf"[\"']{re.escape(name)}[\"']", source)]
    assert not named, f"claims.py names {named}"
    assert sum(len(e.claims) for e in EXPERIMENTS.values()) >= 150


def test_every_committed_verdict_is_the_corrected_tests():
    """Every committed claims.md: no "supported" or "refuted" whose Holm p is 0.05 or more (or missing),
    no exploratory line with a verdict word, no verdict at all in a family with a line still pending."""
    paths = glob.glob(os.path.join(REPO, "examples", "**", "claims.md"), recursive=True)
    assert len(paths) >= 13
    for path in paths:
        with open(path) as f:
            text = f.read()
        pending = claims.PENDING in text
        for name, (family, holm, verdict) in verdicts(text).items():
            assert not (pending and verdict in ("supported", "refuted")), f"{path}: {name}"
            if verdict in ("supported", "refuted"):
                assert family == "primary" and holm and float(holm) < 0.05, f"{path}: {name}"
            if family != "primary":
                assert verdict.startswith(("exploratory", "no verdict")), f"{path}: {name}"


@pytest.mark.slow  # subprocesses: the fast suite stays under 3 minutes
def test_the_rows_name_their_experiment(tmp_path):
    """--experiment defaults to the experiment the rows name; rows naming none ask for it in one line;
    another run of a seed is not another seed."""
    rows = [dict(row(label, s, lv, 100 + s), experiment="comparison") for label in ("FIRE", "ALiBi")
            for s in (1, 2, 3) for lv in (64, 1024)]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    named = subprocess.run([sys.executable, "scripts/claims.py", str(path)], cwd=REPO, capture_output=True, text=True)
    assert named.returncode == 0 and "FIRE extrapolates better than ALiBi" in named.stdout, named.stderr
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "experiment"}) + "\n" for r in rows))
    unnamed = subprocess.run([sys.executable, "scripts/claims.py", str(path)], cwd=REPO, capture_output=True, text=True)
    assert unnamed.returncode != 0 and unnamed.stderr.strip().splitlines() == [
        f"error: the rows name no experiment: give --experiment (one of {', '.join(sorted(n for n, e in EXPERIMENTS.items() if e.claims))})"]
    again = rows + [dict(row("ALiBi", 1, 1024, 99, checkpoint="ALiBi-again-s1"), experiment="comparison")]
    path.write_text("".join(json.dumps(r) + "\n" for r in again))
    answer = subprocess.run([sys.executable, "scripts/claims.py", str(path)], cwd=REPO, capture_output=True, text=True)
    assert answer.returncode != 0 and answer.stderr.strip().splitlines() == [
        "error: the rows hold two runs of ALiBi, seed 1 (ALiBi-s1 and ALiBi-again-s1): a verdict counts one run per seed; "
        "give the rows of one run"], answer.stderr
    # A machine check: the other run on another machine; --machine keeps one machine's rows, and the
    # comparison counts that machine's runs alone.
    machines = [dict(r, machine="CPU A, 2 cores") for r in rows] + [dict(again[-1], machine="CPU B, 2 cores")]
    path.write_text("".join(json.dumps(r) + "\n" for r in machines))
    answer = subprocess.run([sys.executable, "scripts/claims.py", str(path), "--machine", "CPU A", "--compare",
                             "ALiBi@16", "FIRE@16"], cwd=REPO, capture_output=True, text=True)
    assert answer.returncode == 0, answer.stderr
    assert "| ALiBi at 1024: 102.00 ± 1.00 (n=3) |" in answer.stdout and "exploratory" in answer.stdout, answer.stdout
    answer = subprocess.run([sys.executable, "scripts/claims.py", str(path), "--machine", "CPU C"], cwd=REPO,
                            capture_output=True, text=True)
    assert answer.returncode != 0 and answer.stderr.strip().splitlines() == [
        f"error: no rows of {path} were scored on a machine named like 'CPU C'; theirs: CPU A, 2 cores; CPU B, 2 cores"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answer = subprocess.run([sys.executable, "scripts/claims.py", str(path), "--compare", "ALiBi", "FIRE@16"],
                            cwd=REPO, capture_output=True, text=True)
    assert answer.returncode != 0 and "--compare takes cells as LABEL@K" in answer.stderr


def test_claims_on_exact_match_rows():
    """The synthetic tasks' claims: cells (label, task, sizes) of exact match in percent from
    exact_match.py's rows, Welch's test; two runs of one seed refused."""
    from fairseq_alibi_lab.experiments import synthetic

    def accuracy(label, seed, value, n_low=21, n_high=40, run=""):
        return {"label": label, "task": "copy", "n_low": n_low, "n_high": n_high, "accuracy": value, "seed": seed,
                "checkpoint": f"{label}{run}-s{seed}"}

    rows = [accuracy("A", s, a) for s, a in ((1, 0.40), (2, 0.42), (3, 0.44))]
    rows += [accuracy("B", s, a) for s, a in ((1, 0.02), (2, 0.00), (3, 0.04))] + [accuracy("B", 1, 0.99, 1, 20)]
    found, seeds_of = synthetic.accuracy_cells(rows)
    cells = claims.Cells(found, lambda cell, scoring: (cell, f"{cell[0]}, {cell[1]} {cell[2]}"), (), seeds_of)
    text = claims.render(cells, [claims.Claim("A beats B", ("A", "copy", "21-40"), ("B", "copy", "21-40"), "higher",
                                              (synthetic.EXACT_MATCH,), declared="abc1234")])
    line = text.splitlines()[2]
    assert "| exact match (%) | A, copy 21-40: 42.00 ± 2.00 (n=3) | B, copy 21-40: 2.00 ± 2.00 (n=3) |" in line
    assert line.endswith("| separated | Welch t, p = 1.6e-05 | 1.6e-05 | supported |"), line
    with pytest.raises(SystemExit, match="two runs of A, seed 1"):
        synthetic.accuracy_cells(rows + [accuracy("A", 1, 0.5, run="-again")])


def test_the_prose_quotes_only_primary_verdicts_with_their_holm_p():
    """README.md, docs/ and the results READMEs: a verdict word ("supported", "refuted") stands in a
    paragraph or bullet that gives its Holm p, and the old rule's words ("not separated" as a verdict,
    "no difference shown", "the test disagrees") are gone; each results README with a claims.md opens
    with its verdicts within its first 40 lines, before any detail."""
    paths = [os.path.join(REPO, "README.md"), *glob.glob(os.path.join(REPO, "docs", "*.md")),
             *glob.glob(os.path.join(REPO, "examples", "**", "README.md"), recursive=True)]
    unsupported = []
    for path in paths:
        with open(path) as f:
            text = f.read()
        for paragraph in re.split(r"\n\s*\n|\n- |\n  - ", text):
            words = re.findall(r"(?<![\"\w])(supported|refuted)(?![\"\w])", paragraph)
            if words and "Holm" not in paragraph:
                unsupported.append(f"{os.path.relpath(path, REPO)}: {paragraph[:80]!r}")
            for old in ("no difference shown", "the test disagrees"):
                if old in paragraph:
                    unsupported.append(f"{os.path.relpath(path, REPO)}: {old!r}")
        if os.path.exists(os.path.join(os.path.dirname(path), "claims.md")):
            head = "\n".join(text.splitlines()[:40])
            assert re.search(r"\*\*(Primary verdicts?|No primary verdict)\*\*", head), f"{path}: no verdicts in its first 40 lines"
    assert not unsupported, "; ".join(unsupported)
