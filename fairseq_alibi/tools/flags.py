"""The one reader of fairseq command-line flags: what value each flag gets, as argparse keeps it.
Plain Python."""
from typing import Dict, Iterable, Optional


def flag_values(argv: Iterable[str]) -> Dict[str, str]:
    """{flag: the value the run gets}: a flag's last value wins (as in argparse), a switch is "",
    a flag of several words (nargs="+") gets them joined by spaces, --flag=value takes no more
    words; positional arguments (the data directory, the program) are left out."""
    values, flag = {}, None
    for arg in argv:
        if arg.startswith("--"):
            flag, _, value = arg.partition("=")
            values[flag] = value
            flag = None if value else flag
        elif flag is not None:
            values[flag] = f"{values[flag]} {arg}".lstrip()
    return values


def last_value(argv: Iterable[str], name: str, default: Optional[str] = None) -> Optional[str]:
    """The value of the last `name` in argv (default if absent; "" for a switch)."""
    return flag_values(argv).get(name, default)
