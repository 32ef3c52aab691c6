"""Kernel names people can read: C++ names demangled, long template arguments folded.

`_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctor...` becomes
`at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<…>, std::array<…>>(…)`
(folded, the default) or the whole demangled signature (`--names full`). The file keeps the raw
name (both viewers match frames by it); `--names raw` shows it.

Demangling is the C++ runtime's own (`__cxa_demangle`, through the `cxxfilt` package), else
binutils' `c++filt`, in a child process with bounds (demangle.py), else the name stays raw.

`same_name` tells whether text a user typed is one of a kernel's names as shown anywhere: raw,
folded, demangled, or pasted from `c++filt` (which starts with the `void` return type);
`cut_of` whether it is one cut short as an error message lists it.
"""
from __future__ import annotations

import functools
import re

from .demangle import demangle

STYLES = ("folded", "full", "raw")
FOLD = "…"


def readable(name: str, style: str = "folded") -> str:
    """`name` as `style` shows it; names that are not mangled C++ are returned as they are."""
    if style == "raw" or not name.startswith("_Z"):
        return name
    text = _demangle(name)
    return fold(text) if style == "folded" else text


@functools.lru_cache(maxsize=65536)
def _demangle(name: str) -> str:
    text = demangle(name)  # bounded in time, memory and length (demangle.py)
    return text.removeprefix("void ") if text else name


def same_name(typed: str, name: str) -> bool:
    """Whether `typed` names `name` as one of its shown forms (raw, folded, full) or as `c++filt`
    prints it. Spacing is ignored (demanglers differ: `> >` or `>>`; a name pasted from a folded
    terminal row has line breaks), as is a leading `void`, and `...` reads as the fold mark `…`."""
    want = _key(typed)
    return want in _forms(name)


def cut_of(typed: str, name: str) -> bool:
    """Whether `typed` is one of `name`'s shown forms cut short and ended with `...`, as error
    messages list long names (errors.listing)."""
    if not typed.rstrip().endswith("..."):
        return False
    stem = _key(typed.rstrip()[:-3])
    return bool(stem) and any(form.startswith(stem) for form in _forms(name))


def _forms(name: str) -> tuple[str, ...]:
    return tuple(_key(text) for text in (name, readable(name, "full"), readable(name)))


def _key(text: str) -> str:
    """`text` without spacing, a `void ` return type or the difference between `...` and `…`."""
    text = text.strip()
    text = text.removeprefix("void ") if text.startswith("void ") else text
    return "".join(text.replace("...", FOLD).split())


def fold(text: str) -> str:
    """Template arguments below the first level and every non-empty parameter list shown as
    `…`: f<4, a::B<float, C<int> >, D<E> >(int, X) -> f<4, a::B<…>, D<…>>(…). The angle
    brackets of operators (`operator<<`, `operator->`) are not brackets: kept as they are."""
    kept: list[str] = []

    def keep(match: re.Match) -> str:
        kept.append(match[0])
        return f"\0{len(kept) - 1}\0"

    text = _OPERATOR.sub(keep, text)
    out: list[str] = []
    angle = 0  # < > nesting outside parameter lists
    paren = 0  # ( ) nesting
    empty = True  # the parameter list being skipped has nothing in it so far
    for ch in text:
        if paren:
            if ch == "(":
                paren += 1
            elif ch == ")":
                paren -= 1
                if paren == 0:
                    out.append(")" if empty else FOLD + ")")
                    continue
            if not ch.isspace():
                empty = False
            continue
        if ch == "(" and angle <= 1:
            paren, empty = 1, True
            out.append("(")
            continue
        if ch == "<":
            angle += 1
            if angle == 1:
                out.append("<")
            elif angle == 2:
                out.append("<" + FOLD)
            continue
        if ch == ">":
            angle -= 1
            if angle <= 1:
                if out and out[-1] == " ":
                    out.pop()  # "B<…> >" -> "B<…>>"
                out.append(">")
            continue
        if angle < 2:
            out.append(ch)
    return re.sub("\0(\\d+)\0", lambda m: kept[int(m[1])], "".join(out))


_OPERATOR = re.compile(r"operator\s*(<=>|<<=|>>=|<<|>>|<=|>=|->\*?|<|>)|\(anonymous namespace\)")
"""Brackets that are no brackets: operators' and the anonymous namespace's (kept whole)."""
