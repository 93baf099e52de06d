"""wikitext2_fairseq.yaml's results: the document's log-likelihood over fairseq's token count (each
whitespace-separated word, and each line end: fairseq's </s>) and over its words."""


def process_results(doc, results):
    (loglikelihood,) = results
    text = doc["text"]
    words = len(text.split())
    return {"token_perplexity": (loglikelihood, words + text.count("\n")), "word_perplexity": (loglikelihood, words)}
