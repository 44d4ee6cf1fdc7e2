"""Names that come from data or configuration (feature names, qids, docids), written safely.

A name reaches three kinds of output: Markdown (``report.md``'s tables and sentences), matplotlib
text (plots) and JSON (``report.json``, the manifest; ``json`` escapes everything itself).

- :func:`md_text` makes a name literal text in CommonMark / GitHub-flavoured Markdown: every
  ASCII punctuation character is backslash-escaped (CommonMark 0.31, section 2.4: "any ASCII
  punctuation character may be backslash-escaped"), so ``|`` cannot end a table cell, backticks
  cannot open code, ``<img ...>`` is not HTML and ``*``/``_``/``[`` are not emphasis or links;
  a character that is not printable is written as its ``\\uXXXX`` code.
- :func:`md_code` makes a name a literal code span (a path, a member's name): fenced by more
  backticks than any run of them in the name (CommonMark 0.31, section 6.1), padded with a space
  where it starts or ends with a backtick or a space; in a table cell each ``|`` is written ``\\|``
  (GitHub-flavoured Markdown splits cells at a pipe even inside a code span).
- :func:`plain_text` makes a name one line of terminal text: a character that is not printable
  (a control character, a line break, an escape sequence's ESC) is written as its ``\\uXXXX`` code.
- :func:`plot_text` makes a name literal for matplotlib: a ``$`` is escaped as ``\\$`` (matplotlib
  parses text between unescaped dollar signs as mathtext, where ``$\\foo$`` raises at draw time;
  an escaped one is drawn as ``$``).
- :func:`name_problem` says why a name is refused, when the configuration is read and before any training, a name
  that is empty, longer than ``MAX_NAME_LENGTH`` characters or holds a character that is not
  printable (control characters, line and paragraph separators); the message names the place.
"""

from __future__ import annotations

import re
import string

#: characters of a feature name at most
MAX_NAME_LENGTH = 200

_PUNCTUATION = frozenset(string.punctuation)


def md_text(name: object) -> str:
    """``name`` as literal Markdown text (module docstring)."""
    out = []
    for ch in str(name):
        if ch in _PUNCTUATION:
            out.append("\\" + ch)
        elif not ch.isprintable():
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def plain_text(name: object) -> str:
    """``name`` as one line of printable text (module docstring)."""
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in str(name))


def md_code(name: object, *, in_table: bool = False) -> str:
    """``name`` as a literal Markdown code span (module docstring)."""
    text = plain_text(name)
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if not text or text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text.replace('|', chr(92) + '|') if in_table else text}{pad}{fence}"


def plot_text(name: object) -> str:
    """``name`` as literal matplotlib text: no mathtext (module docstring)."""
    text = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in str(name))
    return text.replace("$", r"\$")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a feature name, or None."""
    if not name:
        return "a feature name must not be empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"a feature name has at most {MAX_NAME_LENGTH} characters, this one {len(name)}"
    bad = next((ch for ch in name if not ch.isprintable()), None)
    if bad is not None:
        return f"a feature name must hold printable characters only, this one holds {bad!r}"
    return None
