"""The lab's result rows: JSON lines appended whole and read back, what one measurement is (the key
a row is found by), the fields a caller may add and what identifies the checkpoint and data a row
measured. Plain Python (no fairseq or torch)."""
import json
import math
import os


# What a scorer writes into a result row itself (what it measured, of what, where): fields a caller
# adds (row_fields) may not replace them.
MEASURED_FIELDS = frozenset((
    "accuracy", "attention_kernel", "blocks", "cache", "changed", "checkpoint", "checkpoint_sha256", "chunk", "commit",
    "correct", "data_sha256", "depth", "eval_flags", "first_accuracy", "first_correct", "first_token", "head",
    "keys_held", "l_valid", "label", "layer", "length", "loss",
    "loss_base2", "machine", "mask_prob", "mask_seed", "masked_tokens", "max_distance", "min_distance", "mixture_sha256",
    "model", "model_overrides", "n", "nothing", "perplexity", "perplexity_blocks", "perplexity_by_position", "perplexity_stride_1",
    "perplexity_stride_half", "prompts_sha256", "queries", "scaling", "scaling_factor", "scoring", "seconds", "seed", "sinks",
    "split", "stride", "stride_rule", "task", "threads", "tokens", "tokens_per_s", "train_length",
    "updates", "wall_s", "window"))


def measured_problem(fields, name="--fields"):
    """None, or the one line refusing fields that would replace what a row measures."""
    replaced = sorted(set(fields) & MEASURED_FIELDS)
    if replaced:
        return (f"error: {name} may add fields to the rows, not replace what they measure: drop "
                f"{', '.join(replaced)}")
    return None


def add_scorer_arguments(parser):
    """What a lab scorer the runner starts takes (stream_eval, attention_sinks.measure, eval_mlm): the checkpoint,
    its data, the JSON-lines file its rows are appended to, the split, the rows' label and the runner's fields."""
    parser.add_argument("checkpoint")
    parser.add_argument("data", help="the binarized data directory (its dict.txt is the checkpoint's)")
    parser.add_argument("out", help="a JSON-lines file the rows are appended to")
    parser.add_argument("--split", default="valid")
    add_row_arguments(parser)


def add_row_arguments(parser, label_required=False):
    """The rows' label and the runner's fields (row_fields reads them), as every lab scorer takes them."""
    if label_required:
        parser.add_argument("--label", required=True, help="the rows' name in tables")
    else:
        parser.add_argument("--label", default="", help="the rows' name in tables (default: the model)")
    parser.add_argument("--fields", default="{}", help="a JSON object of fields added to each row (the runner's)")


def row_fields(text, name="--fields"):
    """The fields a caller adds to every result row (the experiment runner's experiment and recipe):
    a JSON object of fields no scorer measures, else exit with one line naming `name`."""
    import json

    try:
        fields = json.loads(text)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        raise SystemExit(f"error: {name} must be a JSON object, e.g. '{{\"experiment\": \"mine\"}}', got '{text}'")
    if measured_problem(fields, name):
        raise SystemExit(measured_problem(fields, name))
    return fields


def append_problem(path):
    """None if result lines could be appended to path, else why not; creates nothing (a refused
    run leaves no empty OUT behind). A disk that fills later is append_lines' to report."""
    if not path.endswith(".jsonl"):  # rows are JSON lines: a .txt or .csv OUT is a mistaken argument
        return f"{path} is not a .jsonl file, where result rows are appended"
    if os.path.isdir(path):
        return f"{path} is a directory"
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else f"{path} is read-only"
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):  # append_lines creates the missing directories
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created ({parent} is not a writable directory)"
    return None


def require_appendable(path):
    """Exit with one line unless result lines could be appended to path (append_problem): called
    before scoring, so that minutes of work never end in a refused write."""
    problem = append_problem(path)
    if problem:
        raise SystemExit(f"error: cannot append to {path} ({problem}): give another OUT")


def append_lines(path, lines):
    """Append result lines (JSON rows) to path (its directory made if missing). If the disk refuses
    (full, read-only), exit with one line that carries the lines themselves: a result that took
    minutes is never lost unseen. A row that measured NaN or an infinity (json writes them bare) is
    refused, nothing appended: a diverged score is an error, never a number in a table."""
    for line in lines:
        not_numbers = [n for n in ("NaN", "Infinity") if n in line and not_a_number(line, n)]
        if not_numbers:
            raise SystemExit(f"error: a score came out {not_numbers[0]} (the model diverged, or a bug): not recorded "
                             f"in {path}: " + line[:300])
        try:
            impossible = value_problem(json.loads(line))
        except ValueError:
            impossible = None  # not a JSON row: written as given
        if impossible:
            raise SystemExit(f"error: {impossible} (a bug): not recorded in {path}: " + line[:300])
    existed = os.path.exists(path)
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a+b") as f:
            # A last line cut short (an interrupted write) is ended first: the new rows stay whole
            # (the cut line is left as it is, skipped by read_rows).
            cut = False
            if f.seek(0, os.SEEK_END):
                f.seek(-1, os.SEEK_END)
                cut = f.read(1) != b"\n"
            f.write((("\n" if cut else "") + "".join(line + "\n" for line in lines)).encode())
    except OSError as e:
        if not existed and os.path.isfile(path) and os.path.getsize(path) == 0:
            os.remove(path)  # ours, and empty: no empty OUT left behind
        raise SystemExit(f"error: could not append to {path} ({e.strerror or e}); the result, to keep by hand: "
                         + " ".join(lines))


def not_a_number(line, name):
    """Whether the JSON line holds the bare constant `name` (NaN, Infinity), not just the text in a string."""
    found = []
    try:
        json.loads(line, parse_constant=found.append)
    except ValueError:
        return False
    return bool(found)


def options_changed(path, options):
    """[(name, recorded, now)] for each of options that differs from the JSON record at path (what a
    data set was made with), [] if none does, None if there is no readable record."""
    try:
        with open(path) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return None
    return [(name, recorded.get(name), value) for name, value in options.items() if recorded.get(name) != value]


# What a measured value can be, by its field's name: (low, high), both included. Any other number must be finite.
POSSIBLE = {"perplexity": (1.0, math.inf), "perplexity_blocks": (1.0, math.inf), "perplexity_stride_1": (1.0, math.inf),
            "perplexity_stride_half": (1.0, math.inf), "loss": (0.0, math.inf), "loss_base2": (0.0, math.inf),
            "accuracy": (0.0, 1.0), "first_accuracy": (0.0, 1.0)}


def value_problem(row):
    """None, or why a row holds a value no measurement gives: NaN or an infinity, a perplexity below 1, a
    loss below 0, an accuracy outside [0, 1], more correct answers than prompts. The one check between a
    row and a table or verdict (read_rows) and before a row is written (append_lines)."""
    if not isinstance(row, dict):
        return None
    for name, value in row.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        low, high = POSSIBLE.get(name, (-math.inf, math.inf))
        if not (math.isfinite(value) and low <= value <= high):
            return f"{name} {value!r} is not a possible measurement" + (f" (it lies in [{low}, {high}])" if name in POSSIBLE else "")
    for correct in ("correct", "first_correct"):
        if isinstance(row.get(correct), int) and isinstance(row.get("n"), int) and not 0 <= row[correct] <= row["n"]:
            return f"{correct} {row[correct]} of n {row['n']} prompts is not a possible count"
    return None


def read_rows(path):
    """The rows of a results file so far; a line cut short by an interrupted write is skipped (it
    is measured again). A row with an impossible value (value_problem: a hand edit, another tool's
    NaN) stops with one line naming it: no table or verdict is computed from it."""
    rows = []
    if os.path.isfile(path):
        with open(path) as f:
            for number, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                problem = value_problem(row)
                if problem:
                    raise SystemExit(f"error: {path} line {number}: {problem}: correct or remove the row")
                rows.append(row)
    return rows


def stride_problem(rule):
    """None if rule is a stride rule (stride()), else the one line that says what one is."""
    if rule.isdigit() or (rule.startswith("/") and rule[1:].isdigit() and int(rule[1:]) > 0):
        return None
    if rule == "/0":
        return "stride /0: /K slides by L_valid / K, K a positive integer"
    return f"stride must be 0, a positive integer or /K (L_valid / K), got '{rule}'"


def stride(rule, l_valid):
    """A stride rule as scripts/eval.sh takes it ("0": nonoverlapping, "S": S tokens, "/K": L_valid/K)
    at L_valid: (the stride in tokens, the rule as results rows name it, "L_valid/K" for "/K")."""
    if rule.startswith("/"):
        return l_valid // int(rule[1:]), f"L_valid{rule}"
    return int(rule), rule


def measurement(label, checkpoint, updates, l_valid, stride_rule, scaling, split, overrides=None):
    """What one measurement is, the key a results row is found by (row_key); overrides: the
    scoring's own --model-overrides (overrides_text)."""
    return (label or None, checkpoint, updates, l_valid, stride_rule, scaling or "none", split, overrides)


def row_key(row):
    return measurement(row.get("label"), row.get("checkpoint"), row.get("updates"), row["l_valid"],
                       row.get("stride_rule"), row.get("scaling"), row["split"], row.get("model_overrides"))


def overrides_text(overrides):
    """A scoring's --model-overrides (a dict, or its text) as rows record it: the dict's items in
    sorted order, None for none."""
    import ast

    if isinstance(overrides, str):
        overrides = ast.literal_eval(overrides) if overrides.strip() else {}
    return repr(dict(sorted(overrides.items()))) if overrides else None


class Measured:
    """The measurements a results file holds, for "is it done?" (`key in measured`, key a
    measurement()). Rows written before scorings recorded their overrides stand for any."""

    def __init__(self, rows):
        self.keys = {row_key(r) for r in rows}
        self.older = {row_key(r)[:-1] for r in rows if "model_overrides" not in r}

    def __contains__(self, key):
        return key in self.keys or key[:-1] in self.older


# What identifies the things a row measured, beyond its measurement's key: the checkpoint file's
# and the data's contents (fingerprint). Rows written before these were recorded carry neither.
# (The runner's rows add the training flags they were trained with: identity_problem reads any.)
IDENTITY = ("checkpoint_sha256", "data_sha256")


def identity_problem(rows, checkpoint, identity, out, retire_hint=""):
    """None if no row of `checkpoint` in `rows` records an identity (IDENTITY fields) other than
    `identity`'s (a field None there, or absent from a row, is not compared), else one line: the
    rows are of another file or other data, and are neither reused nor mixed with new ones."""
    for row in rows:
        if row.get("checkpoint") != checkpoint:
            continue
        for name, now in identity.items():
            if now is not None and row.get(name) not in (None, now):
                what = {"checkpoint_sha256": "scored on another checkpoint file at that path",
                        "data_sha256": "scored on other data", "train_flags": "trained with other --train-flags",
                        "train_data_sha256": "trained on other data"}[name]
                return (f"{out} holds rows of {checkpoint} {what} ({name} {row[name]!r}, now {now!r}): they are "
                        f"not this run's; move them out of {out}, or give another output{retire_hint}")
    return None


def left_out(rows, updates, lengths, name):
    """One line: how many rows a table leaves out, and why (with an example of each)."""
    why = {}
    for r in rows:
        if r.get("model") != "unigram" and r.get("checkpoint") not in updates:
            reason, example = f"of checkpoints {name} does not declare here (another --checkpoints?)", r.get("checkpoint")
        elif r.get("model") != "unigram" and r.get("updates") != updates[r["checkpoint"]]:
            reason, example = "at other updates than declared", r.get("updates")
        else:
            reason, example = "at lengths not declared", r["l_valid"]
        why.setdefault(reason, [0, example])[0] += 1
    return f"left out of the tables: {len(rows)} rows: " + "; ".join(
        f"{n} {reason}, e.g. {example}" for reason, (n, example) in why.items())


def append_new(path, rows):
    """Append to the results file `path` those of `rows` it does not hold yet (row for row)."""
    have = {json.dumps(r, sort_keys=True) for r in read_rows(path)}
    new = [json.dumps(r) for r in rows if json.dumps(r, sort_keys=True) not in have]
    if new:
        append_lines(path, new)


RETIRED = "retired.jsonl"  # under an OUT: rows taken out of its tables, each with why (--retire)


def retire(out, names, checkpoints, why):
    """Move the rows of `checkpoints` (path -> the fingerprint of the file there now, or None where
    none is) from OUT's row files `names` to OUT/retired.jsonl, each with "retired": why (appended
    there first, then each file rewritten whole without them: a stop in between leaves a row in
    both, never in neither). A row scored on the very file at its path now (its checkpoint_sha256)
    stays: it is the new training's, so the command that retired the old rows, run again after a
    stop, continues instead of retiring what it scored. Returns (rows moved, rows kept so)."""
    from fairseq_alibi.tools.files import written_whole

    def of_another_file(r):
        return r.get("checkpoint") in checkpoints and (checkpoints[r["checkpoint"]] is None or
                                                      r.get("checkpoint_sha256") != checkpoints[r["checkpoint"]])

    moved = kept = 0
    for name in names:
        path = os.path.join(out, name)
        rows = read_rows(path)
        kept += sum(r.get("checkpoint") in checkpoints and not of_another_file(r) for r in rows)
        gone = [r for r in rows if of_another_file(r)]
        if not gone:
            continue
        retired = os.path.join(out, RETIRED)
        held = {json.dumps(r, sort_keys=True) for r in read_rows(retired)}
        append_lines(retired, [json.dumps(dict(r, retired=why)) for r in gone
                               if json.dumps(dict(r, retired=why), sort_keys=True) not in held])
        with written_whole(path) as partial, open(partial, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows if not of_another_file(r))
        moved += len(gone)
    return moved, kept


# A row's scoring (what identifies it within its checkpoint's rows) and what it measured, by kind: a
# perplexity row, a retrieval row.
SCORING = {"perplexity": (("split", "l_valid", "stride", "scaling"), ("perplexity",)),
           "retrieval": (("scaling", "task", "length", "depth"), ("correct", "first_correct"))}


def retraining_differences(retired, rows):
    """[(checkpoint, scoring, retired values, new values)] for each retired row whose checkpoint was
    trained again on the same machine (a row of `rows` of the same checkpoint path, machine and
    scoring) and measured otherwise; rows without a replacement are not compared."""
    def index(of):
        found = {}
        for r in of:
            kind = "retrieval" if "task" in r else "perplexity"
            keys, measured = SCORING[kind]
            if r.get("checkpoint") and all(m in r for m in measured):
                found[(r["checkpoint"], r.get("machine"), tuple(r.get(k) for k in keys))] = tuple(r[m] for m in measured)
        return found
    new = index(rows)
    return [(checkpoint, scoring, values, new[(checkpoint, machine, scoring)])
            for (checkpoint, machine, scoring), values in index(retired).items()
            if (checkpoint, machine, scoring) in new and new[(checkpoint, machine, scoring)] != values]


# What a committed model row must record of what it measured (beside results.ROW_IDENTITY): the
# checkpoint file's fingerprint, the scored data's (a retrieval row: its test prompts' and the
# training mixture's) and the runner's --train-flags it was trained with. A row scored before a field
# was recorded, whose checkpoint is not kept, says so instead: "unrecorded" names the fields it cannot
# have and "unrecorded_why" why (mark_unrecorded); a test holds every committed row to this.
UNRECORDED_WHY = ("not recorded when it was scored (the field did not exist yet), and its checkpoint is not kept: "
                  "it cannot be recorded now")


def identity_unrecorded(row):
    """The identity fields a model row lacks (a floor's row: none)."""
    if row.get("model") in ("unigram", "floor"):
        return []
    retrieval = "first_accuracy" in row or "prompts_sha256" in row
    measured = () if "slopes" in row else ("prompts_sha256", "mixture_sha256") if retrieval else ("data_sha256",)  # slopes: read, not scored on data
    needed = ("checkpoint_sha256", *measured, "train_flags")
    return [name for name in needed if row.get(name) is None]


def mark_unrecorded(path, why=UNRECORDED_WHY):
    """Rewrite a committed results file (whole) with each row that lacks identity fields marked: its
    "unrecorded" lists them, "unrecorded_why" says why. Rows already marked, or complete, are kept as
    they are. Returns how many rows were marked."""
    from fairseq_alibi.tools.files import written_whole

    rows, marked = read_rows(path), 0
    for row in rows:
        lacking = identity_unrecorded(row)
        if lacking and "unrecorded" not in row:
            row.update(unrecorded=lacking, unrecorded_why=why)
            marked += 1
    if marked:
        with written_whole(path) as partial, open(partial, "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    return marked
