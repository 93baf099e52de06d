"""Knowledge distillation from a teacher LM: the per-token terms. Pure torch, no fairseq import.

Hinton et al. (2015): loss = (1 - w) CE + w T^2 KL(p_T^teacher || p_T^student), where p_T is the
model's distribution at temperature T, softmax(log p / T). For a plain softmax, softmax(log p / T)
equals softmax(logits / T) exactly (log p and the logits differ by a per-token constant); for an
adaptive softmax, which has no single logit vector, it is the same tempering of the full-vocabulary
distribution. T^2 keeps the term's gradient on the scale of the cross entropy's as T changes.
"""
import torch
import torch.nn.functional as F
from torch import Tensor


def cross_entropy_terms(log_probs: Tensor, target: Tensor, keep: Tensor) -> Tensor:
    """-log p(target) per token, 0 where keep is False. log_probs (..., V), target and keep (...)."""
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return nll.masked_fill(~keep, 0.0)


def distillation_terms(student_log_probs: Tensor, teacher_log_probs: Tensor, keep: Tensor,
                       temperature: float) -> Tensor:
    """T^2 KL(p_T^teacher || p_T^student) per token, 0 where keep is False; in fp32 at least.

    student_log_probs, teacher_log_probs: (..., V) log-probabilities over the full vocabulary.
    """
    dtype = torch.promote_types(student_log_probs.dtype, torch.float32)  # fp16/bf16 -> fp32
    student = F.log_softmax(student_log_probs.to(dtype) / temperature, dim=-1)
    teacher = F.log_softmax(teacher_log_probs.to(dtype) / temperature, dim=-1)
    # sum_v p_t (log p_t - log p_s): exactly 0 when the two distributions are equal. A word the teacher
    # never predicts (log p_t = -inf: an imported GPT-2's masked symbols) adds 0 log 0 = 0, not NaN.
    kl = F.kl_div(student, teacher, reduction="none", log_target=True)
    kl = kl.masked_fill(teacher == float("-inf"), 0.0).sum(-1)
    return (temperature**2 * kl).masked_fill(~keep, 0.0)
