"""The text side of data cleaning: links out of problem text, and the phrases that mark a
problem for dropping (`ascent.data.clean` runs them as filters).

Links: `[text](http://...)` keeps its text; images, bare URLs, `<http://...>`, brackets that
held only a link, `[1](http://...)` and footnotes `[1]: http://...` (with their `[1]` citations)
go, with a label such as "Source:" or "see" that pointed at them. Every pattern is searched
case-insensitively in the cleaned text, so a word inside a removed URL never matches.
"""

from __future__ import annotations

import re

_F = re.I | re.M

# -- links ---------------------------------------------------------------------------------------

_URL = r"(?:(?:https?|ftp)://|www\.)[^\s<>\"'`\[\]{}|\\^]+"
_TARGET = rf"<?{_URL}>?(?:\s+\"[^\"\n]*\")?"  # a markdown link target, optionally titled
_FOOTNOTE = re.compile(rf"^[ \t]*\[(\^?\w{{1,6}})\]:?[ \t]*{_TARGET}[ \t]*(?:\n|$)", _F)
_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
_MD_LINK = re.compile(rf"\[([^\]\n]*)\]\(\s*{_TARGET}\s*\)", re.I)
_BRACKETED = re.compile(rf"[\[<(]\s*{_URL}\s*[\]>)]", re.I)
_BARE = re.compile(_URL, re.I)
_REF_LABEL = re.compile(rf"\s*\^?\d{{0,3}}\s*|\s*{_URL}\s*", re.I)  # labels that are no text
_POINTER = re.compile(  # words that only pointed at a link: "Source:", "see", "taken from"
    r"\b(?:(?:taken|adapted|reproduced|copied|quoted|retrieved) )?(?:from|source|link|url|see|"
    r"visit|reference|ref|available (?:at|from)|found at)\s*:?\s*(?=\x00)",
    re.I,
)
_FOR_DETAILS = re.compile(
    r"\x00[ \t]+for (?:the )?(?:more |further |full )?(?:details|information|info|reference|"
    r"context|original|source|statement)\b",
    re.I,
)
_GONE = "\x00"  # marks where a link was, until the text around it is tidied


def _bare_url(match: re.Match[str]) -> str:
    """A bare URL goes; sentence punctuation and an unbalanced ')' after it stay."""
    url = match.group(0)
    kept = ""
    while url and (url[-1] in ".,;:!?" or (url[-1] == ")" and url.count("(") < url.count(")"))):
        url, kept = url[:-1], url[-1] + kept
    return _GONE + kept


def strip_links(text: str) -> str:
    """`text` with links removed as the module says; nothing else changes."""
    if not re.search(r"https?://|ftp://|www\.|!\[", text, re.I):
        return text
    cited = {m.group(1) for m in _FOOTNOTE.finditer(text)}
    text = _FOOTNOTE.sub("", text)
    text = _IMAGE.sub(_GONE, text)
    text = _MD_LINK.sub(lambda m: _GONE if _REF_LABEL.fullmatch(m.group(1)) else m.group(1), text)
    text = _BRACKETED.sub(_GONE, text)
    text = _BARE.sub(_bare_url, text)
    for ref in cited:
        text = re.sub(rf"\[{re.escape(ref)}\]", _GONE, text)
    text = _FOR_DETAILS.sub(_GONE, _POINTER.sub("", text))
    for _ in range(2):  # brackets left holding nothing: "(see <url>)", "[<url>]"
        text = re.sub(r"[(\[<{][ \t]*\x00[ \t]*[)\]>}]", _GONE, text)
    text = re.sub(r"\x00(?:[ \t]*\x00)+", _GONE, text)
    # a sentence that was only a link goes whole, with the comma after one that began a line
    text = re.sub(r"(^|[.!?][ \t]+|[\"'(\[])[ \t]*\x00[ \t]*[.!?]", r"\1", text, flags=re.M)
    text = re.sub(r"^[ \t]*\x00[ \t]*[,;:][ \t]*", "", text, flags=re.M)
    text = re.sub(r"[ \t]*[:,;]?[ \t]*\x00[ \t]*(?=[.,;:!?)\]]|$)", "", text, flags=re.M)
    text = re.sub(r"^[ \t]*\x00[ \t]*", "", text, flags=re.M)
    return re.sub(r"[ \t]*\x00[ \t]*", " ", text)


ODD_SPACE = re.compile(r"[\t\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")
ZERO_WIDTH = re.compile(r"[\u200b\u200c\u200d\u2060\ufeff]")


def clean_text(text: str, mode: str = "prose") -> str:
    """`text` without links. prose: whitespace normalised (odd and repeated spaces, line ends,
    blank lines); statement: only line ends and blank lines tidied (a statement's samples must
    stay as written); code: links removed, nothing more."""
    text = strip_links(text)
    if mode == "code":
        return text
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if mode == "prose":
        text = re.sub(r" {2,}", " ", ZERO_WIDTH.sub("", ODD_SPACE.sub(" ", text)))
        text = "\n".join(line.strip() for line in text.split("\n"))
    else:
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# -- what marks a problem ------------------------------------------------------------------------

_PICTURE = r"(?:figure|diagram|picture|drawing|illustration|sketch|chart|graph|image)s?"
PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    name: tuple(re.compile(p, _F) for p in patterns)
    for name, patterns in {
        "needs_figure": (
            r"\b(?:in|from|on|see|using|use|consult) (?:the |this |each )?(?:following |"
            r"accompanying |given |adjacent |attached )?(?:figure|diagram|picture|drawing|"
            r"illustration)s?\b",
            rf"\b{_PICTURE} (?:below|above|shown|provided|attached|here)\b",
            rf"\b(?:the|this) {_PICTURE} (?:shows?|illustrates?|depicts?)\b",
            r"\bshown (?:below|above|here|at (?:the )?(?:right|left)|on the (?:right|left))\b",
            r"\bas shown\b",
            r"\bdiagrams?\b",
            r"\b(?:fig\.?|figure) ?\d+\b",
            r"\[asy\]|\\begin\{(?:tikzpicture|picture)\}|\\includegraphics|<image>|<img\b",
        ),
        "needs_table": (
            r"\btables? (?:below|above|shown|here)\b",
            r"\b(?:the|this) (?:following|given|accompanying|above) tables?\b",
            r"\b(?:the|this) tables? (?:shows?|gives|lists)\b",
            r"\b(?:in|from|use|using|see|consult) (?:the|this) (?:following )?(?:table|chart)\b",
            r"\btable ?\d+\b",
            r"^[ \t]*\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)+\|?[ \t]*$",
            r"\\begin\{(?:tabular|table)\}",
        ),
        "proof": (
            r"\bprove\b(?!\s+(?:to\b|useful|helpful|costly|difficult|fatal|popular))",
            r"\b(?:show|demonstrate|establish|verify) that\b",
            r"\b(?:give|write|provide|find) (?:a |an )?(?:rigorous |formal )?proof\b",
        ),
        "file_io": (
            r"\b(?:input|output)\.(?:txt|dat|in|out)\b",
            r"\b(?:read|reads|reading|load|loads|loading|parse|parses|take|takes)\b[^.\n]{0,40}?"
            r"\bfrom (?:a|an|the|this|that|each|given) (?:[\w-]+ ){0,3}?files?\b",
            r"\b(?:write|writes|writing|save|saves|saving|store|stores|output|outputs|print|prints"
            r"|dump|dumps|append|appends)\b[^.\n]{0,40}?\b(?:to|into|in) (?:a|an|the|this|that|"
            r"new|separate) (?:[\w-]+ ){0,3}?files?\b",
            r"\b(?:the|an?) (?:input|output|text|csv|json|log|data) files?\b",
            r"\bfile ?system\b",
            r"\b(?:open|opens|opening|create|creates|delete|deletes|rename|renames) (?:a|an|the|"
            r"each|every) (?:[\w-]+ ){0,2}?files?\b",
            r"\b(?:fopen|ifstream|ofstream|freopen)\b",
        ),
        "network": (
            r"\bhttps? (?:get |post |put |delete |head )?requests?\b",
            r"\b(?:get|post|put|delete) requests? (?:to|from)\b",
            r"\b(?:rest|restful|web|http|json|graphql|public|external|remote|third[- ]party)"
            r" apis?\b",
            r"\bapi (?:keys?|endpoints?|calls?|requests?|tokens?|responses?)\b",
            r"\b(?:call|calls|calling|query|queries|querying|access|accessing|hit|hits|use|uses"
            r"|using) (?:the|an?|this|that) (?:[\w-]+ ){0,3}?apis?\b",
            r"\bdownload(?:s|ed|ing)?\b[^.\n]{0,60}?\b(?:from|via|over|off) (?:the |a |an )?"
            r"(?:internet|web|url|server|website|site|link|network|remote|cloud)\b",
            r"\bdownload(?:s|ed|ing)? (?:the |a |an |this )?(?:file|page|web ?page|dataset|"
            r"data set|content|html|json|csv)s? (?:from|at)\b",
            r"\b(?:tcp|udp|web|network|client|server|unix|raw|listening)[- ]sockets?\b",
            r"\bsockets? (?:connections?|servers?|clients?|programming|library|module|api)\b",
            r"\b(?:open|opens|opening|create|creates|creating|bind|binds|connect|connects|"
            r"connecting) (?:a |an |the )?(?:new )?sockets?\b",
            r"\bwebsockets?\b|\burllib\b|\brequests\.(?:get|post)\b|\baiohttp\b|\bhttpx\b|\bwget\b",
            r"\brequests? to (?:the |an? )?(?:server|url|endpoint|api|website|web ?service)\b",
            r"\b(?:from|over|on|via) the internet\b|\bweb ?scrap(?:e|er|ers|ing)\b|\bscrape\b",
            r"\b(?:fetch|fetches|fetching|retrieve|retrieves|crawl|crawls)\b[^.\n]{0,40}?"
            r"\b(?:urls?|web ?pages?|websites?|endpoints?)\b",
        ),
        "environment": (
            r"\b(?:gpus?|cuda|tpus?|cudnn)\b",
            r"(?-i:\b(?:on|under|for|requires?|using|in|only on|run on) (?:Microsoft )?(?:Windows"
            r"|macOS|Mac OS(?: X)?|OS X|Linux|Ubuntu|Debian|Android|iOS)\b)",
            r"\b(?:windows|linux|macos|unix|posix|os)[- ](?:only|specific)\b",
            r"\bgui\b|\bgraphical user interface\b|\b(?:tkinter|pyqt\d?|pyside\d?|wxpython|pygame|"
            r"kivy)\b|\bturtle graphics\b",
            r"\b(?:my)?sql\b|\bpostgres(?:ql)?\b|\bsqlite3?\b|\bmongodb\b|\bredis\b",
            r"\b(?:connect|connects|connecting|connection) to (?:a |an |the )?(?:[\w-]+ ){0,2}?"
            r"database\b|\bdatabase (?:connections?|servers?|schemas?|quer(?:y|ies)|drivers?)\b"
            r"|\bquer(?:y|ies|ying) (?:a|the) database\b",
            r"\benvironment variables?\b|\bos\.environ\b|\bgetenv\b",
            r"\b(?:pip|conda|apt(?:-get)?|npm) install\b|\bthird[- ]party (?:packages?|"
            r"librar(?:y|ies)|modules?)\b",
        ),
    }.items()
}
# Searched in the text as read: what cleaning removes but a reader would have needed.
RAW_FIGURE = (
    _IMAGE,
    re.compile(r"<img\b", re.I),
    re.compile(rf"{_URL}\.(?:png|jpe?g|gif|svg|bmp|webp)\b", re.I),
)

# -- several questions ---------------------------------------------------------------------------

_LABEL = re.compile(  # (a) (ii) (2) (Ⅱ) in text, or a. 2) at a line's start
    r"(?:^|(?<=[\s:;,.?!]))[(（](?P<p>[a-h]|i{1,3}|iv|vi{0,3}|[1-9]|[ⅠⅡⅢⅣⅤⅥ])[)）](?=\s|[A-Z$\\])"
    r"|^[ \t]*(?P<l>[a-h]|i{1,3}|iv|[1-9])[.)](?=[ \t]+\S)",
    re.M,
)
_ASKS = re.compile(
    r"\s*(?:find|compute|calculate|determine|evaluate|what|how|which|who|why|when|where|show|"
    r"prove|explain|express|solve|write|give|list|simplify|sketch|draw|estimate|identify|is|"
    r"are|does|do|can|state|describe|verify)\b",
    re.I,
)
_FAMILIES = (
    tuple("abcdefgh"),
    ("i", "ii", "iii", "iv", "v", "vi"),
    tuple("123456789"),
    tuple("ⅠⅡⅢⅣⅤⅥ"),
)
_QUOTED = re.compile(r"\"[^\"\n]*\"|“[^”\n]*”")
_QUESTION = re.compile(r"[^.?!\n]*\?")
_FOLLOW_UP = re.compile(r"\s*(?:why|explain|justify)\b", re.I)


def several_questions(text: str, least: int = 2) -> str | None:
    """Why `text` asks several questions, or None (the rule is meant to miss rather than
    misfire): labelled parts, (a)/(b), (i)/(ii), 1./2. at line starts, of which at least two
    ask something; or `least` different question sentences of 3+ words outside quotes, not
    counting a follow-up "why?"."""
    labels = [(m.start(), m.end(), m.group("p") or m.group("l")) for m in _LABEL.finditer(text)]
    for family in _FAMILIES:
        found = [(start, end, lab) for start, end, lab in labels if lab in family]
        names = [lab for _, _, lab in found]
        if family[0] not in names or family[1] not in names[names.index(family[0]) :]:
            continue
        ends = [start for start, _, _ in found[1:]] + [len(text)]
        parts = [text[end:stop] for (_, end, _), stop in zip(found, ends, strict=True)]
        asking = [lab for (_, _, lab), part in zip(found, parts, strict=True) if _asks(part)]
        if len(asking) >= 2:
            return f"sub-questions {', '.join(f'({lab})' for lab in asking)}"
    sentences: dict[str, str] = {}
    for match in _QUESTION.finditer(_QUOTED.sub(" ", text)):
        words = re.findall(r"[^\W\d_]+", match.group(0))
        if len(words) >= 3 and not _FOLLOW_UP.match(match.group(0)):
            sentences.setdefault(" ".join(words).lower(), " ".join(match.group(0).split()))
    if len(sentences) >= least:
        shown = " / ".join(s[:50] for s in sentences.values())
        return f"{len(sentences)} questions: {shown}"
    return None


def _asks(part: str) -> bool:
    return "?" in part or bool(_ASKS.match(part))


# -- code, answers -------------------------------------------------------------------------------

_IMPORT = re.compile(
    r"^[ \t]*(?:import[ \t]+[A-Za-z_][\w.]*(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*"
    r"(?:[ \t]+as[ \t]+\w+)?)*|from[ \t]+[A-Za-z_][\w.]*[ \t]+import[ \t]+[\w*, ()]+?)[ \t]*;?"
    r"[ \t]*$",
    re.M,
)


def statement_code(text: str) -> str:
    """The import lines in a prose statement (its code snippets), one per line."""
    return "\n".join(m.group(0).strip().rstrip(";") for m in _IMPORT.finditer(text))


def import_lines(code: str) -> list[str]:
    """The modules named by import lines, for code that does not parse."""
    found = []
    for line in statement_code(code).splitlines():
        words = line.replace(",", " ").split()
        if words[0] == "from":
            found.append(words[1])
        else:
            found += [w for i, w in enumerate(words[1:]) if w != "as" and words[i] != "as"]
    return found


NETWORK_MODULES = frozenset(
    {
        *("socket", "socketserver", "ssl", "urllib", "urllib3", "http", "requests", "aiohttp"),
        *("httpx", "ftplib", "smtplib", "poplib", "imaplib", "telnetlib", "xmlrpc", "paramiko"),
        *("websocket", "websockets"),
    }
)
# Standard-library modules that still need something a sandbox lacks (a display, a database).
ENVIRONMENT_MODULES = frozenset(
    {"tkinter", "turtle", "sqlite3", "dbm", "winreg", "winsound", "msvcrt", "curses"}
)
OPENS_FILE = re.compile(
    r"\b(?:io\.)?open\(\s*(?![0-2]\s*[,)]|[\"']/dev/std|sys\.)|\.(?:read|write)_(?:text|bytes)\("
)
READS_ENVIRONMENT = re.compile(r"\bos\.(?:environ|getenv)\b|\bgetenv\(")
NUMBER = re.compile(r"\d|\\(?:d?frac|tfrac|sqrt|pi|infty)|[π∞√]")
PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")  # a word, not a LaTeX command's name
PLACEHOLDER = re.compile(
    r"\s*(?:\\text\{\s*)?(?:proof|see (?:the )?(?:proof|solution|below|above|explanation)|"
    r"n/?a|none given|tbd|todo|\?+|\.{3}|…|-+)\s*\}?\s*\.?\s*",
    re.I,
)
