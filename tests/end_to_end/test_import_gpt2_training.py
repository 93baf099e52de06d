"""An imported GPT-2 (shaped like a trained one, tests/gpt2_shapes.py) continued through the lab's
scripts/train.sh keeps the symbols it never predicts."""
import subprocess

import pytest
import torch

from conftest import REPO, run
from gpt2_shapes import fairseq_index, negative_gpt2, wikitext_lines

pytest.importorskip("transformers")


@pytest.mark.slow
def test_the_imported_gpt2_continues_with_its_masked_symbols_through_train_sh(tmp_path):
    """scripts/train.sh learned ... gpt2_small with the import's --masked-output-symbols continues it as
    gpt2_transformer_lm (the masked symbols kept); without them it is refused in one line."""
    from fairseq_alibi.models.build import load_checkpoint

    variant, gpt2, encode, _, imported = negative_gpt2(variant="bpe_tied", out=tmp_path / "gpt2")
    symbols = ["<s>", "<pad>", "</s>", "<unk>", *open(imported / "dict.txt").read().split()[::2]]
    index = fairseq_index(variant, gpt2)
    text = [" ".join(symbols[index[i]] for i in encode(line)) for line in wikitext_lines()[:80] if line.strip()]
    for split in ("train", "valid"):
        (tmp_path / f"{split}.txt").write_text("\n".join(text) + "\n")
    run(["fairseq-preprocess", "--only-source", "--srcdict", str(imported / "dict.txt"), "--trainpref",
         str(tmp_path / "train.txt"), "--validpref", str(tmp_path / "valid.txt"), "--destdir", str(tmp_path / "bin"),
         "--workers", "1"])
    toy = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-input-dim", "32", "--decoder-output-dim", "32",
           "--decoder-ffn-embed-dim", "128", "--decoder-attention-heads", "4", "--max-update", "2", "--max-tokens", "128",
           "--disable-validation", "--finetune-from-model", str(imported / "checkpoint.pt")]
    command = ["scripts/train.sh", "learned", "64", str(tmp_path / "bin"), str(tmp_path / "refused"), "gpt2_small", "--", *toy]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert refused.returncode != 0 and "--masked-output-symbols 0,1,3,4" in refused.stderr.strip().splitlines()[-1]
    command[4] = str(tmp_path / "continued")
    run([*command, "--masked-output-symbols", "0,1,3,4"], cwd=REPO)
    model, cfg, _ = load_checkpoint(str(tmp_path / "continued" / "checkpoint_last.pt"), str(tmp_path / "bin"))
    assert cfg.model._name == "gpt2_transformer_lm" and cfg.model.masked_output_symbols == "0,1,3,4"
    with torch.no_grad():
        log_probs = model.get_normalized_probs(model(index[torch.randint(0, gpt2.config.vocab_size, (1, 64))]),
                                               log_probs=True)[0]
    torch.testing.assert_close(log_probs[:, index].exp().sum(-1), torch.ones(64))
