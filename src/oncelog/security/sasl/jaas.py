"""Kafka's `sasl.jaas.config` syntax: one JAAS login module entry.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

`<login module> <control flag> (<option>=<value>)* ;` where a value is a word or a
quoted string ('…' or "…", with Java's escapes: \\n, \\t, \\b, \\f, \\r, octal \\ooo, and
\\<c> for any other c, so \\" and \\\\), and `//` and `/* */` comments may appear between
tokens. As Kafka's JaasContext requires for `sasl.jaas.config`, there is exactly one entry.

Errors are ValueErrors that name the option, never its value (values are passwords).
"""

from __future__ import annotations

from typing import NamedTuple

CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

# Java StreamTokenizer's word characters as Kafka's JaasConfig sets them up, plus the
# digits and dots of class names and numbers.
_WORD_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.-")
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", "f": "\f", "r": "\r", "a": "\a", "v": "\v"}
_OCTAL = "01234567"


class JaasConfigEntry(NamedTuple):
    login_module: str
    flag: str  # one of CONTROL_FLAGS, lower case
    options: dict[str, str]


class _Token(NamedTuple):
    kind: str  # "word", "quoted", "=" or ";"
    text: str
    offset: int


def parse_jaas_config(text: str) -> JaasConfigEntry:
    """The one login module entry of a `sasl.jaas.config` value; ValueError if malformed."""
    tokens = _tokens(text)
    if not tokens:
        raise ValueError("JAAS config: login module not specified")
    module, *rest = tokens
    if module.kind != "word":
        raise ValueError("JAAS config: expected a login module class name first")
    if not rest or rest[0].kind not in ("word", "quoted"):
        raise ValueError("JAAS config: login module control flag not specified")
    flag_token = rest[0]
    flag = flag_token.text.lower()
    if flag not in CONTROL_FLAGS:
        found = f" {flag_token.text!r}" if flag_token.kind == "word" else ""
        raise ValueError(f"JAAS config: invalid login module control flag{found} "
                         f"(expected one of {', '.join(CONTROL_FLAGS)})")
    options: dict[str, str] = {}
    position = 1
    while position < len(rest) and rest[position].kind != ";":
        key = rest[position]
        if key.kind != "word":
            raise ValueError(f"JAAS config: expected an option name at offset {key.offset}")
        equals = rest[position + 1] if position + 1 < len(rest) else None
        value = rest[position + 2] if position + 2 < len(rest) else None
        if equals is None or equals.kind != "=" or value is None or value.kind not in ("word", "quoted"):
            raise ValueError(f"JAAS config: value not specified for option {key.text!r}")
        if key.text in options:
            raise ValueError(f"JAAS config: option {key.text!r} is given twice")
        options[key.text] = value.text
        position += 3
    if position >= len(rest):
        raise ValueError("JAAS config: entry not terminated by a semicolon")
    if position + 1 < len(rest):
        raise ValueError(f"JAAS config: exactly one login module entry is allowed, found more after offset "
                         f"{rest[position].offset}")
    return JaasConfigEntry(module.text, flag, options)


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position, end = 0, len(text)
    while position < end:
        character = text[position]
        if character.isspace():
            position += 1
        elif text.startswith("//", position):
            newline = text.find("\n", position)
            position = end if newline < 0 else newline + 1
        elif text.startswith("/*", position):
            close = text.find("*/", position + 2)
            if close < 0:
                raise ValueError(f"JAAS config: comment opened at offset {position} is not closed")
            position = close + 2
        elif character in "=;":
            tokens.append(_Token(character, character, position))
            position += 1
        elif character in "\"'":
            value, after = _quoted(text, position)
            tokens.append(_Token("quoted", value, position))
            position = after
        elif character in _WORD_CHARACTERS:
            start = position
            while position < end and text[position] in _WORD_CHARACTERS:
                position += 1
            tokens.append(_Token("word", text[start:position], start))
        else:
            # Not echoed: it may be part of an unquoted password.
            raise ValueError(f"JAAS config: unexpected character at offset {position} (quote values that contain "
                             f"characters other than letters, digits and _$.-)")
    return tokens


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The value of the quoted string opening at `start`, and the offset after it."""
    quote = text[start]
    value: list[str] = []
    position = start + 1
    while position < len(text):
        character = text[position]
        if character == quote:
            return "".join(value), position + 1
        if character == "\n":
            break
        if character == "\\" and position + 1 < len(text):
            escaped = text[position + 1]
            if escaped in _OCTAL:
                # Up to three octal digits (at most two when the first is above 3), as Java's.
                digits = 3 if escaped in "0123" else 2
                octal_end = position + 1
                while octal_end < len(text) and octal_end - position - 1 < digits and text[octal_end] in _OCTAL:
                    octal_end += 1
                value.append(chr(int(text[position + 1 : octal_end], 8)))
                position = octal_end
            else:
                value.append(_ESCAPES.get(escaped, escaped))
                position += 2
            continue
        value.append(character)
        position += 1
    raise ValueError(f"JAAS config: quoted value opened at offset {start} is not closed on its line")
