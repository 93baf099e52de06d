"""`pip install ".[hf]"` in a fresh virtual environment, as a user does it without scripts/setup.sh: fairseq
pulls the newest torchaudio, built for another torch, which the tools once refused (transformers 5
does not import it for what they use). The installed tools import a GPT-2, export it back and load it
in transformers; lm-eval's backend answers --help. About a minute and a half with pip's cache warm
(make test's set-up fills it)."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, run

pytestmark = pytest.mark.install  # make test-install (CI runs it after make test)

TORCH = "torch==2.13.0"  # scripts/setup.sh's pin: another spec may pull a multi-GB CUDA build


def test_pip_install_hf_extra_in_a_fresh_venv_runs_the_hugging_face_tools(tmp_path):
    source = tmp_path / "source"  # the tracked files: a build in the repository would leave build/ there
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    for name in filter(None, files.split("\0")):
        if os.path.isfile(os.path.join(REPO, name)):
            os.makedirs(source / os.path.dirname(name), exist_ok=True)
            shutil.copy2(os.path.join(REPO, name), source / name)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, TORCH])
    run([*pip, f"{source}[hf]"], cwd=tmp_path)
    python, env = str(venv / "bin" / "python"), {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = run([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"], env=env, cwd=tmp_path)
    assert installed.strip().startswith("2.13.0")
    # a tiny GPT-2 with a byte-level BPE, saved as save_pretrained saves it
    run([python, "-c", "\n".join([
        "from tokenizers import ByteLevelBPETokenizer",
        "from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast",
        "bpe = ByteLevelBPETokenizer()",
        "bpe.train_from_iterator(['the game was released in japan in 2010 . ' * 40], vocab_size=280, min_frequency=1,",
        "                        special_tokens=['<|endoftext|>'])",
        "t = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token='<|endoftext|>', bos_token='<|endoftext|>')",
        "c = GPT2Config(vocab_size=len(t), n_positions=32, n_embd=16, n_layer=1, n_head=2, eos_token_id=t.eos_token_id)",
        "GPT2LMHeadModel(c).save_pretrained('hf'); t.save_pretrained('hf')"])], env=env, cwd=tmp_path)
    bin_dir = venv / "bin"
    run([str(bin_dir / "fairseq-alibi-import-hf"), "hf", "imported"], env=env, cwd=tmp_path)
    run([str(bin_dir / "fairseq-alibi-export-hf"), "imported/checkpoint.pt", "exported"], env=env, cwd=tmp_path)
    loaded = run([python, "-c", "\n".join([
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "m = AutoModelForCausalLM.from_pretrained('exported', trust_remote_code=True)",
        "t = AutoTokenizer.from_pretrained('exported', trust_remote_code=True)",
        "print('logits', tuple(m(t('the game was released', return_tensors='pt').input_ids).logits.shape))"])],
                 env=env, cwd=tmp_path)
    shape = next(line for line in loaded.splitlines() if line.startswith("logits "))
    assert shape.endswith(", 284)"), shape  # the GPT-2's 280 ids and fairseq's 4 specials
    assert "--model_args checkpoint=CKPT" in run([str(bin_dir / "fairseq-alibi-lm-eval"), "--help"], env=env, cwd=tmp_path)
