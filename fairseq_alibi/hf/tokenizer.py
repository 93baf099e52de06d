"""A fairseq word-level dictionary as a Hugging Face tokenizer that gives a text exactly the ids
fairseq gives it: words split on whitespace (fairseq's tokenize_line), each looked up in the
dictionary (<unk> where absent), and every line break read as fairseq's end-of-line </s>
(Dictionary.encode_line ends each line with it, so a corpus's stream of ids is the text's)."""
from tokenizers import Tokenizer, normalizers, pre_tokenizers
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast


def word_level_tokenizer(dictionary) -> PreTrainedTokenizerFast:
    vocab = {symbol: index for index, symbol in enumerate(dictionary.symbols)}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token=dictionary.unk_word))
    tokenizer.normalizer = normalizers.Replace("\n", f" {dictionary.eos_word} ")
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token=dictionary.unk_word,
                                   pad_token=dictionary.pad_word, eos_token=dictionary.eos_word)
