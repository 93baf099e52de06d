"""Build a model from fairseq command-line flags, as fairseq-train does (tests, benchmarks)."""
import types


def build_model(arch, vocab_size, flags=(), task="language_modeling", hydra=False):
    """An untrained `arch` over a dictionary of `vocab_size` words (plus fairseq's 4 specials),
    parsed as for `task` (language_modeling, masked_lm, translation: one dictionary for both sides).
    hydra: through fairseq-train's own conversion of the arguments to its config (about 0.5 s a model on a
    CPU core); else the parsed arguments themselves, which fairseq's build_model also takes (12x faster:
    the tests build hundreds of models), the same model (tests/library/test_build.py)."""
    from fairseq import models, options
    from fairseq.data import Dictionary
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from fairseq_alibi import plugin  # noqa: F401  (the plugin's architectures)

    dictionary = Dictionary()
    for i in range(vocab_size):
        dictionary.add_symbol(f"w{i}")
    parser = options.get_training_parser()
    argv = ["/dev/null", "--task", task, "--arch", arch, *flags]
    args = options.parse_args_and_arch(parser, argv)
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return models.build_model(convert_namespace_to_omegaconf(args).model if hydra else args, task), dictionary


def load_checkpoint(path, data, kind=None, overrides=None):
    """(model in eval mode, cfg, task) of a fairseq checkpoint, its task's data at `data` (and the
    model options `overrides` sets, as --model-overrides does); a file
    that is not one, one trained on another dictionary than data's, or (kind: a checkpoints.KINDS
    value) one of another kind, stops with one line naming it and the tool that takes it (the
    evaluation scripts)."""
    import pickle

    from fairseq import checkpoint_utils

    from fairseq_alibi import plugin  # noqa: F401  (the plugin's models)
    from fairseq_alibi.tools.checkpoints import NotACheckpoint, read_state, wrong_kind
    from fairseq_alibi.tools.dictionaries import check

    if kind:
        try:
            other = wrong_kind(read_state(path), path, kind)
        except NotACheckpoint as error:
            other = str(error)
        if other:
            raise SystemExit(f"error: {other}")
    other_dictionary = check(path, data)
    if other_dictionary:
        raise SystemExit(f"error: {other_dictionary}")

    try:
        (model,), cfg, task = checkpoint_utils.load_model_ensemble_and_task(
            [path], arg_overrides={"data": data, **(overrides or {})})
    except (RuntimeError, KeyError, EOFError, ValueError, OSError, pickle.UnpicklingError) as error:
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise SystemExit(f"error: {path} could not be loaded as a fairseq checkpoint with its data at "
                         f"{data} ({type(error).__name__}: {first_line})")
    return model.eval(), cfg, task
