"""Estimate what a text costs in tokens, cheaply, without a tokenizer.

chars/4 holds for English prose and undercounts the rest: code by ~8%, number-heavy JSON by
30-50%, Chinese 3-5x. This estimate charges each class of character what it costs in real BPE
vocabularies (ASCII letters little, digits, CJK and emoji a lot, spaces nothing) and adds a token
where merges stop (a lowercase-to-uppercase step, a number after a space). The weights, with
their reasons below, are fitted by ``benchmarks/counting/bench_estimator.py`` to land between OpenAI's
cl100k_base and Qwen2.5's: within ±15% of both on English prose, source code and JSON tool output.

Where one vocabulary needs over 1.35x the other's tokens no single number is within 15% of both:
Qwen spends 0.55-0.6 of cl100k's tokens on Chinese and Japanese, so there the estimate sits in
the middle (about 28% under cl100k, 28% over Qwen). Calibrating against the upstream's reported
``usage`` removes that offset for a given model.

It works on bytes, all in C: encoding to UTF-8 and deleting continuation bytes in one
``bytes.translate`` leaves one class byte per character (a lead byte names the character's
Unicode block), then 7 ``bytes.count`` calls (13 if the text is not ASCII). Linear time, no
regular expressions, 10-30x faster than tiktoken.
"""

from __future__ import annotations

__all__ = ["estimate_text_tokens"]


def _class_table() -> bytes:
    """Map every byte of UTF-8 to a one-letter class; continuation bytes are deleted before."""
    table = bytearray(b"s" * 256)  # space, tab, \r and control characters: free
    for byte in range(0x80):
        char = chr(byte)
        if char.islower():
            table[byte] = ord("l")
        elif char.isupper():
            table[byte] = ord("u")
        elif char.isdigit():
            table[byte] = ord("d")
        elif char == "\n":
            table[byte] = ord("n")
        elif 0x21 <= byte <= 0x7E:
            table[byte] = ord("p")
    # Lead bytes of multi-byte characters. A lead byte fixes the top bits of the code point.
    table[0xC2] = ord("y")  # U+0080-00BF: no-break space, ©, °, «, »
    table[0xC3:0xC6] = b"a" * 3  # U+00C0-017F: Latin-1 and Latin Extended-A letters (é, ü, ł)
    table[0xC6:0xE0] = b"c" * 26  # U+0180-07FF: Greek, Cyrillic, Hebrew, Arabic, ...
    table[0xE0:0xF0] = b"y" * 16  # U+0800-FFFF not named below: Indic, Thai, symbols
    table[0xE3:0xEA] = b"h" * 7  # U+3000-9FFF: CJK punctuation, kana, Han ideographs
    table[0xEA:0xEE] = b"g" * 4  # U+A000-DFFF: mostly Hangul syllables
    table[0xF0:0xF8] = b"e" * 8  # U+10000 and up: emoji, rare ideographs
    return bytes(table)


_CLASSES = _class_table()
_CONTINUATION = bytes(range(0x80, 0xC0))

# Tokens per character, by class. Spaces, tabs and \r cost nothing: they ride on the next word.
_ASCII_WEIGHTS = (
    (b"l", 0.23),  # lowercase letters: an English word of 4-5 letters is about one token
    (b"u", 0.23),  # uppercase letters: the same
    (b"d", 0.95),  # digits: cl100k groups three a token, Qwen spends one on each
    (b"p", 0.43),  # punctuation: pairs such as `",` and `":` merge
    (b"n", 1.15),  # newline: a token, and the indent after it often another
)
_WIDE_WEIGHTS = (
    (b"h", 0.8),  # Han, kana, CJK punctuation: cl100k spends 1.0-1.3, Qwen 0.55-0.65
    (b"g", 1.05),  # Hangul syllables: cl100k 1.3, Qwen 0.85
    (b"c", 0.45),  # Cyrillic, Greek, Hebrew, Arabic letters: a token per 2-3 letters
    (b"a", 2.8),  # accented Latin: splits its word, and marks a language BPE covers less well
    (b"y", 1.1),  # symbols, full-width punctuation, Indic, Thai: about a token each
    (b"e", 2.1),  # emoji: 2-3 byte-level tokens in cl100k, 1-2 in Qwen
)
# Extra tokens where merges stop: at a pair of neighbouring classes.
_CASE_STEP = (b"lu", 0.9)  # camelCase humps, and base64's random case
_SPACED_NUMBER = (b"sd", 1.9)  # the space before a number is a token; spaced numbers are the long ones


def estimate_text_tokens(text: str) -> int:
    """Estimate the tokens ``text`` costs; 0 only for the empty string, deterministic, linear."""
    if not text:
        return 0
    raw = text.encode("utf-8", "surrogatepass")
    classes = raw.translate(_CLASSES, _CONTINUATION)
    count = classes.count
    total = sum(count(cls) * weight for cls, weight in _ASCII_WEIGHTS)
    total += count(_CASE_STEP[0]) * _CASE_STEP[1] + count(_SPACED_NUMBER[0]) * _SPACED_NUMBER[1]
    if len(raw) != len(text):
        total += sum(count(cls) * weight for cls, weight in _WIDE_WEIGHTS)
    return max(1, int(total + 0.5))
