"""GPT-2 in and out, strictly: every tensor of the GPT-2 used exactly once (a tied and an untied
output layer each give HF's logits), a config that is not its weights' refused in one line, and the
exported folder's tokenizer encodes text to the ids the fairseq model reads (word-level and
byte-level BPE), so that generate() from a string works."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, snapshot
from gpt2_shapes import save_gpt2, wikitext_lines

pytest.importorskip("transformers")


def refusal(main, *argv):
    """The one line a tool's main refuses argv with (in this process: anything but a SystemExit with
    a message, a traceback, fails the test)."""
    with pytest.raises(SystemExit) as refused:
        main(list(map(str, argv)))
    message = str(refused.value.code)
    assert refused.value.code not in (0, None) and len(message.strip().splitlines()) == 1, message
    return message


def import_tool(*argv):
    from fairseq_alibi.hf.import_gpt2 import main

    return refusal(main, *argv)


def test_what_is_not_the_weights_config_or_tokenizer_is_refused_in_one_line(tmp_path):
    """Each folder below once imported with random weights filled in, a wrong head or a traceback."""
    from transformers import BloomConfig, BloomForCausalLM

    base = tmp_path / "base"
    save_gpt2(base, tie=True)

    def variant(name, edit):
        folder = tmp_path / name
        folder.mkdir()
        for f in os.listdir(base):
            (folder / f).write_bytes((base / f).read_bytes())
        edit(folder)
        return folder

    def config_edit(**changes):
        def edit(folder):
            config = json.loads((folder / "config.json").read_text())
            config.update(changes)
            (folder / "config.json").write_text(json.dumps(config))
        return edit

    bloom = tmp_path / "bloom-weights"
    BloomForCausalLM(BloomConfig(vocab_size=300, hidden_size=32, n_layer=2, n_head=4)).save_pretrained(bloom)
    (bloom / "config.json").write_text((base / "config.json").read_text())  # another architecture's weights
    weights = base / "model.safetensors"
    cases = {
        "more layers": (variant("deeper", config_edit(n_layer=3)), "lacks weights its config.json asks for"),
        "another model's weights": (bloom, "its config.json is not its weights'"),
        "truncated weights": (variant("cut", lambda f: (f / "model.safetensors").write_bytes(weights.read_bytes()[:5000])),
                              "its weights do not load"),
        "no end of text": (variant("noeos", config_edit(eos_token_id=None)), "eos_token_id None"),
        "end of text out of range": (variant("bigeos", config_edit(eos_token_id=5000)), "eos_token_id 5000"),
        "a tokenizer of another size": (variant("bigtok", config_edit(vocab_size=200)), "other shapes"),
        "a tokenizer that is not JSON": (variant("badtok", lambda f: (f / "tokenizer.json").write_text("{")),
                                         "is not a tokenizers JSON file"),
    }
    for why, (folder, message) in cases.items():
        before = snapshot(tmp_path)
        assert message in import_tool(folder, tmp_path / f"out-{folder.name}"), why
        assert snapshot(tmp_path) == before and not (tmp_path / f"out-{folder.name}").exists(), why


def test_a_tokenizer_larger_than_the_weights_is_refused(tmp_path):
    """The weights fit their config, the tokenizer gives ids past them: another model's tokenizer."""
    from transformers import GPT2Config, GPT2LMHeadModel

    save_gpt2(tmp_path / "hf", tie=True)
    GPT2LMHeadModel(GPT2Config(vocab_size=200, n_positions=64, n_embd=32, n_layer=2, n_head=4, eos_token_id=0,
                               bos_token_id=0)).save_pretrained(tmp_path / "hf")
    assert "the tokenizer is another model's" in import_tool(tmp_path / "hf", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def fairseq_ids(hub, text):
    """What fairseq's pipeline gives a text: each line encoded (BPE if the model has one) and ended by </s>."""
    return torch.cat([hub.encode(line) for line in text.split("\n")]).tolist()


@pytest.mark.slow
def test_a_bpe_gpt2_imported_given_alibi_and_exported_reads_text(tmp_path):
    """The seed's loop: import, convert_checkpoint --replace-positions, export. The exported tokenizer
    encodes text to the ids fairseq reads it as (the BPE of the import, each line ended by </s>), and
    generate() from a string gives what the fairseq model does greedily."""
    from fairseq.models.transformer_lm import TransformerLanguageModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fairseq_alibi.hf.export import export
    from fairseq_alibi.hf.import_gpt2 import HF_TOKENIZER, import_gpt2

    save_gpt2(tmp_path / "hf", tie=True)
    import_gpt2(str(tmp_path / "hf"), str(tmp_path / "imported"))
    assert sorted(os.listdir(tmp_path / "imported" / HF_TOKENIZER)) == ["tokenizer.json", "tokenizer_config.json"]
    subprocess.run([sys.executable, "-m", "fairseq_alibi.commands.convert_checkpoint", "--replace-positions",
                    str(tmp_path / "imported" / "checkpoint.pt"), str(tmp_path / "alibi" / "alibi.pt")],
                   check=True, capture_output=True, cwd=REPO)
    assert (tmp_path / "alibi" / "vocab.json").is_file()  # kept beside it with dict.txt
    export(str(tmp_path / "alibi" / "alibi.pt"), str(tmp_path / "out"))
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    text = "".join(wikitext_lines(12)[1:12])
    hub = TransformerLanguageModel.from_pretrained(str(tmp_path / "imported"), "checkpoint.pt")  # its BPE
    expected = fairseq_ids(hub, text)
    assert tokenizer(text)["input_ids"] == expected[:-1]  # the text's last line break is its last </s>
    assert 3 not in expected[:-1]  # no word read as <unk>

    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "out", trust_remote_code=True).eval()
    from fairseq_alibi.models.build import load_checkpoint

    model, _, _ = load_checkpoint(str(tmp_path / "alibi" / "alibi.pt"), str(tmp_path / "alibi"))
    prompt = tokenizer("\n = Valkyria Chronicles", return_tensors="pt")  # fairseq's context starts with </s>
    assert prompt["input_ids"][0, 0] == 2
    with torch.no_grad():
        generated = hf.generate(**prompt, max_new_tokens=6, do_sample=False)
        tokens = prompt["input_ids"]
        for _ in range(6):
            tokens = torch.cat([tokens, model(tokens)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert generated[0].tolist() == tokens[0].tolist()
    assert tokenizer.decode(generated[0]).startswith("</s> = Valkyria Chronicles")


def test_a_bpe_dictionary_without_its_bpe_files_is_refused_in_one_line(tmp_path):
    from fairseq_alibi.hf.import_gpt2 import import_gpt2

    save_gpt2(tmp_path / "hf", tie=True)
    import_gpt2(str(tmp_path / "hf"), str(tmp_path / "imported"))
    for name in ("vocab.json", "merges.txt"):
        os.remove(tmp_path / "imported" / name)
    from fairseq_alibi.hf.export import main

    checkpoint = tmp_path / "imported" / "checkpoint.pt"
    assert "--tokenizer" in refusal(main, checkpoint, tmp_path / "out") and not (tmp_path / "out").exists()
    # that folder has tokenizer.json, not the BPE files
    assert "--tokenizer" in refusal(main, checkpoint, tmp_path / "out", "--tokenizer", tmp_path / "imported" / "hf-tokenizer")


def test_a_word_level_gpt2_exported_reads_text_as_fairseq_does(tmp_path):
    from fairseq.data import Dictionary
    from fairseq.models.transformer_lm import TransformerLanguageModel
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from fairseq_alibi.hf.export import export
    from fairseq_alibi.hf.import_gpt2 import import_gpt2
    from fairseq_alibi.hf.tokenizer import word_level_tokenizer

    lines = wikitext_lines(60)
    dictionary = Dictionary()
    for line in lines[:30]:
        for word in line.split():
            dictionary.add_symbol(word)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(dictionary), n_positions=32, n_embd=32, n_layer=2, n_head=4,
                               eos_token_id=2, bos_token_id=2, pad_token_id=1)).save_pretrained(tmp_path / "hf")
    word_level_tokenizer(dictionary).save_pretrained(tmp_path / "hf")
    import_gpt2(str(tmp_path / "hf"), str(tmp_path / "imported"))
    export(str(tmp_path / "imported" / "checkpoint.pt"), str(tmp_path / "out"))
    hub = TransformerLanguageModel.from_pretrained(str(tmp_path / "imported"), "checkpoint.pt")
    text = "".join(lines)
    assert AutoTokenizer.from_pretrained(tmp_path / "out")(text)["input_ids"] == fairseq_ids(hub, text)[:-1]
