"""The hydra configs (configs/*.yaml, for fairseq-hydra-train) are the paper's recipe as
scripts/train.sh runs it (fairseq_alibi_lab/recipes.py's wiki103 on 8 GPUs): each YAML, turned into
command-line flags and parsed by fairseq's own parser, gives the same configuration, field for
field and default for default, as train.sh's flags."""
import os

import pytest
from omegaconf import OmegaConf

from conftest import REPO
from fairseq_alibi_lab import train
from fairseq_alibi_lab.recipes import recipe

# What only the YAML or only train.sh sets, and why it may differ.
NOT_COMPARED = {
    ("common", "user_dir"),  # relative in the YAML, absolute from train.sh
    ("common", "log_format"), ("common", "log_interval"), ("common", "tensorboard_logdir"),
    ("checkpoint", "save_dir"), ("task", "data"),  # the user's
    ("model", "_name"),  # the YAML names the model and spells out the _wiki103 architecture's values
    # BASE layers' shuffle, unused without --base-layers (0 here): the _wiki103 architecture function
    # sets 0, the dataclass default that the YAML's model starts from is 1.
    ("model", "base_shuffle"),
}
# train.sh's own flags besides the recipe (scripts/train.sh's exec line), on a GPU machine.
TRAIN_SH = [*train.TRAINING, "--fp16"]


# A section's _name is the flag of that choice.
NAMED = {"model": "arch", "lr_scheduler": "lr-scheduler"}


def yaml_flags(path):
    """The YAML's settings as fairseq-train flags (lists: their items; booleans: the flag or nothing)."""
    config = OmegaConf.to_container(OmegaConf.load(path))
    config.pop("hydra", None)
    flags = []
    for section, values in config.items():
        for name, value in values.items():
            if value == "???" or (section, name) == ("common", "user_dir"):  # the user's; the plugin is loaded here
                continue
            flag = "--" + (NAMED.get(section, section) if name == "_name" else name.replace("_", "-"))
            if value is True:
                flags.append(flag)
            elif value is not False:
                flags += [flag, *map(str, value if isinstance(value, list) else [value])]
    return flags


def parsed(flags):
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_alibi.plugin  # noqa: F401

    args = options.parse_args_and_arch(options.get_training_parser(), ["/dev/null", *flags])
    return OmegaConf.to_container(convert_namespace_to_omegaconf(args))


@pytest.mark.parametrize("name,arch", [("wiki103_alibi", "alibi_transformer_lm_wiki103"),
                                       ("wiki103_sinusoidal", "transformer_lm_wiki103")])
def test_each_hydra_config_is_the_recipe_train_sh_runs(name, arch):
    length = 512
    from_yaml = parsed(yaml_flags(os.path.join(REPO, "configs", f"{name}.yaml")))
    from_recipe = parsed(["--arch", arch, *recipe("wiki103", length, 8), *TRAIN_SH, "--tokens-per-sample", str(length)])
    differ = [(section, field, from_yaml[section][field], from_recipe[section][field])
              for section in ("common", "checkpoint", "task", "dataset", "distributed_training", "criterion",
                              "optimization", "optimizer", "lr_scheduler", "model")
              for field in from_recipe[section] or {}
              if (section, field) not in NOT_COMPARED and from_yaml[section][field] != from_recipe[section][field]]
    assert not differ


def test_every_name_in_the_slowest_first_order_is_a_test():
    """conftest.SLOW_FIRST orders the suite for its 20 minutes: a renamed test silently drops out of it."""
    import glob
    import re

    from conftest import SLOW_FIRST

    names = [name for path in glob.glob(os.path.join(os.path.dirname(os.path.dirname(__file__)), "*", "test_*.py"))
             for name in re.findall(r"^def (test_\w+)", open(path).read(), re.M)]
    assert [prefix for prefix in SLOW_FIRST if not any(name.startswith(prefix) for name in names)] == []
