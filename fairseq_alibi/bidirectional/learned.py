"""learned: -p_h (i - j) before the query, -f_h (j - i) after it, p_h and f_h learned per head
(fork issue #5 option 3), started at m_h (symmetric ALiBi, a known good encoder) rather than at the
issue's random draw."""
from fairseq_alibi.bidirectional.encoder_alibi import LearnedSlopes, register


@register("learned")
class Learned(LearnedSlopes):
    pass
