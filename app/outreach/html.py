"""What the stages read from a page: title, description, keywords, language, links and
visible text.

Pages are hostile input, so this is a small HTML tokenizer whose cost is linear in the
page's length whatever the page holds. Each step matches one regex where the last token
ended, and every scan either consumes what it read or ran to the end of the page, and
then the rest of the page is that one token (an unclosed comment, tag or <script> runs to
the end, as in browsers). No tree is built, so nothing depends on how deep or how badly
tags nest. The stdlib HTMLParser rescans the rest of the page from every unclosed `<!--`;
the C parsers on PyPI (lxml, selectolax) search their stack of open elements, or the
attributes read so far, for each tag: each goes quadratic on some crafted page (deep
nesting, stray end tags under many open ones, 1e5 attributes).

`parse_page` is what the stages call: at most `max_chars` of the page, in a worker
thread, within a deadline.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from html import unescape

PARSE_TIMEOUT_SECONDS = 5.0     # a 2 MB page of the densest markup reads in 1-2 s
MAX_PARSE_CHARS = 2_000_000     # the default; callers pass settings.fetch_max_bytes
_CLOCK_EVERY = 4096             # tokens between looks at the deadline
PARSE_WORKERS = 2
TOP_WORDS_CHARS = 100_000

_SKIP_TEXT = {"script", "style", "noscript", "template", "svg"}
_BREAK_BEFORE = {"br", "p", "div", "li", "td", "tr", "h1", "h2", "h3", "h4", "section", "footer"}
_BREAK_AFTER = {"p", "div", "li", "td", "h1", "h2", "h3", "h4", "section"}
_ATTRS_READ = {"html", "base", "meta", "a", "area"}  # the only tags whose attributes matter
_RAW_TEXT = {"script", "style"}                       # content that is never markup
_SPECIAL = _SKIP_TEXT | _BREAK_BEFORE | _BREAK_AFTER | _ATTRS_READ | {"title"}

_WS = r"[\t\n\f\r ]"
# One token, where the last one ended; some alternative matches at every position.
# Possessive quantifiers (no backtracking), and alternatives told apart by their first
# characters, keep each match linear in what it scans.
_TOKEN = re.compile(rf"""
    (?P<text>(?:[^<]++|<(?![A-Za-z!?/]))++)                # text, a stray `<` included
  | <!--(?:>|->|.*?--!?>|.*+)                             # comment (unclosed: to the end)
  | </(?P<end>[A-Za-z][^\t\n\f\r />]*+)[^>]*+>?          # end tag
  | <(?P<start>[A-Za-z][^\t\n\f\r />]*+)                  # start tag; a quote opens a value
    (?P<attrs>(?:[^>"'=]++|={_WS}*+(?:"[^"]*+"|'[^']*+'|(?!["']))|["'])*+)>   # only after =
  | <[A-Za-z].*+                                          # a tag never closed: the rest
  | <[!?/][^>]*+>?                                        # doctype, <?...>, </>, bogus comment
""", re.S | re.X)
_ATTR = re.compile(rf"""([^\t\n\f\r />"'=][^\t\n\f\r />=]*+)
    (?:{_WS}*+={_WS}*+("[^"]*+"|'[^']*+'|[^\t\n\f\r >]*+))?""", re.X)
_CLOSE = {tag: re.compile(rf"</{tag}(?:[\t\n\f\r />]|\Z)", re.I) for tag in _RAW_TEXT}

_WORD = re.compile(r"[^\W\d_]{4,}", re.UNICODE)
_STOPWORDS = frozenset("""
about after again also among another because been before being between both came come
could does doing down each even every from further have having here into just like made
make many more most much must never only other ours over same should since some such than
that their them then there these they this those through under until very want well were
what when where which while will with within without would your yours you're we're
""".split())

# Its own threads: parses never queue the default executor's work (DNS look-ups) behind them.
_PARSERS = ThreadPoolExecutor(max_workers=PARSE_WORKERS, thread_name_prefix="parse-page")


class PageNotParsed(Exception):
    """The page could not be read within the time allowed: a failed attempt, retried
    later like a fetch that timed out."""


@dataclass
class ParsedPage:
    title: str = ""
    description: str = ""
    keywords: list[str] = field(default_factory=list)
    language: str | None = None
    links: list[str] = field(default_factory=list)  # href values as written, in page order
    text: str = ""                                   # the visible text, whitespace collapsed
    base: str | None = None                          # <base href>, if any
    nofollow: bool = False                           # <meta name="robots" content="nofollow">


def _attributes(raw: str) -> dict[str, str]:
    """Names (lower case) and values (entities decoded); the first of a name wins, as in browsers."""
    out: dict[str, str] = {}
    for m in _ATTR.finditer(raw):  # not findall: one C call over 1e5 attributes holds the GIL
        name, value = m.groups()
        name = name.lower()
        if name not in out:
            if value[:1] in ("'", '"'):
                value = value[1:-1]
            out[name] = unescape(value) if "&" in value else value
    return out


def _read_tag(page: ParsedPage, tag: str, a: dict[str, str]) -> None:
    if tag == "html" and a.get("lang"):
        page.language = a["lang"].strip()[:35] or None
    elif tag == "base" and a.get("href") and page.base is None:
        page.base = a["href"].strip()
    elif tag == "meta":
        name = (a.get("name") or a.get("property") or "").lower()
        content = a.get("content", "").strip()
        if name in ("description", "og:description") and not page.description:
            page.description = content
        elif name == "keywords":
            page.keywords = [k.strip() for k in content.split(",") if k.strip()]
        elif name == "robots" and "nofollow" in content.lower():
            page.nofollow = True
        elif a.get("http-equiv", "").lower() == "content-language" and not page.language:
            page.language = content[:35] or None
    elif tag in ("a", "area") and a.get("href"):
        page.links.append(a["href"].strip())


def parse_html(text: str, *, deadline: float | None = None) -> ParsedPage:
    """Read a page; raises PageNotParsed once time.monotonic() passes `deadline`."""
    text = text.replace("\x00", "")  # browsers drop it; PostgreSQL text cannot hold it
    page = ParsedPage()
    title: list[str] = []
    words: list[str] = []
    skip = 0  # inside this many script/style/noscript/template/svg elements
    in_title = False
    match, pos, end, tokens = _TOKEN.match, 0, len(text), 0
    while pos < end:
        m = match(text, pos)
        pos = m.end()
        kind = m.lastgroup
        if kind == "text":
            if in_title or not skip:
                data = m["text"]
                (title if in_title else words).append(unescape(data) if "&" in data else data)
        elif kind == "end":
            tag = m["end"].lower()
            if tag in _BREAK_AFTER:
                words.append(" ")
            elif tag in _SKIP_TEXT and skip:
                skip -= 1
            elif tag == "title":
                in_title = False
        elif kind == "attrs":  # a start tag
            tag = m["start"].lower()
            if tag not in _SPECIAL:
                pass  # most tags: nothing to do
            elif tag in _BREAK_BEFORE:
                words.append(" ")
            elif tag in _ATTRS_READ:
                _read_tag(page, tag, _attributes(m["attrs"]))
            elif tag in _SKIP_TEXT:
                if tag == "svg" and m["attrs"].endswith("/"):
                    pass  # self-closing: only foreign elements can be
                else:
                    skip += 1
                    if tag in _RAW_TEXT:  # skipped to its end tag, which comes next
                        close = _CLOSE[tag].search(text, pos)
                        pos = close.start() if close else end
            else:  # <title>; an <svg>'s names the picture, not the page
                in_title = not skip
        tokens += 1
        if deadline is not None and not tokens % _CLOCK_EVERY and time.monotonic() > deadline:
            raise PageNotParsed("the page took too long to read")
    page.title = " ".join("".join(title).split())[:300]
    page.text = " ".join("".join(words).split())
    page.description = " ".join(page.description.split())[:1000]
    return page


def parse_plain(text: str) -> ParsedPage:
    return ParsedPage(text=" ".join(text.replace("\x00", "").split()))


async def parse_page(text: str, *, is_html: bool, timeout: float = PARSE_TIMEOUT_SECONDS,
                     max_chars: int = MAX_PARSE_CHARS) -> ParsedPage:
    """Read at most `max_chars` of a page, off the event loop, within `timeout` seconds;
    raises PageNotParsed past that.

    Reading a page is CPU work, so the thread does not make it cheaper; it keeps the loop
    answering meanwhile (a thread running Python hands the GIL over every few
    milliseconds; a parse on the loop would hold it to the end), and lets the deadline
    fire while the parse runs. The worker looks at the same deadline and stops too, so a
    page that runs out of time stops costing CPU. Threads, not processes: no
    multiprocessing where /dev/shm is missing (AWS Lambda)."""
    text = text[:max_chars]  # a page is at most fetch_max_bytes bytes, so as many characters
    if not is_html:
        return parse_plain(text)
    return await off_the_loop(parse_html, text, timeout=timeout)


async def off_the_loop(work, *args, timeout: float = PARSE_TIMEOUT_SECONDS, what: str = "the page"):
    """`work(*args, deadline=...)` in a parse worker, within `timeout` seconds; raises
    PageNotParsed past that (`work` may raise it too, once time.monotonic() passes the
    deadline, so that it stops costing CPU). What reads hostile input (pages, their
    contacts, robots.txt) runs here, never on the event loop."""
    deadline = time.monotonic() + timeout
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            return await loop.run_in_executor(_PARSERS, functools.partial(work, *args, deadline=deadline))
    except (TimeoutError, PageNotParsed):  # whichever saw the deadline first
        raise PageNotParsed(f"{what} could not be read within {timeout:g}s") from None


def top_words(text: str, n: int = 8) -> list[str]:
    """The most frequent longer words of the text's start, for a brief whose page has no
    meta keywords. It runs on the event loop: a whole 2 MB page would hold it for 0.5 s."""
    words = (w.lower() for w in _WORD.findall(text, 0, TOP_WORDS_CHARS))
    counts = Counter(w for w in words if w not in _STOPWORDS)
    return [w for w, _ in counts.most_common(n)]
