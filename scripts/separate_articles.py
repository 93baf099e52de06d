#!/usr/bin/env python3
"""Write a WikiText split with a separator line between its articles (scripts/prepare-wikitext.sh
--documents; --document-separator then keeps the articles apart).

    python3 scripts/separate_articles.py IN.tokens OUT.tokens [SYMBOL]   (SYMBOL default <doc>)

An article starts at a level-1 heading, a line ` = Title = ` (subheadings are ` = = Title = = `)
after an empty line; a line holding only SYMBOL goes before each article but the first
(fairseq_alibi_lab/prepare.py: separate_articles). Prints the article count. Writes OUT through a
temporary name: an interrupted run leaves no partial file.
"""
import sys

from fairseq_alibi_lab.prepare import separate_articles

if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[1].strip())
    print(f"{sys.argv[1]}: {separate_articles(*sys.argv[1:])} articles")
