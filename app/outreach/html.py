"""What the stages read from a page: title, description, keywords, language, links and
visible text. The standard library's HTMLParser: forgiving, and no dependency."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser

_SKIP_TEXT = {"script", "style", "noscript", "template", "svg"}
_WORD = re.compile(r"[^\W\d_]{4,}", re.UNICODE)
_STOPWORDS = frozenset("""
about after again also among another because been before being between both came come
could does doing down each even every from further have having here into just like made
make many more most much must never only other ours over same should since some such than
that their them then there these they this those through under until very want well were
what when where which while will with within without would your yours you're we're
""".split())


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


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = ParsedPage()
        self._skip = 0
        self._in_title = False
        self._title: list[str] = []
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        if tag in _SKIP_TEXT:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag == "html" and a.get("lang"):
            self.page.language = a["lang"].strip()[:35] or None
        elif tag == "base" and a.get("href") and self.page.base is None:
            self.page.base = a["href"].strip()
        elif tag == "meta":
            name = (a.get("name") or a.get("property") or "").lower()
            content = a.get("content", "").strip()
            if name in ("description", "og:description") and not self.page.description:
                self.page.description = content
            elif name == "keywords":
                self.page.keywords = [k.strip() for k in content.split(",") if k.strip()]
            elif name == "robots" and "nofollow" in content.lower():
                self.page.nofollow = True
            elif a.get("http-equiv", "").lower() == "content-language" and not self.page.language:
                self.page.language = content[:35] or None
        if tag in ("a", "area") and a.get("href"):
            self.page.links.append(a["href"].strip())
        if tag in ("br", "p", "div", "li", "td", "tr", "h1", "h2", "h3", "h4", "section", "footer"):
            self._text.append(" ")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag in _SKIP_TEXT:
            self._skip -= 1

    def handle_endtag(self, tag):
        if tag in _SKIP_TEXT and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False
        if tag in ("p", "div", "li", "td", "h1", "h2", "h3", "h4", "section"):
            self._text.append(" ")

    def handle_data(self, data):
        if self._in_title:
            self._title.append(data)
        elif not self._skip:
            self._text.append(data)

    def result(self) -> ParsedPage:
        self.page.title = " ".join("".join(self._title).split())[:300]
        self.page.text = " ".join("".join(self._text).split())
        self.page.description = " ".join(self.page.description.split())[:1000]
        return self.page


def parse_html(text: str) -> ParsedPage:
    parser = _Parser()
    try:
        parser.feed(text)
        parser.close()
    except Exception:  # a page broken beyond what HTMLParser forgives: keep what was read
        pass
    return parser.result()


def parse_plain(text: str) -> ParsedPage:
    return ParsedPage(text=" ".join(text.split()))


def top_words(text: str, n: int = 8) -> list[str]:
    """The most frequent longer words, for a brief whose page has no meta keywords."""
    words = (w.lower() for w in _WORD.findall(text))
    counts = Counter(w for w in words if w not in _STOPWORDS)
    return [w for w, _ in counts.most_common(n)]
