"""scripts/eval.sh's worker: score one checkpoint at several (L_valid, stride) in one process.

    python3 scripts/evaluate.py CHECKPOINT DATA OUT.jsonl SPLIT LABEL MODEL TRAIN_LENGTH UPDATES SEED \
        USER_OVERRIDES < JOBS [-- fairseq-eval-lm flags]

MODEL, TRAIN_LENGTH, UPDATES, SEED ("-": unknown): what eval.sh read from the checkpoint, recorded
with each result, with the code's commit, the machine and the fields of $ROW_FIELDS (a JSON object).
JOBS: one line per evaluation, tab-separated: L_valid, stride, stride rule, context window,
scaling, scaling factor, the script's model overrides (a Python dict); USER_OVERRIDES (a dict, checked
by eval.sh) are merged into each job's and win. eval.sh has checked everything.
Each evaluation is fairseq-eval-lm's own (fairseq_cli.eval_lm.main, which returns the loss and
perplexity); doing them in one process saves a Python, torch and fairseq start-up per length.
One JSON line per evaluation is appended to OUT and printed.
"""
import ast
import contextlib
import io
import json
import logging
import math
import os
import runpy
import sys
import tempfile
import time
import traceback


# fairseq logs (and warns) to the console; keep each evaluation's log for an error message instead.
# Set up before importing fairseq, whose CLI modules configure logging on import.
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s | %(levelname)s | %(name)s | %(message)s")
logging.captureWarnings(True)

from fairseq import options  # noqa: E402
from fairseq.data import Dictionary, data_utils  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402
from fairseq_cli import eval_lm  # noqa: E402

here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
argv = sys.argv[1:]
extra = argv[argv.index("--") + 1 :] if "--" in argv else []
checkpoint, data, out, split, label, model_name, train_length, updates, seed, user_overrides = argv[:10]
provenance = runpy.run_path(os.path.join(here, "fairseq_alibi", "provenance.py"))
append_lines = runpy.run_path(os.path.join(here, "fairseq_alibi", "files.py"))["append_lines"]
recorded = {"seed": None if seed == "-" else int(seed), "commit": provenance["commit"](),
            "machine": provenance["machine"](), **json.loads(os.environ.get("ROW_FIELDS") or "{}")}

# Tokens scored: every token of the split once, whatever the window (what fairseq counts too).
dictionary = Dictionary.load(os.path.join(data, "dict.txt"))
split_data = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary)  # memory-mapped:
tokens = int(split_data.sizes.sum())  # its sizes live only as long as it does

jobs = [line.rstrip("\n").split("\t") for line in sys.stdin]
longest = max(int(job[0]) for job in jobs)
if longest > tokens:  # fairseq would score the whole split as one shorter block, labelled L_valid
    sys.exit(f"error: L_valid {longest} is longer than the {split} split ({tokens} tokens): nothing recorded; "
             f"use lengths up to {tokens}")
for l_valid, stride, stride_rule, context, scaling, factor, overrides in jobs:
    overrides = str({**ast.literal_eval(overrides), **ast.literal_eval(user_overrides)})
    log.seek(0)
    log.truncate()
    parser = options.get_eval_lm_parser()
    with contextlib.redirect_stderr(log):  # argparse's usage text: one line is enough
        try:
            args = options.parse_args_and_arch(parser, [
                data, "--user-dir", os.path.join(here, "fairseq_alibi"), "--path", checkpoint,
                "--gen-subset", split, "--tokens-per-sample", l_valid, "--context-window", context,
                "--max-tokens", str(max(int(l_valid), 16384)), "--model-overrides", overrides,
                "--num-workers", "0", "--no-progress-bar", *extra])
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
        "checkpoint": checkpoint, "label": label or None, "model": model_name, "train_length": int(train_length),
        "updates": int(updates), "split": split, "l_valid": int(l_valid), "stride": int(stride),
        "stride_rule": stride_rule, "scaling": scaling, "scaling_factor": float(factor) if scaling != "none" else None,
        "loss_base2": loss, "perplexity": perplexity, "tokens": tokens, "seconds": round(seconds, 2),
        "tokens_per_s": tokens / seconds, **recorded,
    })
    append_lines(out, [row])
    print(row, flush=True)
