"""A small, honest CUDA C++ reader: tokens (comments gone, literals opaque) and the
top-level items of a text (function definitions and everything else).

It does not understand C++; it understands enough to say what a kernel text *defines*
and *uses* without being fooled by a comment (``// clock64()``), a string
(``"__global__"``) or layout.  Everything the structure check decides is decided on
these tokens, never on the raw text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*.*?\*/)
  | (?P<open_comment>/\*)
  | (?P<pp>\#(?:\\\n|[^\n])*)
  | (?P<raw_string>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\(.*?\)(?P=delim)")
  | (?P<string>(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*")
  | (?P<char>(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
  | (?P<open_quote>["'])
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[eEpP][+-]|[\w.'])*)
  | (?P<punct><<<|<<=|>>=|\.\.\.|->\*|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|[{}()\[\];,.<>=+\-*/%&|^!~?:])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


class ParseError(ValueError):
    """The text cannot be read as C++ tokens (one line)."""


class Token(NamedTuple):
    kind: str  # ident, number, string, char, pp (a preprocessor line), punct
    text: str
    line: int


def tokenize(text: str) -> list[Token]:
    """Tokens of ``text``; comments and whitespace dropped; raises ParseError."""
    tokens: list[Token] = []
    append = tokens.append
    line = 1
    at_line_start = True
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        value = m.group(kind)
        if kind == "ws" or kind == "line_comment" or kind == "block_comment":
            if kind != "line_comment" and "\n" in value:
                line += value.count("\n")
                at_line_start = True
            continue
        if kind == "delim":
            kind, value = "raw_string", m.group("raw_string")
        if kind == "open_comment" or kind == "open_quote":
            what = "comment" if kind == "open_comment" else "string or character literal"
            raise ParseError(f"line {line}: unterminated {what}")
        if kind == "other":
            raise ParseError(f"line {line}: unexpected character {value!r}")
        if kind == "pp" and not at_line_start:
            raise ParseError(f"line {line}: stray '#'")
        append(Token("string" if kind == "raw_string" else kind, value, line))
        at_line_start = False
        if "\n" in value:  # a raw string, or a preprocessor line continued with a backslash
            line += value.count("\n")
    return tokens


@dataclass
class Item:
    """One top-level item: a function definition (``body`` set) or anything else."""

    head: list[Token]  # tokens before the body (or the whole item)
    body: list[Token] | None = None  # tokens inside the function's braces
    line: int = 0

    @property
    def is_function(self) -> bool:
        return self.body is not None


@dataclass
class Function:
    """A function definition's parts."""

    name: str
    qualifiers: list[str]  # identifiers and strings before the name (extern, "C", __global__, void, ...)
    params: list[list[Token]]  # one token list per parameter
    line: int
    body: list[Token] = field(default_factory=list)

    @property
    def is_kernel(self) -> bool:
        return "__global__" in self.qualifiers

    @property
    def extern_c(self) -> bool:
        q = self.qualifiers
        return any(a == "extern" and b == '"C"' for a, b in zip(q, q[1:], strict=False))

    def param_types(self) -> list[str]:
        """Each parameter without its name, as normalized text (``wp::array_t<wp::float32>``)."""
        return [
            " ".join(t.text for t in (p[:-1] if p and p[-1].kind == "ident" and len(p) > 1 else p)) for p in self.params
        ]


_MATCH = {")": "(", "]": "[", "}": "{"}


def top_level_items(tokens: list[Token]) -> list[Item]:
    """Split tokens into top-level items; raises ParseError on unbalanced brackets."""
    items: list[Item] = []
    head: list[Token] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind == "punct" and t.text == ";" and not _open_parens(head):
            items.append(Item(head + [t], None, (head[0] if head else t).line))
            head = []
            i += 1
            continue
        if t.kind == "punct" and t.text == "{" and not _open_parens(head):
            end = _matching(tokens, i)
            if _looks_like_function(head):
                items.append(Item(head, tokens[i + 1 : end], (head[0] if head else t).line))
                head = []
                i = end + 1
                continue
            head += tokens[i : end + 1]  # struct / namespace / initializer: kept as one item
            i = end + 1
            continue
        if t.kind == "punct" and t.text in ")]}":
            if t.text == "}" or not _open_parens(head):
                raise ParseError(f"line {t.line}: unmatched {t.text!r}")
        head.append(t)
        i += 1
    if head:
        if _open_parens(head):
            raise ParseError(f"line {head[-1].line}: unclosed parenthesis")
        items.append(Item(head, None, head[0].line))
    return items


def _open_parens(tokens: list[Token]) -> int:
    depth = 0
    for t in tokens:
        if t.kind == "punct":
            if t.text in "([":
                depth += 1
            elif t.text in ")]":
                depth -= 1
    return depth


def _matching(tokens: list[Token], start: int) -> int:
    """Index of the bracket closing tokens[start]; ParseError if there is none."""
    stack = []
    for j in range(start, len(tokens)):
        t = tokens[j]
        if t.kind != "punct":
            continue
        if t.text in "([{":
            stack.append(t)
        elif t.text in ")]}":
            if not stack or stack[-1].text != _MATCH[t.text]:
                raise ParseError(f"line {t.line}: unmatched {t.text!r}")
            stack.pop()
            if not stack:
                return j
    raise ParseError(f"line {tokens[start].line}: unclosed {tokens[start].text!r}")


def _looks_like_function(head: list[Token]) -> bool:
    """``... name ( params ) [const|noexcept|...] {``: a function definition."""
    j = len(head) - 1
    while j >= 0 and head[j].kind == "ident" and head[j].text in ("const", "noexcept", "override", "final", "volatile"):
        j -= 1
    return j >= 1 and head[j].text == ")" and "=" not in {t.text for t in head if t.kind == "punct"}


def function(item: Item) -> Function:
    """The parts of a function-definition item."""
    head = item.head
    j = len(head) - 1
    while head[j].text != ")":
        j -= 1
    depth, k = 0, j
    while k >= 0:
        if head[k].text == ")":
            depth += 1
        elif head[k].text == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    name_tok = head[k - 1] if k >= 1 else None
    params: list[list[Token]] = [[]]
    depth = 0
    for t in head[k + 1 : j]:
        if t.text in ("(", "[", "<") and t.kind == "punct":
            depth += 1
        elif t.text in (")", "]", ">") and t.kind == "punct":
            depth -= 1
        elif t.text == ">>" and t.kind == "punct":
            depth -= 2
        if t.text == "," and depth == 0:
            params.append([])
        else:
            params[-1].append(t)
    if params == [[]]:
        params = []
    qualifiers = [t.text for t in head[: max(k - 1, 0)] if t.kind in ("ident", "string")]
    name = name_tok.text if name_tok is not None and name_tok.kind == "ident" else ""
    return Function(name, qualifiers, params, item.line, item.body or [])
