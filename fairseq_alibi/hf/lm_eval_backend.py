"""lm-eval on a fairseq checkpoint of ours, without exporting it first: lm-eval's model `fairseq_alibi`
is the checkpoint turned, in memory, into what fairseq-alibi-export-hf would write (the same model
class, weights and tokenizer), scored by lm-eval's own Hugging Face backend (HFLM: log-likelihood,
rolling perplexity, generation).

    fairseq-alibi-lm-eval --model fairseq_alibi --model_args checkpoint=CKPT[,data=DIR][,tokenizer=DIR] \\
        --tasks TASKS [any other lm_eval flag]

(`python -m fairseq_alibi.hf.lm_eval_backend` is the same.) It takes exactly lm_eval's flags: it
registers the model, then runs lm_eval's command line. data: the training data's directory (its
dict.txt; default the checkpoint's, where scripts/train.sh keeps a copy); tokenizer: a BPE
dictionary's vocab.json and merges.txt folder (export.py's --tokenizer). Any other model_args
(max_length, batch_size, ...) are HFLM's; max_length defaults to a learned position table's length (an
imported GPT-2's), past which it is refused. A NaN or infinite score is refused, not reported. In
Python, `import fairseq_alibi.hf.lm_eval_backend` before `lm_eval.simple_evaluate(model="fairseq_alibi",
...)` registers it the same way.
"""
from fairseq_alibi.hf import environment_problem

if environment_problem():  # before lm_eval imports transformers
    raise SystemExit(f"fairseq_alibi: {environment_problem()}")

from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402


@register_model("fairseq_alibi")
class FairseqCheckpointLM(HFLM):
    """A fairseq checkpoint (any causal LM the export takes) as lm-eval's HFLM."""

    def __init__(self, checkpoint=None, data=None, tokenizer=None, **kwargs):
        from fairseq_alibi.hf.export import CannotExport, in_memory

        if not checkpoint:
            raise SystemExit("fairseq_alibi: give --model_args checkpoint=PATH (a fairseq checkpoint of a causal LM)")
        for taken in ("pretrained", "trust_remote_code"):
            if taken in kwargs:
                raise SystemExit(f"fairseq_alibi: {taken} is the hf model's; this one takes checkpoint= (and data=, tokenizer=)")
        try:
            model, text_tokenizer = in_memory(checkpoint, data, tokenizer=tokenizer)
        except CannotExport as refusal:
            raise SystemExit(str(refusal.code).replace("fairseq-alibi-export-hf", "fairseq_alibi", 1)) from None
        end = model.config.max_positions  # a learned position table (an imported GPT-2's): no row past it
        if end and "max_length" not in kwargs:
            kwargs["max_length"] = end  # HFLM's default (2048) does not read our config
        elif end and int(kwargs["max_length"]) > end:
            raise SystemExit(f"fairseq_alibi: {checkpoint} learned {end} positions, max_length {kwargs['max_length']} "
                             f"is past them: give max_length={end} or less")
        super().__init__(pretrained=model, tokenizer=text_tokenizer, **kwargs)

    def loglikelihood(self, requests, *args, **kwargs):
        return finite(super().loglikelihood(requests, *args, **kwargs), "log-likelihood")

    def loglikelihood_rolling(self, requests, *args, **kwargs):
        return finite(super().loglikelihood_rolling(requests, *args, **kwargs), "rolling log-likelihood")


def finite(results, what):
    """lm-eval's results, or one line where a score is NaN or infinite (a diverged checkpoint): lm-eval
    would print a NaN perplexity and exit 0."""
    import math

    for result in results:
        value = result[0] if isinstance(result, tuple) else result
        if not math.isfinite(value):
            raise SystemExit(f"fairseq_alibi: a {what} came out {value} (the model diverged, or a bug): no scores reported")
    return results


def main():
    import sys

    from lm_eval.__main__ import cli_evaluate

    if {"-h", "--help"} & set(sys.argv[1:]):  # lm_eval's help names no model of ours: ours first
        print(__doc__.strip() + "\n\nlm_eval's own flags:\n")
    cli_evaluate()


if __name__ == "__main__":
    main()
