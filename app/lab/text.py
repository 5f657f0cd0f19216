"""The one way to show text that came from outside (a link, a model, file or folder name, an error about any of
them): :func:`md_plain`, used by every part of the app that puts such text on screen (DESIGN.md, Trust)."""

from __future__ import annotations

import re

# What makes Markdown of a name mid-sentence in Streamlit (react-markdown with GFM, maths and Streamlit's own
# directives), each escaped with a backslash (CommonMark escapes any ASCII punctuation), and nothing else, so that a
# name reads as typed in the page's source too ('zoo:vit-cls', 'VITLAB_WORKERS'): emphasis ('*', '~', '_' at a
# word's edge: within a word it is never emphasis), code ('`'), links and images ('[', ']'), HTML and autolinks ('<',
# '>', '&'), maths ('$'), tables ('|'), GFM's bare links ('http://e.com' through '://', 'www.e.com', 'a@e.com'),
# Streamlit's emoji, icons and colour directives (':smile:', ':material/x:', ':red[x]'); '#', '>', '-', '+', '.', ')'
# only at the start of a line (a heading, a quote, a list)
_MARKDOWN = re.compile(r"([\\`*\[\]<>&$~|])")
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_COLON = re.compile(r":(?=//|[\w/+-]+[:\[])")
_EMAIL = re.compile(r"@(?=[\w.+-]*\.\w)")
_LINE_START = re.compile(r"^(\s*\d*)([-+.)#>])")


def md_plain(text: str, lines: bool = False) -> str:
    """``text`` that came from outside (a link, a model, file or folder name, an error about any of them) escaped for
    Streamlit Markdown, as the HTML report escapes HTML, so that it shows as typed: never a link, bold, code, maths,
    HTML or an icon. The app's one escaping function: every such text on screen goes through it. Line breaks become
    spaces (a name never starts a new paragraph), or, with ``lines`` (a message), line breaks."""
    if not lines:
        return " ".join(_one_line(line) for line in str(text).splitlines())
    # a message's own list ("- item" lines, as the engine's findings write them) stays a list; its words are escaped
    return "  \n".join(m.group(1) + _one_line(m.group(2)) for m in map(_BULLET.match, str(text).splitlines()))


_BULLET = re.compile(r"(\s*- (?=\S)|)(.*)")


def _one_line(text: str) -> str:
    out = _MARKDOWN.sub(r"\\\1", text)
    out = _UNDERSCORE.sub(r"\\_", out)
    out = _COLON.sub(r"\\:", out)
    out = _EMAIL.sub(r"\\@", out)
    out = re.sub(r"(?i)\b(www)\.", r"\1\\.", out)
    return _LINE_START.sub(r"\1\\\2", out)
