"""GPT-2s shaped like trained ones for the import's tests (tests/library/test_import_gpt2.py and the
end-to-end runs through the lab's scripts): every logit far below zero (their token rows share a
direction that the final LayerNorm's bias points against), where a zero row's logit 0 would take
almost all of a softmax's mass; tied and untied, byte-level BPE and word-level. And save_gpt2, a
plain random one with its BPE, for the round trips (tests/library/test_hf_roundtrip.py, the lab's
disk-fault test)."""
import os

import torch

from conftest import find_wikitext2

VARIANTS = ("bpe_tied", "bpe_untied", "word_level_tied")


def below_zero(gpt2, shift=2.0, pull=7.0, gain=0.3):
    """Move a random GPT-2's logits far below zero, as a trained GPT-2's sit: every token row (input
    and output) gains `shift` times one unit direction u, the final LayerNorm's bias is -pull u and its
    gain `gain`, so every logit is about -shift x pull (the normalized state's own share along u, at
    most gain x sqrt(d) x shift, moves it a few nats)."""
    u = torch.nn.functional.normalize(torch.randn(gpt2.config.n_embd), dim=0)
    with torch.no_grad():
        gpt2.transformer.wte.weight += shift * u
        if gpt2.lm_head.weight.data_ptr() != gpt2.transformer.wte.weight.data_ptr():
            gpt2.lm_head.weight += shift * u
        gpt2.transformer.ln_f.bias.copy_(-pull * u)
        gpt2.transformer.ln_f.weight.fill_(gain)
    return gpt2


def wikitext_lines(count=400):
    with open(os.path.join(find_wikitext2(), "wiki.valid.tokens"), encoding="utf-8") as f:
        return [next(f) for _ in range(count)]


def negative_gpt2(variant, out):
    """A tiny GPT-2 of `variant` shaped like a trained one, saved in OUT/hf and imported into OUT/imported:
    (variant, HF model, a function from a text line to GPT-2 ids, the HF folder, the imported folder)."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from fairseq_alibi.hf.import_gpt2 import import_gpt2

    lines = wikitext_lines()
    torch.manual_seed(0)
    if variant.startswith("bpe"):
        from tokenizers import ByteLevelBPETokenizer

        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(["".join(lines)], vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>",
                                            bos_token="<|endoftext|>")
        # the end of text's id in the middle of the vocabulary, where GPT-2's own is not: nothing may rest on its place
        config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                            eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                            tie_word_embeddings=variant == "bpe_tied")
        encode = lambda line: tokenizer(line.strip())["input_ids"]  # noqa: E731  (fairseq's hf_byte_bpe strips the line)
    else:
        from fairseq.data import Dictionary

        from fairseq_alibi.hf.tokenizer import word_level_tokenizer

        dictionary = Dictionary()
        for line in lines:
            for word in line.split():
                dictionary.add_symbol(word)
        tokenizer = word_level_tokenizer(dictionary)
        config = GPT2Config(vocab_size=len(dictionary), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                            eos_token_id=dictionary.eos(), bos_token_id=dictionary.eos(), pad_token_id=dictionary.pad())
        encode = lambda line: [dictionary.index(w) for w in line.split()]  # noqa: E731
    gpt2 = below_zero(GPT2LMHeadModel(config).eval())
    gpt2.save_pretrained(out / "hf")
    tokenizer.save_pretrained(out / "hf")
    import_gpt2(str(out / "hf"), str(out / "imported"))
    return variant, gpt2, encode, out / "hf", out / "imported"


def fairseq_index(variant, gpt2):
    """fairseq's dictionary index of each GPT-2 id (fairseq's </s> is GPT-2's end of text)."""
    size, eos = gpt2.config.vocab_size, gpt2.config.eos_token_id
    if variant.startswith("word_level"):
        return torch.arange(size)
    index = torch.arange(size) + 4
    index[eos] = 2
    return index


def hf_log_probs(gpt2, ids):
    with torch.no_grad():
        return gpt2(torch.tensor([ids])).logits[0].log_softmax(-1)


def save_gpt2(folder, tie, seed=0, **config):
    """A random GPT2LMHeadModel (2 layers, d 32) with a 300-token byte-level BPE, saved as
    save_pretrained saves them."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["".join(wikitext_lines(400))], vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>")
    torch.manual_seed(seed)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                      eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
                                      tie_word_embeddings=tie, **config)).eval()
    if not tie:  # an output layer of its own, far from the input embeddings
        with torch.no_grad():
            gpt2.lm_head.weight.normal_(0, 0.5)
    gpt2.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return gpt2, tokenizer
