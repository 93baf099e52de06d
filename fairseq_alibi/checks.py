"""What every model file of the plugin shares, without importing each other: the one-line
configuration error, the check that runs a pure-torch check at build time, the unbounded length,
and the heads/dimension check. No fairseq import."""
import logging

logger = logging.getLogger(__name__)

# No position table, so nothing limits the length; fairseq takes the min over limits.
UNBOUNDED_POSITIONS = 2**31 - 1


class ConfigError(SystemExit):
    """A bad configuration: printed as one line by the fairseq command-line tools, no traceback."""

    def __init__(self, message):
        super().__init__(f"fairseq_alibi: {message}")


def config_check(check, *args, flags: str = ""):
    """Run a pure-torch check or constructor (which raises ValueError naming what is wrong) when
    the model is built, as a ConfigError (prefixed with the flags that set its arguments): one
    check, one message. Returns what it returns."""
    try:
        return check(*args)
    except ValueError as error:
        raise ConfigError(f"{flags}: {error}" if flags else str(error)) from None


def check_heads(embed_dim: int, heads, side: str = "decoder"):
    """--{side}-attention-heads at least 1 and dividing --{side}-embed-dim."""
    if heads is None or heads < 1:
        raise ConfigError(f"--{side}-attention-heads must be at least 1, got {heads}")
    if embed_dim % heads:
        raise ConfigError(f"--{side}-embed-dim ({embed_dim}) must be divisible by --{side}-attention-heads ({heads})")


_warned = set()


def warn_once(message: str):
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)
