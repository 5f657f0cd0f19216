"""The one way to show text that came from outside (a link, a model, file or folder name, an error about any of
them): :func:`md_plain`, used by every part of the app that puts such text on screen (DESIGN.md, Trust)."""

from __future__ import annotations

import re

# What makes Markdown of a name mid-sentence in Streamlit, each escaped with a backslash (CommonMark escapes any
# ASCII punctuation), and nothing else, so that a name reads as typed in the page's source too ('zoo:vit-cls',
# 'VITLAB_WORKERS'): emphasis ('*', '~', '_' at a word's edge: within a word it is never emphasis), code ('`'), links
# and images ('[', ']'), HTML and autolinks ('<', '>', '&'), maths ('$'), tables ('|'); '#', '>', '-', '+', '.', ')'
# only at the start of a line (a heading, a quote, a list)
_MARKDOWN = re.compile(r"([\\`*\[\]<>&$~|])")
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_LINE_START = re.compile(r"^(\s*\d*)([-+.)#>])")
# What Streamlit's renderer makes alive *after* parsing, in the text itself, where a backslash escape has already
# been read and no longer stops it (seen in Chromium): GFM's bare links ('https://e.com', 'www.e.com', 'a@e.com'),
# emoji and icon shortcodes (':smile:', ':material/home:') and colour directives (':red[x]'). An invisible word
# joiner (U+2060) inside each pattern breaks it: the text still reads as typed.
JOIN = "\u2060"
_ALIVE = (re.compile(r"(?i)(?<=\b[a-z])([a-z+.-]*:)(?=//)"),  # a scheme's ':' before '//'
          re.compile(r"(?i)(\bwww)(?=\.)"),  # www.
          re.compile(r"(@)(?=[\w-]+\.[\w-])"),  # a@e.com
          re.compile(r"(:)(?=[\w/+-]+(?::|\\?\[))"))  # :smile:, :material/x:, :red[x]


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
    for alive in _ALIVE:
        out = alive.sub(lambda m: m.group(1) + JOIN, out)
    return _LINE_START.sub(r"\1\\\2", out)
