"""Content-Encoding undone with a bound: a 1 MB gzip reply can stand for 1 GiB of
zeros, so a decoder hands its output out in pieces of about STEP bytes, lazily, and the
reader stops asking once its cap is passed. What is held at any time is the reader's
body plus one piece and the decoder's window (32 KiB for gzip and deflate; for brotli
no more than the cap needs, see _narrower_window), never the expanded reply."""

from __future__ import annotations

import zlib
from typing import Callable, Iterator

import brotli

STEP = 64 * 1024
ACCEPT_ENCODING = "gzip, deflate, br"


class DecodingError(ValueError):
    """The body is not valid in its declared encoding, or the encoding is not one we offered."""


class _Identity:
    def feed(self, data: bytes) -> Iterator[bytes]:
        if data:
            yield data

    def finish(self) -> Iterator[bytes]:
        return iter(())


class _Zlib:
    """gzip (member after member, as the format allows), and deflate: zlib-wrapped per
    RFC 9110, or raw, as some servers send it (told apart by the zlib header)."""

    def __init__(self, gzip: bool) -> None:
        self.gzip = gzip
        self.head = b""
        self.inflater: "zlib._Decompress | None" = None
        self.members = 0       # gzip members decoded to the end
        self.finished = False  # deflate: the stream has ended

    def _start(self, data: bytes) -> None:
        if self.gzip:
            wbits = 16 + zlib.MAX_WBITS
        else:
            zlib_header = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            wbits = zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
        self.inflater = zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self.finished:
            return  # bytes after the end of the stream are ignored, like browsers do
        if self.inflater is None:
            self.head += data
            if len(self.head) < 2:
                return
            data, self.head = self.head, b""
            self._start(data)
        try:
            while True:
                out = self.inflater.decompress(data, STEP)
                data = self.inflater.unconsumed_tail
                if out:
                    yield out
                if self.inflater.eof:
                    data = self.inflater.unused_data
                    if not self.gzip:
                        self.finished = True
                        return
                    self.members += 1
                    self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member, if any
                    if not data:
                        return
                    continue
                if not data and len(out) < STEP:  # a full piece may leave output pending
                    return
        except zlib.error as exc:
            if self.members:  # junk after a complete gzip body is ignored, like browsers do
                self.finished = True
                return
            raise DecodingError(f"the body is not valid {'gzip' if self.gzip else 'deflate'}") from exc

    def finish(self) -> Iterator[bytes]:
        return iter(())  # feed leaves no output behind; a stream cut short keeps what came


def _narrower_window(first_byte: int, needed: int) -> int:
    """The stream's first byte, declaring the smallest window of at least `needed` bytes
    if the stream declares a larger one.

    A brotli decoder holds the whole window the stream declares (up to 16 MiB) however
    little output is taken. But a back-reference can only reach as far as the output so
    far, which we cut at the cap, so a window just past the cap decodes every stream the
    same up to there. RFC 7932 9.1: bit 0 set and bits 1-3 = n > 0 mean WBITS = 17 + n
    (18..24); a rewrite within those keeps the header's length, so the rest is untouched."""
    n = (first_byte >> 1) & 7
    if not first_byte & 1 or not n:
        return first_byte  # WBITS 10..17: 128 KiB at most already
    wbits = next((w for w in range(18, 25) if (1 << w) - 16 >= needed), 24)
    if wbits >= 17 + n:
        return first_byte
    return (first_byte & ~0b1110) | ((wbits - 17) << 1)


class _Brotli:
    def __init__(self, max_bytes: int) -> None:
        self.decompressor = brotli.Decompressor()
        # A window as large as the cap: a stream that needs more is over the cap anyway
        # (its error, if the narrowed window trips it, comes only past that point).
        self.window_needed = max_bytes
        self.started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        if data and not self.started:
            self.started = True
            data = bytes([_narrower_window(data[0], self.window_needed)]) + data[1:]
        try:
            out = self.decompressor.process(data, output_buffer_limit=STEP)
            if out:
                yield out
            # Past the limit, the rest comes from calls with no input, until it may take more.
            yield from self._held(lambda: not self.decompressor.can_accept_more_data())
        except brotli.error as exc:
            raise DecodingError("the body is not valid brotli") from exc

    def finish(self) -> Iterator[bytes]:
        """The output still held when the input has ended (it can take more input while
        holding some)."""
        try:
            yield from self._held(lambda: self.started and not self.decompressor.is_finished())
        except brotli.error as exc:
            raise DecodingError("the body is not valid brotli") from exc

    def _held(self, more: Callable[[], bool]) -> Iterator[bytes]:
        """Output the decompressor holds, a step at a time, while `more()` says so."""
        while more():
            out = self.decompressor.process(b"", output_buffer_limit=STEP)
            if not out:
                return
            yield out


def decoder_for(content_encoding: str | None, max_bytes: int):
    """A decoder for the reply's Content-Encoding, for a reader that keeps at most
    `max_bytes`; DecodingError for a coding we did not offer (or a stack of several,
    which nobody sends to a client that asked for one)."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return _Identity()
    if len(codings) == 1:
        if codings[0] in ("gzip", "x-gzip"):
            return _Zlib(gzip=True)
        if codings[0] == "deflate":
            return _Zlib(gzip=False)
        if codings[0] == "br":
            return _Brotli(max_bytes)
    raise DecodingError(f"content encoding {content_encoding!r} is not one we accept")
