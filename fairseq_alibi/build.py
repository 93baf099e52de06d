"""Build a model from fairseq command-line flags, as fairseq-train does (tests, benchmarks)."""
import types


def build_model(arch, vocab_size, flags=(), task="language_modeling"):
    """An untrained `arch` over a dictionary of `vocab_size` words (plus fairseq's 4 specials),
    parsed as for `task` (language_modeling, masked_lm, translation: one dictionary for both sides)."""
    from fairseq import models, options
    from fairseq.data import Dictionary
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    dictionary = Dictionary()
    for i in range(vocab_size):
        dictionary.add_symbol(f"w{i}")
    parser = options.get_training_parser()
    argv = ["/dev/null", "--task", task, "--arch", arch, *flags]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    return models.build_model(cfg.model, task), dictionary
