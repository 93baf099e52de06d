"""The paper's checkpoint layout converts into the plugin (through scripts/eval.sh and two processes
training as one: tests/end_to_end/test_scripts.py)."""
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, TINY, TOY, run
from reference import naive_model

pytestmark = pytest.mark.slow


def load(path):
    from fairseq import checkpoint_utils
    import fairseq_alibi.plugin  # noqa: F401  (the plugin's models)

    models, _ = checkpoint_utils.load_model_ensemble([str(path)])
    return models[0].eval()


def test_converted_fork_checkpoint_is_alibi_with_the_same_weights(fork_checkpoint, tmp_path):
    converted = tmp_path / "converted.pt"
    out = run(["python", "-m", "fairseq_alibi.commands.convert_checkpoint", fork_checkpoint, converted])
    assert "wrote" in out
    stock = load(fork_checkpoint)  # what stock fairseq silently does: a sinusoidal model
    alibi = load(converted)
    assert alibi.decoder.embed_positions is None and stock.decoder.embed_positions is not None
    tokens = torch.randint(4, 1000, (2, 40))
    with torch.no_grad():
        got = alibi(tokens, features_only=True)[0]
        expected = naive_model(stock, tokens, features_only=True)  # the paper's equation, same weights
        sinusoidal = stock(tokens, features_only=True)[0]
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert (got - sinusoidal).abs().max() > 0.1  # loading without conversion is silently wrong


@pytest.mark.parametrize("case,message", [
    ("translation", "is an encoder-decoder checkpoint: only causal language models"),
    ("stock", "pass --replace-positions"),
])
def test_conversion_refuses_what_it_cannot_convert(fork_checkpoint, tmp_path, case, message):
    state = torch.load(fork_checkpoint, map_location="cpu", weights_only=False)
    if case == "translation":
        state["cfg"]["task"]["_name"] = "translation"
    else:
        del state["cfg"]["model"]["max_tokens"]
    torch.save(state, tmp_path / "in.pt")
    proc = subprocess.run(["python", "-m", "fairseq_alibi.commands.convert_checkpoint", tmp_path / "in.pt", tmp_path / "out.pt"],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in proc.stderr
    assert not (tmp_path / "out.pt").exists()


# The last commit before the position interface (issue 21): its checkpoints must load unchanged.
PREVIOUS_DESIGN = "0cb0917"
PREVIOUS_RUNS = {
    "alibi": ["--arch", "alibi_transformer_lm_small", "--task", "language_modeling", "--criterion", "adaptive_loss",
              "--ddp-backend", "legacy_ddp", *TOY[:8]],
    "t5_bias": ["--arch", "t5_bias_transformer_lm_small", "--task", "language_modeling", "--criterion", "adaptive_loss",
                "--ddp-backend", "legacy_ddp", "--t5-num-buckets", "8", "--t5-max-distance", "20", *TOY[:8]],
    "bialibi_mlm": ["--arch", "alibi_roberta_small", "--task", "masked_lm", "--criterion", "masked_lm",
                    "--encoder-alibi", "bialibi", "--encoder-layers", "2"],
}  # LittleBird's BiALiBi is the same module as bialibi's (and was checked by hand: README)
TRAIN_THEN_SCORE = """
import sys, torch
from fairseq_cli import train
from fairseq import checkpoint_utils
save, data, out, *flags = sys.argv[1:]
sys.argv = ["fairseq-train", data, "--save-dir", save, *flags]
train.cli_main()
(model,), _, _ = checkpoint_utils.load_model_ensemble_and_task([save + "/checkpoint_last.pt"], arg_overrides={"data": data})
tokens = torch.randint(4, 500, (2, 90), generator=torch.Generator().manual_seed(0))
tokens[:, 0] = 0
with torch.no_grad():
    torch.save(model.eval()(tokens)[0], out)
"""


def test_checkpoints_of_the_previous_design_load_with_the_same_logits(wt2_slice, tmp_path):
    """Checkpoints written by the code before the position interface (from git history, through
    fairseq-train, the public API) load in today's code and give bit-identical logits."""
    import io
    import os
    import sys
    import tarfile

    from fairseq import checkpoint_utils
    import fairseq_alibi.plugin  # noqa: F401  (the plugin's models)

    archive = subprocess.run(["git", "archive", PREVIOUS_DESIGN, "fairseq_alibi"], cwd=REPO, capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"commit {PREVIOUS_DESIGN} is not in this clone's history (a shallow clone)")
    old = tmp_path / "previous"
    tarfile.open(fileobj=io.BytesIO(archive.stdout)).extractall(old)
    env = dict(os.environ, PYTHONPATH=str(old))
    tokens = torch.randint(4, 500, (2, 90), generator=torch.Generator().manual_seed(0))
    tokens[:, 0] = 0
    for name, flags in PREVIOUS_RUNS.items():
        save, out = tmp_path / name, tmp_path / f"{name}.logits.pt"
        run([sys.executable, "-c", TRAIN_THEN_SCORE, save, wt2_slice, out, "--user-dir", old / "fairseq_alibi",
             "--cpu", "--max-update", "2", "--max-tokens", "512", "--tokens-per-sample", "32", "--optimizer", "adam",
             "--lr", "0.001", "--no-progress-bar", "--dropout", "0", *flags], env=env, cwd=tmp_path)
        (model,), _, _ = checkpoint_utils.load_model_ensemble_and_task([str(save / "checkpoint_last.pt")],
                                                                      arg_overrides={"data": wt2_slice})
        with torch.no_grad():
            logits = model.eval()(tokens)[0]
        assert torch.equal(logits, torch.load(out)), name


# The last commit before the position-method registry (positions.py one file, one *_lm.py per method).
BEFORE_REGISTRY = "4dbb2f1"
SAVE_WITH_THAT_CODE = r"""
import sys, torch
import fairseq_alibi  # that code registers its models on import
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf
assert fairseq_alibi.__file__.startswith(sys.argv[1]), fairseq_alibi.__file__
data, out = sys.argv[2], sys.argv[3]
for name, flags in [line.split(" ", 1) for line in sys.argv[4:]]:
    args = options.parse_args_and_arch(options.get_training_parser(), [data, "--task", "language_modeling", *flags.split()])
    cfg = convert_namespace_to_omegaconf(args)
    torch.manual_seed(0)
    model = tasks.setup_task(cfg.task).build_model(cfg.model).eval()
    with torch.no_grad():
        for p in model.decoder.positions.parameters():
            p.mul_(1.3)  # learned position parameters away from their initial values
    tokens = torch.randint(4, 200, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(tokens)[0]
    torch.save({"cfg": OmegaConf.to_container(cfg), "model": model.state_dict(), "args": None, "extra_state": {},
                "optimizer_history": [{"num_updates": 0, "criterion_name": "CrossEntropyCriterion",
                                       "optimizer_name": "AdamOptimizer", "lr_scheduler_state": {}}]},
               f"{out}/{name}.pt")
    torch.save({"tokens": tokens, "logits": logits}, f"{out}/{name}.logits")
"""


@pytest.mark.slow
def test_checkpoints_of_the_code_before_the_registry_load_with_the_same_logits(wt2_slice, tmp_path):
    """Every causal model, its options and kernel flags, saved by the code before positions/ (that
    commit's package, in a process of its own) and loaded by fairseq's checkpoint_utils with
    today's plugin: the same logits, bit for bit."""
    if subprocess.run(["git", "-C", REPO, "cat-file", "-e", f"{BEFORE_REGISTRY}^{{commit}}"]).returncode:
        pytest.skip(f"this clone lacks commit {BEFORE_REGISTRY}")
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(["git", "-C", REPO, "archive", BEFORE_REGISTRY, "fairseq_alibi"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
    tiny = " ".join(TINY)
    models = {"alibi": "--arch alibi_transformer_lm --alibi-attention sdpa", "rotary": "--arch rotary_transformer_lm",
              "t5_bias": "--arch t5_bias_transformer_lm --t5-num-buckets 8 --t5-max-distance 20",
              "nope": "--arch nope_transformer_lm", "kerple_power": "--arch kerple_transformer_lm --kerple-variant power",
              "sandwich": "--arch sandwich_transformer_lm", "fire": "--arch fire_transformer_lm --fire-init-threshold 8",
              "alibi_small": "--arch alibi_transformer_lm_small --adaptive-input-cutoff 20,40 "
                             "--adaptive-softmax-cutoff 20,40 --decoder-layers 2"}
    lines = [f"{name} {flags} {tiny if 'small' not in name else ''}" for name, flags in models.items()]
    run([sys.executable, "-c", SAVE_WITH_THAT_CODE, str(old), wt2_slice, str(tmp_path), *lines],
        env={**os.environ, "PYTHONPATH": str(old)}, cwd=tmp_path)

    import fairseq_alibi.plugin  # noqa: F401
    from fairseq import checkpoint_utils
    for name in models:
        (model,), _, _ = checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / f"{name}.pt")],
                                                                      arg_overrides={"data": wt2_slice})
        saved = torch.load(tmp_path / f"{name}.logits")
        with torch.no_grad():
            assert torch.equal(model.eval()(saved["tokens"])[0], saved["logits"]), name

