"""A fairseq dictionary as a Hugging Face tokenizer that gives a text exactly the ids fairseq gives
it, every line break read as fairseq's end-of-line </s> (Dictionary.encode_line ends each line with
it, so a corpus's stream of ids is the text's):
- a word-level dictionary (dict.txt lists words): words split on whitespace (fairseq's
  tokenize_line), each looked up (<unk> where absent);
- a byte-level BPE dictionary (dict.txt lists GPT-2 token ids, as fairseq's GPT-2 dictionaries and an
  imported GPT-2's do): each line through the BPE of vocab.json and merges.txt, as fairseq's
  hf_byte_bpe encodes it, and each BPE id to the dictionary's index of its id string.
A BPE dictionary without its vocab.json and merges.txt is refused: a word-level tokenizer over id
strings would read every text as <unk>."""
import json
import os

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE, WordLevel
from transformers import PreTrainedTokenizerFast

from fairseq_alibi.tools.dictionaries import BPE_FILES



def lists_bpe_ids(dictionary) -> bool:
    """Whether the dictionary's words are BPE ids (decimal strings), not words: most of them, since
    fairseq's GPT-2 dictionary ends with a few made-up words."""
    words = dictionary.symbols[dictionary.nspecial:]
    return bool(words) and sum(w.isdigit() for w in words) >= 0.9 * len(words)


def bpe_folder(directories):
    """The first of the directories holding vocab.json and merges.txt, else None."""
    for directory in directories:
        if directory and all(os.path.isfile(os.path.join(directory, n)) for n in BPE_FILES):
            return directory
    return None


def tokenizer_for(dictionary, directories, kept=()) -> PreTrainedTokenizerFast:
    """The tokenizer of a dictionary: word-level, or BPE with the BPE files of the first of
    `directories` that has them; SystemExit with one line if it lists BPE ids and none has them, or
    if they are another model's (bpe_problem; `kept`: folders whose BPE files, where any, are the dictionary's)."""
    if not lists_bpe_ids(dictionary):
        return word_level_tokenizer(dictionary)
    folder = bpe_folder(directories)
    if folder is None:
        raise SystemExit("its dict.txt lists byte-level BPE ids, and no vocab.json and merges.txt were found beside it "
                         "or the checkpoint: give --tokenizer DIR (the folder fairseq-alibi-import-hf wrote, or the "
                         "GPT-2's own)")
    problem = bpe_problem(dictionary, folder, bpe_folder(kept))
    if problem:
        raise SystemExit(problem)
    return bpe_tokenizer(dictionary, *(os.path.join(folder, n) for n in BPE_FILES))


def bpe_problem(dictionary, folder, own=None):
    """None, or why folder's vocab.json and merges.txt are not the BPE of the dictionary: they differ from
    its own (`own`, the folder kept beside it), or the dictionary lists ids the vocabulary does not have."""
    def read(directory):
        return [open(os.path.join(directory, n), "rb").read() for n in BPE_FILES]

    if own and os.path.abspath(own) != os.path.abspath(folder) and read(own) != read(folder):
        return (f"the BPE files in {folder} are not the ones kept beside its dict.txt ({own}): another model's "
                "tokenizer would map every text to the wrong ids; leave --tokenizer out, or give the model's own")
    with open(os.path.join(folder, "vocab.json"), encoding="utf-8") as f:
        size = len(json.load(f))
    largest = max((int(w) for w in dictionary.symbols[dictionary.nspecial:] if w.isdigit()), default=-1)
    if largest >= size:
        return (f"its dict.txt lists BPE id {largest}, which the {size} tokens of {folder}/vocab.json lack: that "
                "tokenizer is another model's; give the model's own")
    return None


def finished(tokenizer, dictionary, specials) -> PreTrainedTokenizerFast:
    """A line break is </s> (the specials matched after the normalizer has written it)."""
    tokenizer.normalizer = normalizers.Replace("\n", f" {dictionary.eos_word} " if isinstance(tokenizer.model, WordLevel)
                                               else dictionary.eos_word)
    tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=True) for s in specials])
    # No bos_token: a context starts with </s> (lm-eval takes a bos token, where there is one, as the
    # prefix). Each special named here is matched in a text as a whole.
    named = {"unk_token": dictionary.unk_word, "pad_token": dictionary.pad_word, "eos_token": dictionary.eos_word}
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **{k: v for k, v in named.items() if v in specials})


def word_level_tokenizer(dictionary) -> PreTrainedTokenizerFast:
    vocab = {symbol: index for index, symbol in enumerate(dictionary.symbols)}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token=dictionary.unk_word))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return finished(tokenizer, dictionary, [dictionary.bos_word, dictionary.pad_word, dictionary.eos_word, dictionary.unk_word])


def bpe_tokenizer(dictionary, vocab_path, merges_path) -> PreTrainedTokenizerFast:
    """GPT-2's byte-level BPE (no prefix space, as hf_byte_bpe) with each token's id replaced by the
    dictionary's index of that id's string (<unk> for an id the dictionary lacks)."""
    with open(vocab_path, encoding="utf-8") as f:
        bpe_vocab = json.load(f)
    with open(merges_path, encoding="utf-8") as f:
        merges = [tuple(line.split()) for line in f if line.strip() and not line.startswith("#version")]
    vocab = {token: dictionary.indices.get(str(bpe_id), dictionary.unk()) for token, bpe_id in bpe_vocab.items()}
    for index in range(dictionary.nspecial):
        vocab[dictionary.symbols[index]] = index
    tokenizer = Tokenizer(BPE(vocab, merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # Only </s> (a line break) is matched as a whole: fairseq's BPE reads "<unk>" (WikiText has it)
    # or "<pad>" in a text as characters, and so does this (no unk or pad token: lm-eval pads with eos).
    return finished(tokenizer, dictionary, [dictionary.eos_word])
