"""Write a WikiText split with a separator line between its articles (scripts/prepare-wikitext.sh
--documents; --document-separator then keeps the articles apart).

    python3 scripts/separate_articles.py IN.tokens OUT.tokens [SYMBOL]   (SYMBOL default <doc>)

An article starts at a level-1 heading, a line ` = Title = ` (subheadings are ` = = Title = = `)
after an empty line; a line holding only SYMBOL goes before each article but the first, so that in
fairseq's stream each article but the last ends `... </s> SYMBOL </s>`. Prints the article count.
Writes OUT through a temporary name: an interrupted run leaves no partial file.
"""
import os
import re
import sys

from fairseq_alibi.files import written_whole  # noqa: E402

HEADING = re.compile(r" = [^=].* = ")


def main(source, target, symbol="<doc>"):
    with open(source, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if any(line.strip() == symbol for line in lines):
        sys.exit(f"error: {source} already holds a line {symbol!r}: choose another SYMBOL")
    out, articles = [], 0
    for i, line in enumerate(lines):
        if HEADING.fullmatch(line) and (i == 0 or not lines[i - 1].strip()):
            if articles:
                out.append(f" {symbol} ")
            articles += 1
        out.append(line)
    with written_whole(target) as partial, open(partial, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    print(f"{source}: {articles} articles")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[1].strip())
    main(*sys.argv[1:])
