"""fairseq_alibi_lab/recipes.py: what the CPU recipes ask of fairseq-train beyond the model's training."""
import threading

import pytest

from fairseq_alibi_lab import recipes


def threads_while_batching(buffer_size):
    """The threads alive while fairseq's epoch iterator (as fairseq-train and fairseq-eval-lm build it,
    --data-buffer-size as its buffer) hands out its first batch of a toy dataset."""
    import torch
    from fairseq.data import iterators

    class Toy(torch.utils.data.Dataset):
        def __getitem__(self, i):
            return i

    itr = iterators.EpochBatchIterator(Toy(), list, [[i] for i in range(50)], buffer_size=buffer_size)
    batches = itr.next_epoch_itr(shuffle=False)
    next(batches)
    return threading.active_count()


@pytest.mark.parametrize("preset", [p for p in recipes.RECIPES if p != "wiki103"])  # wiki103: the paper's GPUs
def test_a_cpu_recipe_makes_its_batches_in_the_main_thread(preset):
    """No DataLoader worker and no prefetching thread: fairseq's BufferedIterator is a daemon thread that,
    collating the next batch with torch while a finished run exits, aborts the process after its checkpoint
    was saved ("terminate called without an active exception", pytorch/pytorch#38228: the mlm toy run once
    read as failed so). The recipe's flags as fairseq's own parser reads them; the iterator they build starts
    no thread, where fairseq's default buffer does."""
    from fairseq import options

    parser = options.get_training_parser()
    arch = {"causal LM": "transformer_lm", "masked LM": "roberta_base", "encoder-decoder": "transformer"}[recipes.RECIPE_KIND[preset]]
    args = options.parse_args_and_arch(parser, ["data", "--arch", arch, *recipes.recipe(preset, 64)])
    assert (args.num_workers, args.data_buffer_size) == (0, 0)
    before = threading.active_count()
    assert threads_while_batching(args.data_buffer_size) == before
    assert threads_while_batching(parser.get_default("data_buffer_size")) == before + 1  # fairseq's default: 10
