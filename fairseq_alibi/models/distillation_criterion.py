"""fairseq criterion `lm_distillation`: cross entropy mixed with distillation from a teacher LM.

    fairseq-train ... --criterion lm_distillation --teacher-path TEACHER.pt \
        --distill-weight 0.5 --distill-temperature 2

loss = (1 - w) CE + w T^2 KL(teacher_T || student_T), summed over target tokens (padding excluded)
and divided by their number, as fairseq's cross_entropy does. The log shows the two terms apart
(nll_loss, distill_loss, in bits) and the perplexity from the cross entropy alone, so validation
perplexity is comparable with any other LM criterion. Works with adaptive softmax (both models'
full-vocabulary distributions, see distillation.py).

The teacher is no parameter of the training: it is kept outside the criterion's module tree, so
the trainer does not optimise it, checkpoints do not save it and distributed training does not
wrap it; it runs in eval mode without gradients and follows the student's device and dtype.
"""
import math
import os
from dataclasses import dataclass, field

import torch
from omegaconf import II

from fairseq import metrics, utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass

from fairseq_alibi.tools import dictionaries
from fairseq_alibi.checks import ConfigError
from fairseq_alibi.tools.checkpoints import wrong_kind
from fairseq_alibi.distillation import cross_entropy_terms, distillation_terms


@dataclass
class LMDistillationConfig(FairseqDataclass):
    teacher_path: str = field(
        default="", metadata={"help": "the teacher's checkpoint: a fairseq LM over the same dictionary"})
    distill_weight: float = field(
        default=0.5, metadata={"help": "w in (1 - w) CE + w T^2 KL; 0 is plain cross entropy"})
    distill_temperature: float = field(
        default=2.0, metadata={"help": "T: both distributions are softened to softmax(log p / T)"})
    sentence_avg: bool = II("optimization.sentence_avg")


def load_teacher(path: str, task):
    """The teacher in eval mode, without gradients, built for `task` (so the same dictionary)."""
    from fairseq import checkpoint_utils

    if not os.path.isfile(path):
        raise ConfigError(f"--teacher-path {path!r} is not a file: give the teacher's checkpoint")
    data = getattr(getattr(task, "cfg", None) or getattr(task, "args", None), "data", None)  # legacy tasks: args
    other = dictionaries.check(path, data.split(os.pathsep)[0]) if data else None
    if other:  # same size, other words: the teacher would read every token as another word
        raise ConfigError(f"--teacher-path {other}")
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
    except Exception as e:  # noqa: BLE001  (unpickling errors have many types)
        raise ConfigError(f"--teacher-path {path} is not a fairseq checkpoint ({type(e).__name__})")
    other = wrong_kind(state, path, "causal LM")  # the teacher gives next-token distributions
    if other:
        raise ConfigError(f"--teacher-path {other}")
    try:
        models, _ = checkpoint_utils.load_model_ensemble([path], task=task, state=state)
    except RuntimeError as e:  # size mismatches while loading the weights
        raise ConfigError(f"the teacher {path} does not fit this task's data (another dictionary?): "
                          f"{str(e).splitlines()[-1].strip()}")
    teacher = models[0].eval()
    teacher.requires_grad_(False)
    return teacher


def full_log_probs(model, net_output) -> torch.Tensor:
    """(..., V) log-probabilities over the whole vocabulary, differentiable.

    fairseq's AdaptiveSoftmax.get_log_prob builds them in place (autograd cannot go through it),
    so for an adaptive softmax they are assembled here from its head and tails, as its forward
    computes them in training (dropout included): the head's log-softmax gives the frequent words
    and each tail cluster's log-probability, added to the log-softmax within the cluster.
    """
    adaptive = getattr(model.decoder, "adaptive_softmax", None)
    if adaptive is None:
        return model.get_normalized_probs(net_output, log_probs=True)
    features = net_output[0]
    x = adaptive.dropout_module(features.reshape(-1, features.size(-1)))
    head = adaptive.head(x).float().log_softmax(-1)
    frequent = adaptive.cutoff[0]
    parts = [head[:, :frequent]]
    for i, tail in enumerate(adaptive.tail):
        parts.append(tail(x).float().log_softmax(-1) + head[:, frequent + i, None])
    return torch.cat(parts, -1).view(*features.shape[:-1], -1)


@register_criterion("lm_distillation", dataclass=LMDistillationConfig)
class LMDistillationCriterion(FairseqCriterion):
    def __init__(self, task, teacher_path, distill_weight, distill_temperature, sentence_avg):
        super().__init__(task)
        if not 0 <= distill_weight <= 1:
            raise ConfigError(f"--distill-weight must lie in [0, 1], got {distill_weight}")
        if not distill_temperature > 0:
            raise ConfigError(f"--distill-temperature must be positive, got {distill_temperature}")
        if not teacher_path:
            raise ConfigError("--criterion lm_distillation needs --teacher-path TEACHER.pt")
        self.weight, self.temperature, self.sentence_avg = distill_weight, distill_temperature, sentence_avg
        teacher = load_teacher(teacher_path, task)
        options = getattr(task, "args", None) or task.cfg  # language_modeling is a legacy task: args
        length = getattr(options, "tokens_per_sample", None)
        if length is not None and length > teacher.max_positions():
            raise ConfigError(f"the teacher {teacher_path} knows positions up to {teacher.max_positions()} "
                              f"(its training length): distil at --tokens-per-sample <= {teacher.max_positions()}")
        # Not an attribute nn.Module registers (see the module docstring).
        self.__dict__["teacher"] = teacher

    def teacher_output(self, sample, like: torch.Tensor) -> torch.Tensor:
        """The teacher's last-layer output (features, or logits without adaptive softmax)."""
        teacher = self.teacher
        weight = next(teacher.parameters())
        if weight.device != like.device or weight.dtype != like.dtype:
            teacher.to(device=like.device, dtype=like.dtype)
        with torch.no_grad():
            return teacher(**sample["net_input"])[0]

    def forward(self, model, sample, reduce=True):
        net_output = model(**sample["net_input"])
        target = model.get_targets(sample, net_output)
        keep = target.ne(self.padding_idx).reshape(-1)
        target = target.reshape(-1)
        student = net_output[0].reshape(target.numel(), -1)  # (tokens, features or vocabulary)
        if self.weight > 0:
            teacher = self.teacher_output(sample, next(model.parameters()))
            teacher = teacher.reshape(target.numel(), -1)
        # Full-vocabulary distributions a block of tokens at a time, each tensor under malloc's
        # mmap threshold (32 MB): a 4096 x 33k batch at once spent most of its time in the kernel
        # mapping and faulting in fresh memory; blocks measured 3-4x faster on the 2-core CPU.
        rows = max(1, 2**22 // len(self.task.target_dictionary))  # 16 MB of fp32 per block
        nll = distill = student.new_zeros((), dtype=torch.float32)
        for start in range(0, target.numel(), rows):
            block = slice(start, start + rows)
            log_probs = full_log_probs(model, (student[block],))
            nll = nll + cross_entropy_terms(log_probs, target[block], keep[block]).sum()
            if self.weight > 0:
                with torch.no_grad():
                    teacher_log_probs = full_log_probs(self.teacher, (teacher[block],))
                distill = distill + distillation_terms(log_probs, teacher_log_probs, keep[block],
                                                       self.temperature).sum()
        loss = (1 - self.weight) * nll + self.weight * distill
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data, "nll_loss": nll.data, "distill_loss": distill.data,
            "ntokens": sample["ntokens"], "nsentences": sample["target"].size(0), "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        total = {key: sum(log.get(key, 0) for log in logging_outputs)
                 for key in ("loss", "nll_loss", "distill_loss", "ntokens", "sample_size")}
        ntokens, sample_size = total["ntokens"], total["sample_size"]
        metrics.log_scalar("loss", total["loss"] / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", total["nll_loss"] / ntokens / math.log(2), ntokens, round=3)
        metrics.log_scalar("distill_loss", total["distill_loss"] / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
