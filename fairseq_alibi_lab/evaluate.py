"""scripts/eval.sh's worker (its header is the usage): check the arguments and a checkpoint, then
score it at every (L_valid, stride, scaling) in one process.

    python3 scripts/evaluate.py CHECKPOINT DATA OUT.jsonl "L_VALID..." ["STRIDE..."] [-- fairseq-eval-lm flags]
    (the environment's SPLIT, LABEL, SCALING, SCALING_FACTOR and ROW_FIELDS as eval.sh takes them, or
    the options --split, --label, --scaling, --scaling-factor and --fields before the --)

Before fairseq is imported, this checks the arguments (command_line) and reads what was trained
from the checkpoint's own config (model, training length, updates, seed), and refuses, in one
line, what cannot be scored: another dictionary, another kind of checkpoint, a fork checkpoint, a
scaling the model does not take, --model-overrides (a Python dict, merged into each evaluation's
overrides, winning) naming a field the config lacks, an OUT it cannot append to. Each evaluation is fairseq-eval-lm's own
(fairseq_cli.eval_lm.main, which returns the loss and perplexity); doing them in one process saves
a Python, torch and fairseq start-up per length. One JSON line per evaluation is appended to OUT
and printed, with the code's commit, the machine and the fields of $ROW_FIELDS (a JSON object).

From Python, score(scorings, data) checks several checkpoints (Scoring: each with its own OUT,
label, lengths, strides and scalings) before scoring any, then scores them all in one process
(fairseq_alibi_lab/experiments/conversion/recovery.py: a run's kept checkpoints on the recovery curve).
"""
import ast
import contextlib
import dataclasses
import difflib
import io
import json
import logging
import math
import os
import sys
import tempfile
import time
import traceback
import types

here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from fairseq_alibi.tools import checkpoints, dictionaries, files, provenance  # noqa: E402  (results rows, stride rules; no fairseq)
from fairseq_alibi_lab import recipes, result_rows  # noqa: E402
from fairseq_alibi_lab.processes import duration  # noqa: E402
from fairseq_alibi.kernels import AUTO_RULES  # noqa: E402  (pure torch)
from fairseq_alibi.length_temperature import TEST_TIME  # noqa: E402  (pure torch)
from fairseq_alibi.methods import SCALINGS  # noqa: E402  (the registry's; no fairseq import)
from fairseq_alibi.positions import METHODS  # noqa: E402  (pure torch)
from fairseq_alibi.models.factory import PER_QUERY_SLOPE_KERNELS, chosen_kernel  # noqa: E402  (pure torch)


def fail(message):
    sys.exit(f"error: {message}")


def trained(checkpoint, user_overrides):
    """(model name, training length, whether its config has the method's scaling fields, updates,
    seed, user overrides, the length its learned positions end at or None, its attention kernel) from the checkpoint's
    config; user_overrides (a dict's text) checked against it."""
    try:
        state = checkpoints.read_state(checkpoint)
    except checkpoints.NotACheckpoint:
        fail(f"{checkpoint} is not a fairseq checkpoint")
    other = checkpoints.wrong_kind(state, checkpoint, "causal LM")  # a masked LM, a translation model
    if other:
        fail(other)
    if state.get("cfg") is None and state.get("args") is not None:  # fairseq's argparse-era layout, as fairseq reads it
        from fairseq_alibi.commands.convert_checkpoint import with_config

        state = with_config(state)
    try:
        cfg, history = state["cfg"], state.get("optimizer_history") or [{}]
        model = cfg["model"]
    except Exception:
        fail(f"{checkpoint} is not a fairseq checkpoint")
    try:
        overrides = ast.literal_eval(user_overrides)
        assert isinstance(overrides, dict)
    except Exception:
        fail(f"--model-overrides {user_overrides} is not a Python dict, e.g. \"{{'alibi_attention': 'sdpa'}}\"")
    for key in overrides:
        if key not in model:
            close = difflib.get_close_matches(key, model.keys(), n=1)
            fail(f"--model-overrides names {key!r}, which {checkpoint}'s model config lacks, so fairseq "
                 "would ignore it" + (f": did you mean {close[0]!r}?" if close else ""))
    # The paper's fork saves ALiBi models as transformer_lm: scored as they are, they are sinusoidal.
    if "max_tokens" in model:
        fail(f"{checkpoint} is a checkpoint of the paper's fork, which fairseq would score as sinusoidal: convert "
             f"it first with python -m fairseq_alibi.commands.convert_checkpoint {checkpoint} NEW.pt")
    name = model["_name"]
    method = name.split("_transformer_lm")[0]
    seed = (cfg.get("common") or {}).get("seed")
    positions_end = checkpoints.learned_positions_end(state)  # a GPT-2 imported: no row past its table
    # the plugin's kernel (or auto's rule); a stock fairseq model has none
    kernel = chosen_kernel(types.SimpleNamespace(**model))[0] if {"attention_kernel", "alibi_attention"} & set(model) else None
    has_scaling = (f"{method}_scaling" in model, "length_temperature" in model)  # the method's, the temperature's
    return (name, int(cfg["task"]["tokens_per_sample"]), has_scaling,
            history[-1].get("num_updates", -1), seed, overrides, positions_end, kernel)


def check_scalings(checkpoint, name, has_method_scaling, scalings, has_temperature=False):
    """Each SCALING one the model takes and its config can be told (fairseq ignores overrides of fields a
    config lacks): the method's slopes or angles (has_method_scaling: its config has their fields), or a
    length temperature at test time (has_temperature)."""
    method = name.split("_transformer_lm")[0]
    for scaling in scalings:
        if scaling == "none":
            continue
        if scaling in TEST_TIME:  # a length temperature at test time: any of the plugin's causal methods
            if method not in METHODS:
                fail(f"SCALING={scaling} applies to the plugin's causal models, {checkpoint} is {name}")
            if not has_temperature:  # fairseq silently ignores --model-overrides of fields a config lacks
                fix = (f"add it with python -m fairseq_alibi.commands.convert_checkpoint {checkpoint} NEW.pt" if method == "alibi"
                       else "retrain it with this version")
                fail(f"{checkpoint} predates the length temperature (no length_temperature in its config): {fix}")
            continue
        if method not in SCALINGS:
            fail(f"SCALING applies to ALiBi and rotary checkpoints, {checkpoint} is {name}")
        if scaling not in SCALINGS[method]:
            fail(f"SCALING={scaling}: {'ALiBi' if method == 'alibi' else 'rotary'} takes {', '.join(SCALINGS[method][:-1])} "
                 f"or {SCALINGS[method][-1]}")
        if not has_method_scaling:  # fairseq silently ignores --model-overrides of fields a config lacks
            if method == "alibi":
                fail(f"{checkpoint} predates ALiBi scaling: add it with python -m fairseq_alibi.commands.convert_checkpoint "
                     f"{checkpoint} NEW.pt")
            fail(f"{checkpoint} predates rotary scaling (no rotary_scaling in its config): retrain it with this version")


def scaling_overrides(method, scaling, train_length, factor, kernel):
    """The --model-overrides that score a model of `method` (its kernel `kernel`) with `scaling` past its
    training length: its slopes' or angles' scaling by `factor`, or a length temperature at test time; on sdpa
    where the model's kernel does not take what the scaling makes (per-query slopes, a per-query bias scale)."""
    if scaling in TEST_TIME:
        overrides = {"length_temperature": "logn", "length_temperature_form": TEST_TIME[scaling],
                     "length_temperature_length": train_length}
        if TEST_TIME[scaling] == "logit" and kernel not in (*AUTO_RULES, "sdpa", "separable"):
            overrides["attention_kernel"] = "sdpa"  # a kernel that scales each query's bias
        return overrides
    overrides = {f"{method}_scaling": scaling, f"{method}_scaling_factor": factor, f"{method}_train_length": train_length}
    if scaling == "dynamic_ntk" and kernel not in PER_QUERY_SLOPE_KERNELS:
        overrides["attention_kernel"] = "sdpa"
    return overrides


def plan(name, train_length, lengths, strides, scalings, scaling_factor, positions_end=None, kernel="auto"):
    """(jobs, skipped): one job per (scaling, L_valid, stride): L_valid, stride, its rule, the context
    window, the scaling, its factor and the model overrides it takes; and why any was left out
    (positions_end: a learned position table's length, past which nothing is scored). A scaling whose
    per-query slopes the model's kernel does not take (dynamic NTK on the separable kernel) is scored on sdpa."""
    method = name.split("_transformer_lm")[0]
    jobs, skipped = [], []
    for scaling in scalings:
        for l_valid in lengths:
            if positions_end and l_valid > positions_end:
                skipped.append(f"L_valid {l_valid} is past the {positions_end} positions the model learned "
                               "(learned positions have no row beyond them)")
                continue
            # Without SCALING_FACTOR a scaling's factor is 1 up to the training length: the model unscaled.
            if scaling != "none" and not scaling_factor and l_valid <= train_length:
                skipped.append(f"SCALING={scaling} applies past the training length {train_length} only "
                               "(give a longer L_valid, or SCALING_FACTOR)")
                continue
            for rule in strides:  # a number, or /K for L_valid / K
                stride, stride_rule = result_rows.stride(rule, l_valid)
                context = 0 if stride == 0 else l_valid - stride
                if context < 0:
                    skipped.append(f"stride {stride} > L_valid {l_valid}")
                    continue
                factor = 1.0
                if scaling == "none" and name.startswith("transformer_lm") and not positions_end:
                    # Stock position-embedding models refuse lengths past their training length unless told.
                    overrides = {"max_target_positions": 1000000}
                elif scaling == "none":
                    overrides = {}
                else:
                    if scaling not in TEST_TIME:  # a temperature's factor is its own: max(1, ln n / ln L)
                        default = 1.0 if scaling == "dynamic_ntk" else max(1.0, l_valid / train_length)
                        factor = float(scaling_factor) if scaling_factor else default
                    overrides = scaling_overrides(method, scaling, train_length, factor, kernel)
                jobs.append((l_valid, stride, stride_rule, context, scaling, factor, overrides))
    return jobs, list(dict.fromkeys(skipped))


# fairseq-eval-lm's --softmax-batch: the output layer's log-probabilities (positions x the whole
# vocabulary, which the adaptive softmax allocates and zero-fills) for this many positions at a time.
# Measured with a WikiText-2 model at L_valid 64, stride 1: the same perplexity to the last bit, and
# about twice the tokens/s of one allocation per batch (my guess at why: 17 MB are reused, where 4 GB
# are fetched from the system and faulted in again every batch).
SOFTMAX_BATCH = 128


def batch_tokens(l_valid, context):
    """fairseq-eval-lm's --max-tokens: it counts a block's new tokens (l_valid - context) only, and
    each block runs l_valid positions, whose output (positions x vocabulary) is the memory; so a batch
    runs 16,384 positions nonoverlapping and 32,768 sliding at any stride (the same batches as
    before stride 1 was scored: at stride 1 a cap of 16,384 new tokens would run 16,384 x L_valid
    positions, 140 GB of log-probabilities at L_valid 64 on WikiText-2's 33k words)."""
    new = l_valid - context
    return max(new, min(max(l_valid, 16384), 32768 * new // l_valid))


@dataclasses.dataclass
class Scoring:
    """One checkpoint to score: at each L_valid x stride x scaling, rows appended to out."""
    checkpoint: str
    out: str
    lengths: tuple
    label: str = ""
    strides: tuple = ("0",)
    scalings: tuple = ("none",)
    scaling_factor: str = ""  # "" for each scaling's default
    user_overrides: str = "{}"  # a Python dict's text
    show: bool = True  # print each row as well as appending it


def score(scorings, data, split="valid", extra=(), resume=False, fields=None):
    """Check every scoring (before anything is appended anywhere), then score them all in one process.
    With resume, a measurement already in its output file (result_rows.row_key) is not made again.
    fields: added to every row. Returns how many measurements were made."""
    fields = fields or {}
    problem = result_rows.measured_problem(fields, "ROW_FIELDS")
    if problem:
        raise SystemExit(problem)
    rows = {out: result_rows.read_rows(out) if resume else [] for out in dict.fromkeys(s.out for s in scorings)}
    done = {out: result_rows.Measured(out_rows) for out, out_rows in rows.items()}
    planned = []
    for s in scorings:
        name, train_length, has_scaling, updates, seed, user, positions_end, kernel = trained(s.checkpoint, s.user_overrides)
        problem = dictionaries.check(s.checkpoint, data)  # after the kind: that says more
        if problem:
            fail(problem)
        identity = {"checkpoint_sha256": files.fingerprint(s.checkpoint), "data_sha256": files.data_fingerprint(data, split)}
        problem = result_rows.identity_problem(rows[s.out], s.checkpoint, identity, s.out)
        if problem:
            fail(problem)
        overrides = result_rows.overrides_text(user)
        check_scalings(s.checkpoint, name, has_scaling[0], s.scalings, has_scaling[1])
        jobs, skipped = plan(name, train_length, s.lengths, s.strides, s.scalings, s.scaling_factor, positions_end, kernel)
        if not jobs:
            fail(f"nothing to score for {s.checkpoint}: {'; '.join(skipped)}")
        for why in skipped:
            print(f"skipping: {why}", file=sys.stderr)
        jobs = [job for job in jobs  # job: L_valid, stride, its rule, context, scaling, ...
                if result_rows.measurement(s.label, s.checkpoint, updates, job[0], job[2], job[4], split, overrides)
                not in done[s.out]]
        if jobs:
            planned.append((jobs, s.checkpoint, s.out, s.label, name, train_length, updates, seed, user, s.show,
                            dict(identity, model_overrides=overrides, attention_kernel=kernel)))
    for out in done:  # every checkpoint checked: now the files
        result_rows.require_appendable(out)
    if planned:
        evaluate(planned, data, split, list(extra), fields)
    return sum(len(jobs) for jobs, *_ in planned)


USAGE = 'usage: scripts/eval.sh CHECKPOINT DATA OUT.jsonl "L_VALID..." ["STRIDE..."] [-- flags]'
# Options in place of eval.sh's environment variables (what `python -m fairseq_alibi_lab.evaluate`
# callers pass: the runner); one given wins over its variable, and over the variable's old name.
OPTIONS = {"--split": "SPLIT", "--label": "LABEL", "--scaling": "SCALING", "--scaling-factor": "SCALING_FACTOR",
           "--fields": "ROW_FIELDS"}
# Flags this script derives from L_VALID, STRIDE, SPLIT and CHECKPOINT: a user's own would contradict them.
SET_HERE = ("--context-window", "--tokens-per-sample", "--gen-subset", "--path")


def command_line(argv, environ):
    """(the Scoring, DATA, SPLIT, fairseq-eval-lm's extra flags, the row fields) of eval.sh's
    arguments and environment, each checked, in one line naming the fix."""
    argv, given = list(argv), {}
    cut = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:cut], argv[cut:]
    while any(a in OPTIONS for a in head):  # the options a caller passes instead of the environment
        at = next(i for i, a in enumerate(head) if a in OPTIONS)
        if at + 1 >= len(head):
            fail(f"{head[at]} takes a value ({USAGE})")
        given[OPTIONS[head[at]]] = head.pop(at + 1)
        head.pop(at)
    environ = {**environ, **given}
    argv = head + tail
    if len(argv) < 4:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    (checkpoint, data, out, lengths), rest = argv[:4], argv[4:]
    strides = rest.pop(0) if rest and rest[0] != "--" else "0"
    if rest and rest[0] == "--":
        rest.pop(0)
    split = environ.get("SPLIT") or "valid"
    if not os.path.isfile(checkpoint):
        fail(f"no checkpoint at {checkpoint} ({USAGE})")
    if not os.path.isfile(os.path.join(data, "dict.txt")):
        fail(f"{data} has no dict.txt: DATA is a binarized data directory ({USAGE})")
    fields = result_rows.row_fields(environ["ROW_FIELDS"], "ROW_FIELDS") if environ.get("ROW_FIELDS") else {}
    if not os.path.isfile(os.path.join(data, f"{split}.idx")):
        splits = sorted(name[:-len(".idx")] for name in os.listdir(data) if name.endswith(".idx"))
        fail(f"{data} has no {split} split: SPLIT is one of {' '.join(splits)}")
    scalings = (environ["SCALING"] if "SCALING" in given else environ.get("SCALING") or environ.get("ALIBI_SCALING")) or "none"
    factor = (environ["SCALING_FACTOR"] if "SCALING_FACTOR" in given
              else environ.get("SCALING_FACTOR") or environ.get("ALIBI_SCALING_FACTOR")) or ""
    if factor:
        try:
            value = float(factor)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):  # not an assert: python -O would drop the check
            fail(f"SCALING_FACTOR must be a positive number, got '{factor}'")
    if not lengths.split():
        fail(f"give at least one L_valid ({USAGE})")
    for l_valid in lengths.split():
        if not (l_valid.isdigit() and int(l_valid) > 0):
            fail(f"L_valid must be a positive integer, got '{l_valid}'")
    for rule in strides.split():
        if result_rows.stride_problem(rule):
            fail(result_rows.stride_problem(rule))
    # The user's own --model-overrides: checked against the checkpoint's config (trained()), since
    # fairseq silently ignores a key the config lacks, and merged into the ones set here.
    extra, user_overrides = [], "{}"
    while rest:
        flag = rest.pop(0)
        if flag.startswith(SET_HERE):
            fail(f"{flag} is set by this script: give L_VALID, STRIDE (context window = L_valid - stride), SPLIT= "
                 "and CHECKPOINT instead")
        if flag == "--model-overrides" and rest:
            user_overrides = rest.pop(0)
        else:
            extra.append(flag)
    scoring = Scoring(checkpoint, out, [int(x) for x in lengths.split()], environ.get("LABEL", ""), strides.split(),
                      scalings.split(), factor, user_overrides)
    return scoring, data, split, extra, fields


def main(argv=None):
    scoring, data, split, extra, fields = command_line(sys.argv[1:] if argv is None else argv, os.environ)
    score([scoring], data, split, extra, fields=fields)


def evaluate(planned, data, split, extra, fields):
    # fairseq logs (and warns) to the console; keep each evaluation's log for an error message
    # instead. Set up before importing fairseq, whose CLI modules configure logging on import.
    log = io.StringIO()
    logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
    logging.captureWarnings(True)

    from fairseq import options
    from fairseq.data import Dictionary, data_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import eval_lm

    # The models, registered here: fairseq skips --user-dir fairseq_alibi for a package already
    # imported (SCALINGS above imports it, without fairseq).
    import fairseq_alibi.plugin  # noqa: F401

    append_lines = result_rows.append_lines
    recorded = {"commit": provenance.commit(), "machine": provenance.machine(), "eval_flags": " ".join(extra) or None}

    # Tokens scored: every token of the split once, whatever the window (what fairseq counts too).
    dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
    split_data = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary)  # memory-mapped:
    tokens = int(split_data.sizes.sum())  # its sizes live only as long as it does

    longest = max(job[0] for jobs, *_ in planned for job in jobs)
    if longest > tokens:  # fairseq would score the whole split as one shorter block, labelled L_valid
        sys.exit(f"error: L_valid {longest} is longer than the {split} split ({tokens} tokens): nothing recorded; "
                 f"use lengths up to {tokens}")
    # Progress on stderr before each scoring, with the time left from the work done so far: a window's
    # positions run per token scored (L_valid / its new tokens) times a cost growing with L_valid (attention).
    def work(l_valid, context):
        return l_valid / (l_valid - context) * (1 + l_valid / 1024)

    total = sum(work(job[0], job[3]) for jobs, *_ in planned for job in jobs)
    done_work, started, count, number = 0.0, time.time(), sum(len(jobs) for jobs, *_ in planned), 0
    for jobs, checkpoint, out, label, model_name, train_length, updates, seed, user_overrides, show, identity in planned:
        for l_valid, stride, stride_rule, context, scaling, factor, overrides in jobs:
            number += 1
            spent = time.time() - started
            left = f", about {duration(spent / done_work * (total - done_work))} left" if done_work and spent > 5 else ""
            print(f"scoring {label or model_name} at L_valid {l_valid}, stride {stride_rule}"
                  f"{'' if scaling == 'none' else ', ' + scaling} ({number}/{count}, {duration(spent)} so far{left})",
                  file=sys.stderr, flush=True)
            done_work += work(l_valid, context)
            # The row records the kernel (or auto's rule) it was scored with: the checkpoint's, or an override's.
            kernel = {**overrides, **user_overrides}.get("attention_kernel", identity["attention_kernel"])
            overrides = str({**overrides, **user_overrides})
            log.seek(0)
            log.truncate()
            parser = options.get_eval_lm_parser()
            with contextlib.redirect_stderr(log):  # argparse's usage text: one line is enough
                try:
                    args = options.parse_args_and_arch(parser, [
                        data, "--user-dir", os.path.join(here, "fairseq_alibi"), "--path", checkpoint,
                        "--gen-subset", split, "--tokens-per-sample", str(l_valid), "--context-window", str(context),
                        "--max-tokens", str(batch_tokens(l_valid, context)), "--model-overrides", overrides,
                        "--softmax-batch", str(SOFTMAX_BATCH), *recipes.IN_THE_MAIN_THREAD, "--no-progress-bar", *extra])
                except SystemExit:
                    sys.exit(f"error: fairseq-eval-lm {log.getvalue().strip().splitlines()[-1].split(': error: ')[-1]}")
            start = time.perf_counter()
            try:
                result = eval_lm.main(convert_namespace_to_omegaconf(args))
            except SystemExit as e:  # the plugin's one-line configuration errors (base.ConfigError)
                sys.exit(f"error: {e.code}" if isinstance(e.code, str) else e.code)
            except Exception as e:  # noqa: BLE001  (whatever fairseq raises: one line, the rest in a file)
                traceback.print_exc(file=log)
                with tempfile.NamedTemporaryFile("w", suffix=".log", prefix="eval-lm.", delete=False) as saved:
                    saved.write(log.getvalue())
                sys.exit(f"error: fairseq-eval-lm failed on {checkpoint} at L_valid {l_valid}: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''} "
                         f"(full log: {saved.name})")
            seconds = time.perf_counter() - start
            loss, perplexity = float(result["loss"]), float(result["perplexity"])
            if not math.isfinite(perplexity):
                sys.exit(f"error: perplexity {perplexity} for {checkpoint}: its weights hold NaN or inf "
                         "(a diverged run?); nothing recorded")
            row = json.dumps({
                "checkpoint": checkpoint, "label": label or None, "model": model_name, "train_length": train_length,
                "updates": updates, "split": split, "l_valid": l_valid, "stride": stride,
                "stride_rule": stride_rule, "scaling": scaling, "scaling_factor": factor if scaling != "none" else None,
                "loss_base2": loss, "perplexity": perplexity, "tokens": tokens, "seconds": round(seconds, 2),
                "tokens_per_s": tokens / seconds, "seed": seed, **recorded, **identity, "attention_kernel": kernel, **fields,
            })
            append_lines(out, [row])
            if show:
                print(row, flush=True)


if __name__ == "__main__":
    main()
