"""Build a model from fairseq command-line flags, as fairseq-train does (tests, benchmarks)."""
import types


def build_model(arch, vocab_size, flags=(), task="language_modeling"):
    """An untrained `arch` over a dictionary of `vocab_size` words (plus fairseq's 4 specials),
    parsed as for `task` (language_modeling, masked_lm, translation: one dictionary for both sides)."""
    from fairseq import models, options
    from fairseq.data import Dictionary
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    from . import plugin  # noqa: F401  (the plugin's architectures)

    dictionary = Dictionary()
    for i in range(vocab_size):
        dictionary.add_symbol(f"w{i}")
    parser = options.get_training_parser()
    argv = ["/dev/null", "--task", task, "--arch", arch, *flags]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return models.build_model(cfg.model, task), dictionary


def load_checkpoint(path, data, kind=None):
    """(model in eval mode, cfg, task) of a fairseq checkpoint, its task's data at `data`; a file
    that is not one, one trained on another dictionary than data's, or (kind: a recipes.KINDS
    value) one of another kind, stops with one line naming it and the tool that takes it (the
    evaluation scripts)."""
    import pickle

    import torch
    from fairseq import checkpoint_utils

    from . import plugin  # noqa: F401  (the plugin's models)

    from .dictionaries import check
    from .recipes import wrong_kind

    if kind:
        try:
            state = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
            other = wrong_kind(state, path, kind)
        except Exception as error:  # noqa: BLE001  (unpickling errors have many types)
            other = f"{path} could not be loaded as a fairseq checkpoint ({type(error).__name__})"
        if other:
            raise SystemExit(f"error: {other}")
    other_dictionary = check(path, data)
    if other_dictionary:
        raise SystemExit(f"error: {other_dictionary}")

    try:
        (model,), cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data})
    except (RuntimeError, KeyError, EOFError, ValueError, OSError, pickle.UnpicklingError) as error:
        first_line = str(error).splitlines()[0] if str(error) else ""
        raise SystemExit(f"error: {path} could not be loaded as a fairseq checkpoint with its data at "
                         f"{data} ({type(error).__name__}: {first_line})")
    return model.eval(), cfg, task
