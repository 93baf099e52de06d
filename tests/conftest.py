import os
import types

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "fairseq_alibi")
WIKITEXT2 = os.environ.get("WIKITEXT2_DIR", os.path.join(REPO, "..", "shared", "data", "wikitext-2"))


def build_model(arch="alibi_transformer_lm", vocab=50, extra=()):
    """An untrained model built through fairseq's own argument parsing, as fairseq-train does."""
    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq import models
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    dictionary = Dictionary()
    for i in range(vocab):
        dictionary.add_symbol(f"w{i}")
    parser = options.get_training_parser()
    argv = ["/dev/null", "--task", "language_modeling", "--arch", arch, "--user-dir", USER_DIR, *extra]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    model = models.build_model(cfg.model, task)
    return model.eval(), dictionary


# A tiny pre-norm model with a plain (tied) output projection, for exact comparisons.
TINY = [
    "--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-input-dim", "32",
    "--decoder-output-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-normalize-before",
    "--share-decoder-input-output-embed",
]


@pytest.fixture
def tiny_model():
    torch.manual_seed(0)
    return build_model(extra=TINY)[0]


def random_tokens(dictionary_size, batch, length, seed=0):
    g = torch.Generator().manual_seed(seed)
    # fairseq's Dictionary has 4 special symbols first; sample real words only
    return torch.randint(4, dictionary_size, (batch, length), generator=g)
