"""fairseq's command-line tools with this plugin loaded, from any directory:
fairseq-alibi-train, fairseq-alibi-eval-lm, fairseq-alibi-generate and fairseq-alibi-interactive
take exactly the flags of fairseq-train, fairseq-eval-lm, ... and add `--user-dir` pointing at the
installed package (fairseq resolves a relative --user-dir against the current directory only).
"""
import os
import sys

from fairseq_alibi.tools import dictionaries

# The plugin package (fairseq_alibi/, above commands/): what --user-dir names and checkpoints record.
PLUGIN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def with_plugin(argv):
    """argv with --user-dir PLUGIN_DIR after the program name, unless one is given."""
    if any(a == "--user-dir" or a.startswith("--user-dir=") for a in argv[1:]):
        return argv
    return [argv[0], "--user-dir", PLUGIN_DIR, *argv[1:]]


def _run(module):
    import importlib

    sys.argv = with_plugin(sys.argv)
    tool = importlib.import_module(f"fairseq_cli.{module}")
    # fairseq skips a --user-dir whose package is imported already (this one is: cli.py is in it).
    from fairseq_alibi import plugin  # noqa: F401
    tool.cli_main()


# A training that starts from a trained checkpoint (fine-tunes and continues it) may take an inference-only
# option: YaRN's recipe fine-tunes with the scaling on, and the model is scored with it ever after.
CONTINUING = ("--finetune-from-model", "--continue-once", "--continue-from", "--restore-file")


def inference_only_flag(argv):
    """The first option of argv that only evaluation may set (methods.INFERENCE_ONLY), or None; none for a
    training that continues a checkpoint (CONTINUING)."""
    from fairseq_alibi.methods import INFERENCE_ONLY

    if any(a.split("=")[0] in CONTINUING for a in argv):
        return None
    flags = {flag for method_flags in INFERENCE_ONLY.values() for flag in method_flags}
    return next((a.split("=")[0] for a in argv if a.split("=")[0] in flags), None)


def refuse_common_mistakes(tool):
    """Exit with one line on a mistake fairseq would answer with a traceback (mistakes.py)."""
    import torch

    from fairseq_alibi.commands.mistakes import common_mistake

    mistake = common_mistake(tool, sys.argv[1:], torch.cuda.device_count())
    if mistake:
        sys.exit(f"fairseq-alibi-{tool.replace('_', '-')}: {mistake}")


def train():
    flag = inference_only_flag(sys.argv[1:])
    if flag:  # a model trained with scaled slopes or angles, then scored as if it had none
        sys.exit(f"fairseq-alibi-train: {flag} is for evaluation (scripts/eval.sh SCALING=, or "
                 "--model-overrides), not training: drop it")
    refuse_common_mistakes("train")
    data, save_dir = training_directories(with_plugin(sys.argv)[1:])
    # As scripts/train.sh: the data's dictionary kept beside the checkpoints and recorded in each,
    # so that scoring or fine-tuning on another corpus's dictionary is refused (dictionaries.py).
    if data and save_dir:
        os.makedirs(save_dir, exist_ok=True)
        problem = dictionaries.keep(data, save_dir)
        if problem:
            sys.exit(f"fairseq-alibi-train: {problem}")
    _run("train")
    if data and save_dir and os.path.isdir(save_dir):
        problem = dictionaries.record(save_dir, data)
        if problem:
            sys.exit(f"fairseq-alibi-train: {problem}")


def training_directories(argv):
    """(the first data directory, the save directory) fairseq-train would use with argv; (None, None)
    where fairseq's parser refuses argv (it then says why itself)."""
    from fairseq import options

    from fairseq_alibi import plugin  # noqa: F401  (the plugin's architectures, for the parser)

    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # fairseq-train's own parse says it, once
            args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
    except SystemExit:
        return None, None
    data = (getattr(args, "data", None) or "").split(os.pathsep)[0]
    return (data if os.path.isfile(os.path.join(data, "dict.txt")) else None), getattr(args, "save_dir", None)


def eval_lm():
    """fairseq-eval-lm, after checking that each --path is a causal LM (fairseq would crash on a
    masked LM or a translation model with a traceback)."""
    from fairseq_alibi.tools.checkpoints import NotACheckpoint, read_state, wrong_kind

    argv = sys.argv[1:]
    paths = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--path"] + [a[7:] for a in argv if a.startswith("--path=")]
    for path in (p for joined in paths for p in joined.split(os.pathsep)):
        if os.path.isfile(path):  # a missing one: fairseq's own message
            try:
                other = wrong_kind(read_state(path), path, "causal LM")
            except NotACheckpoint as error:
                other = str(error)
            if other:
                sys.exit(f"fairseq-alibi-eval-lm: {other}")
    refuse_common_mistakes("eval_lm")
    _run("eval_lm")


def generate():
    _run("generate")


def interactive():
    _run("interactive")
